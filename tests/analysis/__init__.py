"""Tests of the fedray.analysis floor."""
