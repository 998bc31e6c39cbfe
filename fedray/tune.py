"""Ray Tune trainables for fedray experiments (the published path; needs the ``tune`` extra).

The code lives in :mod:`fedray.analysis.tune`; this module keeps the import path
``from fedray.tune import trainable`` that the README and docs/tuning.md give.
"""
from fedray.analysis.tune import DEFAULT_METRICS, Reporter, run_trial, trainable, trial_bundles, trial_config

__all__ = ["DEFAULT_METRICS", "Reporter", "run_trial", "trainable", "trial_bundles", "trial_config"]
