"""Mehta & Shao (2023), Table I: one run a (method, seed) of one column, recorded in the lab as it ends.

Each claim of a Table I column names its federation here (:data:`COLUMNS`); a run is one call of
:func:`reproductions.mehta2023.table.run_table` (the Table I script) for one method and seed, and its
accuracy, clusters, ARI and separation round go to ``results/<claim>.csv``. Runs already recorded are
skipped. Methods: ``flacc``, ``fedavg``, ``flacc-control`` (FLACC's control arm: random groups of the
sizes of the clusters found, from its separation round), ``nofed``, ``ifca`` (k = the true number of
groups), ``flhc`` (d = 0.9 on raw updates), ``cfl`` (every client every round); ``flacc-alpha0.1`` is
FLACC with α₀ = +0.1. Per-FedAvg and pFedMe are plug-ins (``examples/plugins``) run by the Table I
script (``--methods examples.plugins.perfedavg:PerFedAvg``); their numbers here are the notebook's.

    python -m reproductions run mehta2023/table1-rotated-mnist --seeds 0 1 2 3 4
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

from reproductions.common import Claim, pending, record_run
from reproductions.mehta2023 import table
from reproductions.mehta2023.robustness import group_similarity

log = logging.getLogger("mehta2023.table1")

PAPER = "mehta2023"
MNIST = {"dataset": "mnist", "data_options": {"part": "train"}, "lr": 0.1}
CIFAR = {"dataset": "cifar10", "data_options": {"part": "all"}, "lr": 0.075}
#: the federation of each column's claim, at each scale
COLUMNS: dict[str, dict[str, dict[str, Any]]] = {
    "table1-rotated-mnist": {
        "reduced": {**MNIST, "federation": "rotated", "n_clients": 20, "fraction": 0.3, "samples": (200, 800),
                    "epochs": 5, "rounds": 30},
        "paper": {**MNIST, "federation": "rotated", "n_clients": 100, "fraction": 0.2, "samples": (200, 800),
                  "epochs": 5, "rounds": 100}},
    "table1-grouped-cifar10": {
        "reduced": {**CIFAR, "federation": "grouped", "n_clients": 15, "fraction": 0.4, "samples": (300, 600),
                    "epochs": 2, "rounds": 25, "control_params": {"alpha_0": 0.1}},
        "paper": {**CIFAR, "federation": "grouped", "n_clients": 100, "fraction": 0.2, "samples": (300, 600),
                  "epochs": 5, "rounds": 100}},
    "table1-grouped-cifar10-40": {
        "reduced": {**CIFAR, "federation": "grouped", "n_clients": 40, "fraction": 0.3, "samples": (300, 600),
                    "epochs": 5, "rounds": 100}},
    "table1-label-swapped-cifar10": {
        "reduced": {**CIFAR, "federation": "label-swapped", "n_clients": 15, "fraction": 0.4, "samples": (300, 600),
                    "epochs": 2, "rounds": 25},
        "paper": {**CIFAR, "federation": "label-swapped", "n_clients": 100, "fraction": 0.2,
                  "samples": (300, 600), "epochs": 5, "rounds": 100}},
    "table1-label-swapped-cifar10-40": {
        "reduced": {**CIFAR, "federation": "label-swapped", "n_clients": 40, "fraction": 0.3, "samples": (300, 600),
                    "epochs": 5, "rounds": 100}},
}
#: label-swapped CIFAR-10 with the paper's E = 5 and a smaller step than its η = 0.075, which diverged at 40 clients
COLUMNS["table1-label-swapped-cifar10-e5"] = {
    "reduced": {**COLUMNS["table1-label-swapped-cifar10"]["reduced"], "epochs": 5, "lr": 0.04}}
COLUMNS["table1-rotated-mnist-paper"] = {"paper": COLUMNS["table1-rotated-mnist"]["paper"]}
#: the lab's method names and the Table I script's
SCRIPT_METHOD = {"nofed": "local", "flacc-alpha0.1": "flacc"}
DEFAULT_METHODS = ("flacc", "fedavg", "flacc-control")


def sizes_text(col: dict[str, Any]) -> str:
    lo, hi = col["samples"]
    return (f"{col['n_clients']} clients, c = {col['fraction']}, {lo}–{hi} samples, E = {col['epochs']}, "
            f"η = {col['lr']}, {col['rounds']} rounds")


def script_args(col: dict[str, Any], method: str, seed: int, data_dir: str | None, quick: bool) -> Any:
    """The Table I script's arguments of one (method, seed) run of a column."""
    name = SCRIPT_METHOD.get(method, method)
    params = dict(col.get("control_params", {})) if method == "flacc-control" else {}
    if method == "flacc-alpha0.1":
        params["alpha_0"] = 0.1
    argv = ["--federations", col["federation"], "--methods", name, "--seeds", str(seed), "--n-merge", "2",
            "--ifca-k", str(table.N_GROUPS[col["federation"]]), "--flhc-d", "0.9", "--flacc-params", json.dumps(params)]
    if quick:
        return table.parse_args(argv + ["--quick"])
    argv += ["--dataset", col["dataset"], "--data-options", json.dumps(col["data_options"]), "--lr", str(col["lr"]),
             "--n-clients", str(col["n_clients"]), "--fraction", str(col["fraction"]),
             "--samples", *map(str, col["samples"]), "--rounds", str(col["rounds"]), "--epochs", str(col["epochs"]),
             "--eval-every", "5"]
    if data_dir:
        argv += ["--data-dir", data_dir]
    return table.parse_args(argv)


def run_claim(claim: Claim, scale: str, seeds: list[int], quick: bool, data_dir: str | None,
              methods: tuple[str, ...] | None = None) -> None:
    """Run and record the claim's methods (default: FLACC, FedAvg and the control arm) on its column."""
    col = COLUMNS[claim.id][scale]
    methods = methods or tuple(m for m in (claim.methods or DEFAULT_METHODS) if m in DEFAULT_METHODS)
    records = claim.records or claim.id
    for job in pending(PAPER, records, [{"method": m, "seed": s, "scale": scale} for s in seeds for m in methods]):
        method, seed = job["method"], int(job["seed"])
        args = script_args(col, method, seed, data_dir, quick)
        t0 = time.perf_counter()
        runs, _, details = table.run_table(args)
        row = runs.iloc[0]
        metrics = {"accuracy": float(row["accuracy"]), "n_clusters": float(row["n_clusters"]),
                   "ari": float(row["ari"]), "separation_round": row["separation_round"],
                   "found_ari": float(row["found_ari"]), "shared_samples": bool(row["shared_samples"])}
        for d in details.values():  # FLACC: the mean update similarity within and across the true groups
            metrics.update(group_similarity(d))
        record_run(PAPER, records, method=method, seed=seed, scale=scale, sizes=sizes_text(col),
                   metrics=metrics, config={k: v for k, v in vars(args).items() if k != "out"},
                   wall_s=time.perf_counter() - t0)
