"""Work over many runs or many calls: K selection, sweeps, validation, estimators."""
