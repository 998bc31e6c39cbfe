"""Algorithms of fedray, one module per method. Importing a module registers it."""
