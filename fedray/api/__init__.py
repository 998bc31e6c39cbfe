"""What users call: the configuration, sessions, run and resume, results, outputs, checkpoints."""
