"""Figures over plain data (matplotlib): one style for every plot of fedray."""
