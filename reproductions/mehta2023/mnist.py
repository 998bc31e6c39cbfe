"""Table I of Mehta & Shao 2023 on rotated MNIST: the six methods over several seeds, one run at a time.

Every (seed, method) pair is one run of :mod:`flacc_table` (same settings, same
code); its rows are appended to ``results.csv`` in ``--out`` as soon as it
finishes, and pairs already there are skipped, so the script can be stopped and
started again, or run for one seed or one method at a time (in parallel
processes writing to different folders, then ``--table-only`` over a folder
holding the concatenated file). After every run ``table.md`` is rewritten from
all the rows so far (mean ± std over the seeds that finished, and the count).

The paper's setting (100 clients, c = 0.2, 100 rounds, E = 5, 600 samples a
client) costs hours per run on one CPU core with the paper's CNN; the defaults
here are a reduced but stated size: 20 clients, fraction 0.3, 60-120 samples a
client (85/15 train/test), E = 2, 30 rounds, evaluation every 10 rounds, IFCA
with k = s = 4 and FL+HC with one cut-off (d = 0.9 on raw updates: the Ward
heights of the top merges of 20 clients' raw updates lie at 0.5-1.25 after 5
FedAvg rounds). Order: seeds outer, methods inner, so every finished seed has all
the methods.

Examples::

    python -m reproductions.mehta2023.mnist --data-dir ../shared/datasets --out runs/flacc_mnist
    python -m reproductions.mehta2023.mnist --data-dir ../shared/datasets --seeds 3 --methods cfl --out runs/m3
    python -m reproductions.mehta2023.mnist --out runs/flacc_mnist --table-only
    python -m reproductions.mehta2023.mnist --quick --dataset sklearn:digits --out /tmp/q    # seconds, for tests
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import pandas as pd

from reproductions.mehta2023 import table as flacc_table  # the same runs, the same table layout

log = logging.getLogger("flacc_mnist")
METHODS = ["flacc", "fedavg", "local", "ifca", "flhc", "cfl"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-dir", default=None, help="folder holding mnist/ (default $FEDRAY_DATA_DIR)")
    p.add_argument("--data-options", default=None,
                   help="JSON of data.options, e.g. '{\"part\": \"train\"}' for MNIST's 60,000 training images")
    p.add_argument("--partition-options", default=None, help="JSON of further data.partition options")
    p.add_argument("--lr", type=float, default=None, help="SGD step size (default 0.1, the paper's for MNIST)")
    p.add_argument("--batch-size", type=int, default=None, help="B (default 32)")
    p.add_argument("--federation", default="rotated", choices=flacc_table.FEDERATIONS)
    p.add_argument("--methods", nargs="+", default=METHODS, choices=[*METHODS, flacc_table.CONTROL],
                   help=f"{flacc_table.CONTROL}: FLACC's control arm (random groups of the sizes of the clusters "
                        "found, from the same separation round)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--n-clients", type=int, default=20)
    p.add_argument("--fraction", type=float, default=0.3)
    p.add_argument("--samples", nargs=2, type=int, default=(60, 120))
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--n-merge", type=int, default=2)
    p.add_argument("--ifca-k", nargs="+", type=int, default=[4])
    p.add_argument("--flhc-d", nargs="+", type=float, default=[0.9])
    p.add_argument("--flacc-params", default=None,
                   help="JSON of further parameters of flacc and flacc-control, e.g. '{\"alpha_0\": 0.1}'")
    p.add_argument("--model", default="auto", help="auto = the paper's cnn28 for MNIST")
    p.add_argument("--quick", action="store_true", help="seconds: 12 clients, 4 rounds (use with sklearn:digits)")
    p.add_argument("--table-only", action="store_true", help="rewrite table.md from results.csv, run nothing")
    p.add_argument("--out", default="fedray-output/flacc_mnist")
    return p.parse_args(argv)


def table_args(args: argparse.Namespace, seed: int, method: str) -> argparse.Namespace:
    """The :mod:`flacc_table` arguments of one (seed, method) run."""
    argv = ["--dataset", args.dataset, "--federations", args.federation, "--methods", method,
            "--seeds", str(seed), "--n-merge", str(args.n_merge), "--model", args.model,
            "--ifca-k", *map(str, args.ifca_k), "--flhc-d", *map(str, args.flhc_d)]
    if args.data_dir:
        argv += ["--data-dir", args.data_dir]
    for flag in ("data_options", "partition_options", "flacc_params", "lr", "batch_size"):
        if getattr(args, flag) is not None:
            argv += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.quick:
        argv += ["--quick"]
    else:
        argv += ["--n-clients", str(args.n_clients), "--fraction", str(args.fraction), "--samples",
                 *map(str, args.samples), "--rounds", str(args.rounds), "--epochs", str(args.epochs),
                 "--eval-every", str(args.eval_every)]
    return flacc_table.parse_args(argv)


def jsonable(obj):
    """Arrays and numpy scalars as lists and Python numbers (FLACC's details as JSON)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj.tolist() if hasattr(obj, "tolist") else obj


def write_table(runs: pd.DataFrame, args: argparse.Namespace, out: Path) -> str:
    """``table.md``: the Table I layout over the finished runs, the seeds per method, the settings."""
    targs = table_args(args, args.seeds[0], args.methods[0])
    targs.methods = [m for m in args.methods if m in set(runs["method"])]
    targs.seeds = sorted(set(runs["seed"].tolist()))
    md = flacc_table.markdown(runs, targs, {})
    counts = runs.groupby("method")["seed"].nunique()
    md += "\nSeeds finished per method: " + ", ".join(f"{flacc_table.method_label(m)} {int(counts.get(m, 0))}"
                                                      for m in args.methods) + ".\n"
    (out / "table.md").write_text(md)
    return md


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.csv"
    runs = pd.read_csv(path) if path.exists() else pd.DataFrame()
    if args.table_only:
        if runs.empty:
            raise SystemExit(f"--table-only: no runs in {path}")
        log.info("%s", write_table(runs, args, out))
        return runs
    done = set(zip(runs["seed"], runs["method"])) if len(runs) else set()
    for seed in args.seeds:
        for method in args.methods:
            if (seed, method) in done:
                log.info("seed %d %s: already in %s", seed, method, path)
                continue
            t0 = time.perf_counter()
            new, hist, details = flacc_table.run_table(table_args(args, seed, method))
            new["load_1min"] = os.getloadavg()[0]
            hist.to_csv(out / "rounds.csv", mode="a", header=not (out / "rounds.csv").exists(), index=False)
            for (fed, s), d in details.items():  # FLACC's clusters and merges, for the evidence beside the table
                (out / f"clusters_{fed}_{s}_{method}.json").write_text(json.dumps(jsonable(d)))
            new.to_csv(path, mode="a", header=not path.exists(), index=False)
            runs = pd.concat([runs, new], ignore_index=True)
            log.info("seed %d %s: %.0f s, load %.1f", seed, method, time.perf_counter() - t0, os.getloadavg()[0])
            write_table(runs, args, out)
    log.info("%s", write_table(runs, args, out))
    return runs


if __name__ == "__main__":
    main()
