"""Tests of the fedray.plots floor."""
