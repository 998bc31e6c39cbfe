"""Search FLACC's merge threshold alpha_0 and learning rate on rotated digits with Ray Tune.

Each trial is one fedray experiment (``fedray.tune.trainable``); ASHA stops the trials whose
accuracy lags, between rounds. Needs ``pip install "fedray[nn,tune]"``.

    python examples/tune_flacc.py                          # on this machine (an embedded Ray instance)
    python examples/tune_flacc.py --address auto           # on the Ray cluster this node belongs to
    python examples/tune_flacc.py --samples 2 --rounds 6   # a quick look
    python examples/tune_flacc.py --quick                  # a smoke run: one trial of 2 rounds

Tune keeps its results under ``~/fedray-tune-results`` (``--storage``), outside the project.

The table printed at the end has one row per trial: alpha_0, lr, the rounds it ran and its
final accuracy (empty for the trials ASHA stopped). A finished trial's last report holds the final
accuracy as ``accuracy`` (the last round's is ``round_accuracy``; see ``docs/results.md``), so the
best trial is the one with the best final accuracy.
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
    "data": {
        "dataset": "sklearn:digits",
        "partition": {"name": "rotated", "proportions": [0.25, 0.25, 0.25, 0.25], "samples": [40, 80]},
    },  # fewer rows than digits holds: no client shares a sample
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
    ap.add_argument("--storage", default=os.path.expanduser("~/fedray-tune-results"),
                    help="where Tune keeps its results")
    ap.add_argument("--quick", action="store_true", help="one trial of 2 rounds (a smoke run)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    ray.init(address=args.address, include_dashboard=False, logging_level="ERROR")
    if args.quick:
        args.samples, args.rounds = 1, 2
    alphas = [0.3] if args.quick else [0.0, 0.3, 0.6]
    base = {**BASE, "federation": {**BASE["federation"], "rounds": args.rounds}}
    tuner = tune.Tuner(
        trainable(base, checkpoint_every=5, metrics=("accuracy",)),
        param_space={"algorithm.params.alpha_0": tune.grid_search(alphas),
                     "algorithm.params.lr": tune.loguniform(0.01, 0.3)},
        tune_config=tune.TuneConfig(metric="accuracy", mode="max", num_samples=args.samples,
                                    max_concurrent_trials=args.concurrent,
                                    scheduler=ASHAScheduler(max_t=args.rounds + 1, grace_period=3)),
        run_config=tune.RunConfig(name="tune_flacc", storage_path=args.storage, verbose=1),
    )
    results = tuner.fit()
    table = results.get_dataframe()
    cols = ["config/algorithm.params.alpha_0", "config/algorithm.params.lr", "round", "round_accuracy", "accuracy"]
    print(table[[c for c in cols if c in table]].sort_values("accuracy", ascending=False).to_string(index=False))
    best = results.get_best_result()
    print(f"best: alpha_0={best.config['algorithm.params.alpha_0']}, lr={best.config['algorithm.params.lr']:.4g}, "
          f"final accuracy {best.metrics['accuracy']:.3f}; its outputs: {best.path}/fedray")


if __name__ == "__main__":
    main()
