"""Stallmann & Wilbik (2022), Section 3.2.3, on a UCI data set: the framework on natural clients.

The paper's real-data experiment uses the UCI Bank Marketing data (43 193 customers,
one client per job group, age / balance / education). That file is not among the
offline benchmark data, so this script runs the same protocol on a UCI set that is
(``../shared/datasets/uci``; default ``statlog``, the Image Segmentation set: 2 310
rows, 19 features, 7 classes of 330 rows; ``yeast``: 1 484 rows, 8 features, 10
classes of 5-463 rows, overlapping as the job groups do): one client per value of
a column the clustering does not use (here the class label, as the paper uses the
job), every feature standardised (``data.scale: standard``,
from securely summed moments), then the paper's three steps:

1. each client alone: the (non-federated) fuzzy Davies-Bouldin index over
   K = 2..``--local-k-max`` and the elbow of its curve, K_l;
2. K_min = ``--k-min`` (3 as in the paper), K_max = K_min + max_l K_l (the paper's
   rule of thumb, capped by ``--k-max-cap``); FedFCM (k-means averaging) with
   FedFuzzDB for every K in [K_min, K_max], beside central fuzzy c-means on the
   union; K chosen by the elbow (the paper's reading) and by the minimum;
3. the federated against the central centres at the chosen K: mean distance of
   the centres matched by the Hungarian method (in standard deviations), and the
   ARI of the hard partitions of the union they induce.

Writes to ``--out``: ``results.parquet`` (one row per seed, K and curve), ``table.md``.

Examples::

    python experiments/stallmann_uci.py --data-dir ../shared/datasets --out runs/stallmann_uci
    python experiments/stallmann_uci.py --data-dir ../shared/datasets --dataset yeast --min-client-rows 30
    python experiments/stallmann_uci.py --data-dir ../shared/datasets --quick      # seconds, for tests
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import fedray
from fedray.analysis.kselect import choose_k, local_index_curve, select_k
from fedray.api.session import Session
from fedray.core import calls
from fedray.core.contract import Task
from fedray.core.metrics import ari_from_table, contingency
from fedray.data.datasets import load_dataset

log = logging.getLogger("stallmann_uci")


def natural_clients(name: str, data_dir: str | None, min_rows: int) -> tuple[Any, list[str]]:
    """``benchmark:uci/NAME`` as one client per class label (classes under ``min_rows`` rows dropped); ``bank``:
    UCI Bank Marketing, one client per job, as the paper (the data source ``bank``, its default encoding)."""
    if name == "bank":
        ds = load_dataset("bank", data_dir)
        jobs, counts = np.unique(ds.groups, return_counts=True)
        return {"dataset": "bank", "data_dir": data_dir}, [f"{j} ({c} rows)" for j, c in zip(jobs, counts)]
    ds = load_dataset(f"benchmark:uci/{name}", data_dir)
    keep = [c for c in np.unique(ds.y) if np.sum(ds.y == c) >= min_rows]
    rows = np.isin(ds.y, keep)
    X, y = np.asarray(ds.X, dtype=np.float64)[rows], np.asarray(ds.y)[rows]
    return {"dataset": fedray.from_arrays(X, y, clients=y)}, [f"label {c} ({int(np.sum(y == c))} rows)" for c in keep]


def hard_ari(X: np.ndarray, A: np.ndarray, B: np.ndarray) -> float:
    a = np.argmin(((X[:, None, :] - A[None]) ** 2).sum(-1), axis=1)
    b = np.argmin(((X[:, None, :] - B[None]) ** 2).sum(-1), axis=1)
    return float(ari_from_table(contingency(a, b, len(A), len(B))))


def matched_distance(A: np.ndarray, B: np.ndarray) -> float:
    from scipy.optimize import linear_sum_assignment

    D = np.sqrt(((A[:, None, :] - B[None]) ** 2).sum(-1))
    r, c = linear_sum_assignment(D)
    return float(D[r, c].mean())


def run(args: argparse.Namespace) -> tuple[pd.DataFrame, dict[str, Any]]:
    data, names = natural_clients(args.dataset, args.data_dir, args.min_client_rows)
    rows: list[dict[str, Any]] = []
    notes: dict[str, Any] = {"clients": names}
    for seed in args.seeds:
        cfg = {"seed": seed, "algorithm": {"name": "fedfcm", "params": {"max_rounds": args.max_rounds}},
               "data": {**data, "scale": "standard"}, "runtime": {"backend": "local", "progress": False}}
        t0 = time.perf_counter()
        with Session(cfg) as s:
            # step 1: each client alone over a wide range, elbow
            lks = list(range(2, args.local_k_max + 1))
            payload = {"ks": lks, "fuzzy": True, "m": 2.0, "q": 1.0, "p": 2.0, "tol": 1e-3}
            res = s.call(
                calls.adhoc("local curves"),
                {c: Task(local_index_curve, payload, None) for c in range(s.info.n_clients)},
            )
            local_k = {}
            for r in res.replies:
                name = names[r.client_id]
                local_k[name] = choose_k(r.update["ks"], r.update["index"], "elbow")
                rows += [{"seed": seed, "k": k, "curve": f"local:{name}", "value": v}
                         for k, v in zip(r.update["ks"], r.update["index"])]
            k_max = min(args.k_min + max(local_k.values()), args.k_max_cap)
            # step 2: FedFCM + FedFuzzDB over [K_min, K_max], central beside it
            sel = select_k(session=s, k_min=args.k_min, k_max=k_max, method="elbow", local=False)
            X = np.vstack([part[1] for part in s.executor.gather_data(labels=False)])
        t = sel.table
        for _, r in t.iterrows():
            for col in ("federated", "central"):
                rows.append({"seed": seed, "k": int(r["k"]), "curve": col, "value": float(r[col])})
        chosen = {f"{col} {how}": choose_k(t["k"], t[col], how) for col in ("federated", "central")
                  for how in ("elbow", "min")}
        # step 3: federated against central centres at each K
        for k in sel.federated_centers:
            A, B = sel.federated_centers[k], sel.central_centers[k]
            rows.append({"seed": seed, "k": k, "curve": "centre distance", "value": matched_distance(A, B)})
            rows.append({"seed": seed, "k": k, "curve": "ARI fed vs central", "value": hard_ari(X, A, B)})
        notes[seed] = {"local_k": local_k, "k_max": k_max, "chosen": chosen, "seconds": time.perf_counter() - t0,
                       "load": os.getloadavg()[0]}
        log.info("seed %d: local K %s, K_max %d, chosen %s (%.0f s)", seed, local_k, k_max, chosen,
                 time.perf_counter() - t0)
    return pd.DataFrame(rows), notes


def markdown(df: pd.DataFrame, notes: dict[str, Any], args: argparse.Namespace) -> str:
    s0 = args.seeds[0]
    d = df[df["seed"] == s0]
    ks = sorted(d[d["curve"] == "federated"]["k"].unique())
    val = {(r["k"], r["curve"]): r["value"] for _, r in d.iterrows()}
    n0 = notes[s0]
    lines = [f"Clients ({len(notes['clients'])}): {', '.join(notes['clients'])}. Each alone (elbow of the fuzzy DB "
             f"index over K = 2..{args.local_k_max}): "
             + ", ".join(f"{k.split(' (')[0]} K={v}" for k, v in n0["local_k"].items())
             + f"; so K_max = {args.k_min} + {max(n0['local_k'].values())} = {n0['k_max']}.", "",
             f"Seed {s0}:", "",
             "| K | FedFuzzDB (FedFCM) | fuzzy DB (central FCM) | matched centre distance (SD units) | "
             "ARI federated vs central partition |", "| --- | --- | --- | --- | --- |"]
    for k in ks:
        lines.append(f"| {k} | {val[(k, 'federated')]:.4f} | {val[(k, 'central')]:.4f} | "
                     f"{val[(k, 'centre distance')]:.3f} | {val[(k, 'ARI fed vs central')]:.3f} |")
    lines += [
        "",
        "| seed | K_max | federated K (elbow / min) | central K (elbow / min) | FedFuzzDB < central DB at K |",
        "| --- | --- | --- | --- | --- |",
    ]
    for seed in args.seeds:
        n = notes[seed]
        c = n["chosen"]
        dd = df[df["seed"] == seed]
        f = dd[dd["curve"] == "federated"].set_index("k")["value"]
        ce = dd[dd["curve"] == "central"].set_index("k")["value"]
        lower = int((f < ce).sum())
        lines.append(f"| {seed} | {n['k_max']} | {c['federated elbow']} / {c['federated min']} | "
                     f"{c['central elbow']} / {c['central min']} | {lower} of {len(f)} |")
    loads = [notes[s]["load"] for s in args.seeds]
    secs = [notes[s]["seconds"] for s in args.seeds]
    source = ("bank (age, balance, education 1-3; rows with an unknown job or education dropped), one client per "
              "job" if args.dataset == "bank" else f"benchmark:uci/{args.dataset}, one client per class label (classes "
              f"with at least {args.min_client_rows} rows)")
    lines += ["", f"Settings: {source}, data.scale = standard, FedFCM (k-means averaging), m = 2, p = 2, q = 1, "
              f"at most {args.max_rounds} rounds, K_min = {args.k_min}; seeds {', '.join(map(str, args.seeds))}; "
              f"{min(secs):.0f}-{max(secs):.0f} s a seed at load {min(loads):.1f}-{max(loads):.1f}."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dataset", default="statlog", help="a set of the uci battery (statlog, yeast, ecoli, ...), or "
                   "bank (UCI Bank Marketing, the paper's data: one client per job)")
    p.add_argument("--data-dir", default=None, help="folder holding uci/ (default $FEDRAY_DATA_DIR)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0 1 2 (quick: 0)")
    p.add_argument("--k-min", type=int, default=3)
    p.add_argument("--local-k-max", type=int, default=None, help="default 10 (quick: 4)")
    p.add_argument("--k-max-cap", type=int, default=None, help="default 12 (quick: 4)")
    p.add_argument("--max-rounds", type=int, default=None, help="FedFCM rounds at most, default 100 (quick: 5)")
    p.add_argument("--min-client-rows", type=int, default=30)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="fedray-output/stallmann_uci")
    args = p.parse_args(argv)
    q = args.quick
    for k, v in {"seeds": [0] if q else [0, 1, 2], "local_k_max": 4 if q else 10, "k_max_cap": 4 if q else 12,
                 "max_rounds": 5 if q else 100}.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.k_min < 2 or args.k_max_cap < args.k_min:
        p.error(f"--k-min must be >= 2 and at most --k-max-cap; got {args.k_min}, {args.k_max_cap}")
    return args


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df, notes = run(args)
    df.to_parquet(out / "results.parquet", index=False)
    md = markdown(df, notes, args)
    (out / "table.md").write_text(md)
    log.info("%s", md)
    return df


if __name__ == "__main__":
    main()
