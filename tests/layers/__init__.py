"""Tests of the fedray.layers floor."""
