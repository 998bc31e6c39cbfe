"""Tests of the fedray.runtime floor."""
