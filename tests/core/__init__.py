"""Tests of the fedray.core floor."""
