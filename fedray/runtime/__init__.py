"""Where clients live: the executor interface, the client host, the local runtime, the Ray
executor, connecting to clusters and shipping code."""
