"""Tests of the fedray.nn floor."""
