"""Tests of the fedray.tools floor."""
