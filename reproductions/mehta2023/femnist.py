"""FLACC on FEMNIST by writer (Mehta & Shao 2023, Fig. 5 and the FEMNIST column of Table I).

Every writer of LEAF's FEMNIST is one client, with LEAF's own train/test rows of that
writer (``data.dataset: femnist``, partition ``by_writer``). FLACC and FedAvg (and, if
asked, the other Table I methods: ``local``, ``ifca``, ``cfl``, ``flhc``) run on the
same federation and seed; the script reports the mean client test accuracy at the
end, the accuracy over rounds, the number of clusters FLACC found and the round at
which it separated them.

The paper's setting is 195 writers, 39 a round (c = 0.2), E = 5, B = 32, SGD lr
0.05, N_server = 200, its CNN (``cnn28``), n_merge = 2, T = 10, N_sep = 10. The
defaults here are a reduced setting that a 2-core machine runs in minutes per run:
every writer with training rows of the data directory, c = 0.2, E = 1, 60 rounds,
evaluation every 5 rounds.

Writes to ``--out``: ``runs.csv`` (one row a run; appended as each run ends; runs
already there are skipped), ``rounds.csv`` (accuracy per evaluated round),
``clusters_seed{S}.csv`` (FLACC's cluster of every writer), ``table.md`` and
``accuracy.png`` (first seed; the dotted line is FLACC's separation).

    python -m reproductions.mehta2023.femnist --data-dir ../shared/datasets --seeds 0 1 2
    python -m reproductions.mehta2023.femnist --data-dir ../shared/datasets --writers 195 --rounds 200 --epochs 5 \\
        --methods local fedavg ifca cfl flhc flacc --seeds 0 1 2 3 4          # the paper's setting
    python -m reproductions.mehta2023.femnist --quick --data-dir ../shared/datasets --out /tmp/q   # seconds, for tests
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import fedray

log = logging.getLogger("flacc_femnist")
#: the methods --branch derives from one FLACC run (reproductions/mehta2023/branching.py)
BRANCHED = ("flacc", "flacc-control", "fedavg")
METHODS = ["local", "fedavg", "ifca", "cfl", "flhc", "flacc", "flacc-control"]
LABELS = {"local": "NoFed", "fedavg": "FedAvg", "ifca": "IFCA", "cfl": "CFL", "flhc": "FL+HC", "flacc": "FLACC",
          "flacc-control": "FLACC control (random groups)"}
#: Table I, FEMNIST column (mean ± std over 5 runs; IFCA's best k = 5, FL+HC's best d = 0.8)
PAPER = {"local": "65.11 ± 0.32", "fedavg": "77.57 ± 0.48", "ifca": "77.64 ± 0.16 (k = 5)",
         "cfl": "72.42 ± 3.21", "flhc": "71.85 ± 2.99 (d = 0.8)", "flacc": "82.92 ± 0.30",
         "flacc-control": "— (not in the paper)"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None, help="folder holding femnist/ (default $FEDRAY_DATA_DIR)")
    p.add_argument("--classes", default="all", help="data.options.classes of femnist (all, digits, letters, ...)")
    p.add_argument("--writers", type=int, default=None, help="clients (writers); default every writer with "
                   "training rows")
    p.add_argument("--min-samples", type=int, default=0, help="writers with fewer training rows are left out")
    p.add_argument("--methods", nargs="+", default=["flacc", "fedavg"], choices=METHODS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--fraction", type=float, default=0.2)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--model", default="auto")
    p.add_argument("--n-merge", type=int, default=2)
    p.add_argument("--n-sep", type=int, default=10)
    p.add_argument("--ifca-k", type=int, default=5)
    p.add_argument("--flhc-d", type=float, default=0.8)
    p.add_argument("--branch", action="store_true",
                   help="run FLACC once with a checkpoint every round, then the control and FedAvg from its "
                        "checkpoint before separation (bit for bit the runs from round 0; interrupted runs resume)")
    p.add_argument("--quick", action="store_true", help="seconds: 12 writers, 4 rounds, mlp, N_sep 1")
    p.add_argument("--out", default="results/flacc_femnist")
    args = p.parse_args(argv)
    if args.quick:
        args.writers, args.rounds, args.eval_every, args.model, args.n_sep = 12, 4, 2, "mlp", 1
        args.fraction, args.seeds = 0.5, args.seeds[:1]
    return args


def extra(method: str, args: argparse.Namespace) -> dict[str, Any]:
    if method == "flacc":
        return {"n_merge": args.n_merge, "n_sep": args.n_sep}
    if method == "flacc-control":  # the same run up to separation, then random groups of the clusters' sizes
        return {"n_merge": args.n_merge, "n_sep": args.n_sep, "control": "random-groups"}
    if method == "ifca":
        return {"n_clusters": args.ifca_k}
    if method == "flhc":
        return {"distance_threshold": args.flhc_d, "normalize": True}
    return {}


def config(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    train = {"epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size, "eval_every": args.eval_every,
             "model": args.model}
    partition: dict[str, Any] = {"name": "by_writer"}
    if args.min_samples:
        partition["min_samples"] = args.min_samples
    return {"seed": seed, "algorithm": {"name": "fedavg", "params": train},
            "data": {"dataset": "femnist", "data_dir": args.data_dir, "options": {"classes": args.classes},
                     "partition": partition},
            "federation": {"n_clients": args.writers, "fraction": args.fraction, "rounds": args.rounds},
            "runtime": {"backend": "local", "progress": False}}


def run_seed(args: argparse.Namespace, seed: int, methods: list[str], out: Path,
             save: Callable[[dict, pd.DataFrame], None]) -> None:
    """Run ``methods`` on one seed's federation; ``save`` gets each run's row and rounds as it ends."""
    with fedray.Session(config(args, seed)) as s:
        train = dict(s.config.algorithm.params)
        for method in methods:
            t0 = time.perf_counter()
            log.info("seed %d %s: starting", seed, method)
            algo = "flacc" if method == "flacc-control" else method
            res = s.run(algo, {**train, **extra(method, args)}, output=False, progress=True)
            fin = res.final
            row = {
                "seed": seed,
                "method": method,
                "writers": s.info.n_clients,
                "accuracy": 100 * float(fin["accuracy"]),
                "n_clusters": fin.get("n_clusters"),
                "separation_round": fin.get("separation_round"),
                "rounds": int(res.summary["rounds"]),
                "wall_s": time.perf_counter() - t0,
                "load_1min": os.getloadavg()[0],
                "via": "run",
            }
            if method == "flacc":
                pd.DataFrame({"client": np.arange(len(fin["assignment"])), "cluster": np.asarray(fin["assignment"]),
                              "n_samples": res.clients["n_samples"].to_numpy()}
                             ).to_csv(out / f"clusters_seed{seed}.csv", index=False)
            save(row, _rounds(res.history, seed, method))


def _rounds(history: pd.DataFrame, seed: int, method: str) -> pd.DataFrame:
    hh = history[[c for c in ("round", "accuracy", "n_clusters") if c in history]].dropna(subset=["accuracy"]).copy()
    hh["seed"], hh["method"] = seed, method
    return hh


def branch_seed(args: argparse.Namespace, seed: int, methods: list[str], out: Path,
                save: Callable[[dict, pd.DataFrame], None]) -> None:
    """FLACC once to its separation round, then the control and FedAvg arms from its checkpoint there.

    See ``reproductions/mehta2023/branching.py``: the arms are bit for bit the runs from round 0."""
    from reproductions.mehta2023 import branching as fb

    folder = out / f"branches_seed{seed}"
    cfg = config(args, seed)
    params = {**cfg["algorithm"]["params"], **extra("flacc", args)}
    dirs = {"flacc": fb.run_trunk(cfg, params, folder)}
    writers = json.loads((dirs["flacc"] / "summary.json").read_text())["n_clients"]
    for arm in [m for m in ("flacc-control", "fedavg") if m in methods]:
        dirs[arm] = fb.run_arm(folder, arm) or dirs["flacc"]  # an arm of a run that never separated is FLACC's
    clients = pd.read_parquet(dirs["flacc"] / "clients.parquet")
    clients[["client_id", "cluster", "n_train"]].rename(columns={"client_id": "client", "n_train": "n_samples"}) \
        .to_csv(out / f"clusters_seed{seed}.csv", index=False)
    fb.per_cluster(folder).to_csv(out / f"per_cluster_seed{seed}.csv", index=False)
    for method in [m for m in ("flacc", "flacc-control", "fedavg") if m in methods]:
        row = {"seed": seed, "method": method, "writers": writers, **fb.summary_row(dirs[method]),
               "wall_s": float("nan"), "load_1min": os.getloadavg()[0], "via": f"branch {folder.name}/{method}"}
        if method == "fedavg":
            row["n_clusters"] = 1
        save(row, _rounds(pd.read_parquet(dirs[method] / "rounds.parquet"), seed, method))


def markdown(runs: pd.DataFrame, args: argparse.Namespace) -> str:
    lines = ["| method | accuracy % (mean ± std) | seeds | clusters | separation round | paper (195 writers) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for method in [m for m in METHODS if m in set(runs["method"])]:
        r = runs[runs["method"] == method]
        clusters = pd.to_numeric(r["n_clusters"], errors="coerce").dropna()
        sep = pd.to_numeric(r["separation_round"], errors="coerce").dropna()
        lines.append(f"| {LABELS[method]} | {r['accuracy'].mean():.2f} ± {r['accuracy'].std(ddof=0):.2f} | "
                     f"{len(r)} | {', '.join(f'{c:g}' for c in clusters) or '—'} | "
                     f"{', '.join(f'{x:g}' for x in sep) or '—'} | {PAPER[method]} |")
    lines += ["", f"Settings: femnist ({args.classes}) by writer, {int(runs['writers'].iloc[0])} writers, fraction "
              f"{args.fraction}, {args.rounds} rounds, E = {args.epochs}, B = {args.batch_size}, SGD lr {args.lr}, "
              f"model {args.model}, evaluation every {args.eval_every} rounds; FLACC alpha_0 = 0, T = 10, n_merge = "
              f"{args.n_merge}, N_sep = {args.n_sep}; load average (1 min) at the end of the runs "
              f"{runs['load_1min'].min():.1f}-{runs['load_1min'].max():.1f}."]
    return "\n".join(lines) + "\n"


def figure(rounds: pd.DataFrame, runs: pd.DataFrame, seed: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedray.algorithms.flacc import plot_accuracy

    r = rounds[rounds["seed"] == seed]
    shown = ("flacc", "flacc-control", "fedavg", "local")
    hs = {LABELS[m]: r[r["method"] == m] for m in shown if m in set(r["method"])}
    sep = runs[(runs["seed"] == seed) & (runs["method"] == "flacc")]["separation_round"]
    sep = pd.to_numeric(sep, errors="coerce").dropna()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    plot_accuracy(hs, ax=ax, separation_round=int(sep.iloc[0]) if len(sep) else None,
                  title=f"FEMNIST by writer, seed {seed}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs_path, rounds_path = out / "runs.csv", out / "rounds.csv"
    saved = {"runs": pd.read_csv(runs_path) if runs_path.exists() else pd.DataFrame(columns=["seed", "method"]),
             "rounds": pd.read_csv(rounds_path) if rounds_path.exists() else pd.DataFrame()}

    def save(row: dict, rounds: pd.DataFrame) -> None:  # each run is on disk as soon as it ends
        saved["runs"] = pd.concat([saved["runs"], pd.DataFrame([row])], ignore_index=True)
        saved["rounds"] = pd.concat([saved["rounds"], rounds], ignore_index=True)
        saved["runs"].to_csv(runs_path, index=False)
        saved["rounds"].to_csv(rounds_path, index=False)
        log.info("seed %d %s: accuracy %.2f, clusters %s, separation %s (load %.1f)", row["seed"], row["method"],
                 row["accuracy"], row["n_clusters"], row["separation_round"], row["load_1min"])

    done = set(zip(saved["runs"]["seed"], saved["runs"]["method"]))
    for seed in args.seeds:
        todo = [m for m in args.methods if (seed, m) not in done]
        branched = [m for m in todo if args.branch and m in BRANCHED]
        if branched:
            branch_seed(args, seed, branched, out, save)
        rest = [m for m in todo if m not in branched]
        if rest:
            run_seed(args, seed, rest, out, save)
    runs, rounds = saved["runs"], saved["rounds"]
    (out / "table.md").write_text(markdown(runs, args))
    figure(rounds, runs, args.seeds[0], out / "accuracy.png")
    log.info("%s", (out / "table.md").read_text())
    return runs


if __name__ == "__main__":
    main()
