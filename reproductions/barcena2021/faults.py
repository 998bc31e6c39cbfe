"""What faults cost: federated FCM with crashes and stragglers against the fault-free run (not in the paper).

An extra of the Corcuera Bárcena et al. folder, with no claim: the paper has no faults. Setting: s-set1-like data (``sipu/s1``, and
``sipu/s2`` as a held-out set with more overlap), 50 clients with a Dirichlet(0.5)
label skew, 15 clusters, the default k-FED start; faults: each client crashes with
probability 0.2 and straggles past the deadline with probability 0.1 in every
round (``faults.delay_mode: virtual``: the straggler's reply is dropped as late,
no time is spent). Reported: the final ARI of each seed with and without faults,
and with the start's retries switched off (``init_retries: 0``, the old behaviour,
where a fault in the start-up round changed the initial centres).

    python -m reproductions.barcena2021.faults --data-dir ../shared/datasets [--seeds 0 1 2]

Prints a Markdown table and writes it to ``--out`` (default fedray-output/faults); the 10-seed table is in
docs/notes/fault-robustness.md.
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import pandas as pd

import fedray
from reproductions.common import data_dir as default_data_dir
from reproductions.common import markdown_table

log = logging.getLogger("fault_robustness")

FAULTS = {"crash_probability": 0.2, "delay_probability": 0.1, "delay_seconds": 1.0, "delay_mode": "virtual"}


def run_one(dataset: str, seed: int, data_dir: str | None, faults: bool, init_retries: int, n_clients: int = 50,
            rounds: int = 100) -> float:
    """The final ARI of one run of federated FCM (K = 15), with or without the faults."""
    cfg = {"seed": seed,
           "algorithm": {"name": "federated-fcm", "params": {"n_clusters": 15, "init_retries": init_retries}},
           "data": {"dataset": dataset, "data_dir": data_dir, "scale": "minmax",
                    "partition": {"name": "dirichlet", "alpha": 0.5}},
           "federation": {"n_clients": n_clients, "rounds": rounds},
           "runtime": {"backend": "local", "progress": False, "round_timeout": 30.0}}
    if faults:
        cfg["faults"] = FAULTS
    return float(fedray.run(cfg, output=False).final["ari"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None, help="benchmark data (default: $FEDRAY_DATA_DIR, else ../shared/datasets)")
    ap.add_argument("--quick", action="store_true", help="s1 only, seed 0, 20 clients, at most 20 rounds")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--sets", nargs="+", default=["benchmark:sipu/s1", "benchmark:sipu/s2"])
    ap.add_argument("--out", default="fedray-output/faults")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("fedray").setLevel(logging.ERROR)  # the injected faults log one warning each
    data_dir = default_data_dir(args.data_dir)
    sets, seeds = (args.sets[:1], [0]) if args.quick else (args.sets, args.seeds)
    size = {"n_clients": 20, "rounds": 20} if args.quick else {}
    rows = []
    t0 = time.perf_counter()
    for ds in sets:
        for seed in seeds:
            rows.append({"set": ds.split("/")[-1], "seed": seed,
                         "no faults": run_one(ds, seed, data_dir, False, 5, **size),
                         "faults": run_one(ds, seed, data_dir, True, 5, **size),
                         "faults, no start retries": run_one(ds, seed, data_dir, True, 0, **size)})
    df = pd.DataFrame(rows)
    means = df.groupby("set")[["no faults", "faults", "faults, no start retries"]].mean().reset_index()
    means["seed"] = "mean"
    table = pd.concat([df, means], ignore_index=True)
    table["loss"] = table["no faults"] - table["faults"]
    table["loss, no start retries"] = table["no faults"] - table["faults, no start retries"]
    md = markdown_table(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "faults.md").write_text(md + "\n")
    log.warning("%d runs in %.0f s", 3 * len(rows), time.perf_counter() - t0)
    print(md)  # the table is this script's output
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
