"""The notebooks (notebooks/): committed outputs are clean, and each runs with small parameters."""
