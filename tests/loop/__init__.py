"""Tests of the fedray.loop floor."""
