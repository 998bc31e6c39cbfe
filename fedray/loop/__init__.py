"""The server's round loop, the only one in fedray."""
