"""Search FLACC's merge threshold alpha_0 and learning rate on rotated digits with Ray Tune.

Each trial is one fedray experiment (``fedray.tune.trainable``); ASHA stops the trials whose
accuracy lags, between rounds. Needs ``pip install "fedray[nn,tune]"``.

    python examples/tune_flacc.py                          # on this machine (an embedded Ray instance)
    python examples/tune_flacc.py --address auto           # on the Ray cluster this node belongs to
    python examples/tune_flacc.py --samples 2 --rounds 6   # a quick look

The table printed at the end has one row per trial: alpha_0, lr, the rounds it ran and its
final accuracy (empty for the trials ASHA stopped).
"""
from __future__ import annotations

import argparse
import logging
import os

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler

from fedray.tune import trainable

BASE = {
    "algorithm": {"name": "flacc", "params": {"epochs": 2, "batch_size": 32, "n_merge": 1, "n_sep": 4}},
    "data": {"dataset": "sklearn:digits",
             "partition": {"name": "rotated", "proportions": [0.25, 0.25, 0.25, 0.25], "samples": [60, 120]}},
    "federation": {"n_clients": 16, "fraction": 0.5, "rounds": 20},
    "runtime": {"backend": "local"},
    "output": {"plots": False},
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default=None, help="Ray cluster address (default: start Ray on this machine)")
    ap.add_argument("--samples", type=int, default=4, help="learning rates drawn per alpha_0 value")
    ap.add_argument("--rounds", type=int, default=20, help="federation.rounds of each trial")
    ap.add_argument("--concurrent", type=int, default=None, help="trials at once (default: as the CPUs allow)")
    ap.add_argument("--storage", default=os.path.abspath("tune-results"), help="where Tune keeps its results")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    ray.init(address=args.address, include_dashboard=False, logging_level="ERROR")
    base = {**BASE, "federation": {**BASE["federation"], "rounds": args.rounds}}
    tuner = tune.Tuner(
        trainable(base, checkpoint_every=5, metrics=("accuracy",)),
        param_space={"algorithm.params.alpha_0": tune.grid_search([0.0, 0.3, 0.6]),
                     "algorithm.params.lr": tune.loguniform(0.01, 0.3)},
        tune_config=tune.TuneConfig(metric="accuracy", mode="max", num_samples=args.samples,
                                    max_concurrent_trials=args.concurrent,
                                    scheduler=ASHAScheduler(max_t=args.rounds + 1, grace_period=3)),
        run_config=tune.RunConfig(name="tune_flacc", storage_path=args.storage, verbose=1),
    )
    results = tuner.fit()
    table = results.get_dataframe()
    cols = ["config/algorithm.params.alpha_0", "config/algorithm.params.lr", "round", "accuracy", "final_accuracy"]
    print(table[[c for c in cols if c in table]].sort_values("accuracy", ascending=False).to_string(index=False))
    best = results.get_best_result()
    print(f"best: alpha_0={best.config['algorithm.params.alpha_0']}, lr={best.config['algorithm.params.lr']:.4g}, "
          f"accuracy {best.metrics['accuracy']:.3f}; its outputs: {best.path}/fedray")


if __name__ == "__main__":
    main()
