"""Tests of the fedray.data floor."""
