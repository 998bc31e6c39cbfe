"""Ray cluster files installed with fedray (``fedray cluster init DEST`` copies them out)."""
