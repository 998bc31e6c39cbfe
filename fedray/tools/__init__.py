"""The command line and the cluster-file checks."""
