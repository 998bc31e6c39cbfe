"""Tests of the algorithms floor (fedray.algorithms, algorithms/) and of plug-in algorithms."""
