"""Tests of the fedray.api floor."""
