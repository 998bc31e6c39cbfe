"""Stallmann & Wilbik (2022), Section 3.2.3: the framework on natural clients (Bank Marketing, Figures 5–7).

The paper's real-data experiment: UCI Bank Marketing (43,193 customers once rows with an unknown value are
dropped), one client per job (11 clients), the columns age, balance and education (primary 1, secondary 2,
tertiary 3), each standardised (``data.scale: standard``, from securely summed moments). ``--dataset`` also
takes a set of the ``uci`` battery (e.g. ``statlog``), one client per class label, for the protocol on other
data. Then the paper's three steps:

1. each client alone: the (non-federated) fuzzy Davies-Bouldin index over K = 2..``--local-k-max`` and the
   elbow of its curve, K_l (Figure 5);
2. K_min = ``--k-min`` (3 as in the paper), K_max = K_min + max_l K_l (the paper's rule of thumb, capped by
   ``--k-max-cap``); FedFCM (k-means averaging) with FedFuzzDB for every K in [K_min, K_max], beside central
   fuzzy c-means on the union; K chosen by the elbow (the paper's reading) and by the minimum (Figure 6);
3. the federated against the central centres at every K: mean distance of the centres matched by the
   Hungarian method (in standard deviations), the ARI of the hard partitions of the union they induce, and
   at K = 4 (Figure 7) the balance of the wealthiest centre, the gaps of the matched pairs, and the share of
   the clients' own K = 4 centres and of the points with a balance above the central wealthy centre's.

With ``--record`` (and in the lab's runner, ``bank`` only) every seed is recorded in ``results/bank.csv``
when it ends; a recorded seed is skipped. ``--out`` gets ``results.parquet`` and ``table.md``.

    python -m reproductions run stallmann2022/figure6-chosen-k --seeds 0 1 2
    python -m reproductions.stallmann2022.bank --dataset bank --seeds 0 --k-max-cap 9 --local-k-max 8
    python -m reproductions.stallmann2022.bank --quick      # statlog, seconds, for tests
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
from fedray import (
    Session,
    Task,
    ari_from_table,
    central_curve,
    choose_k,
    contingency,
    load_dataset,
    local_index_curve,
    select_k,
)
from reproductions.common import data_dir as default_data_dir
from reproductions.common import record_run, recorded

log = logging.getLogger("stallmann_bank")

PAPER_ID, RECORDS = "stallmann2022", "bank"
SIZES = "43,193 rows, 11 clients (one per job); local K 2..8, K in [3, K_max ≤ 9]; ≤ 50 rounds per K"


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
            tasks = {c: Task(local_index_curve, payload, None) for c in range(s.info.n_clients)}
            res = s.call(fedray.adhoc_call("local curves"), tasks)
            local_k = {}
            for r in res.replies:
                name = names[r.client_id]
                local_k[name] = choose_k(r.update["ks"], r.update["index"], "elbow")
                rows += [{"seed": seed, "k": k, "curve": f"local:{name}", "value": v}
                         for k, v in zip(r.update["ks"], r.update["index"])]
            k_max = min(args.k_min + max(local_k.values()), args.k_max_cap)
            # step 2: FedFCM + FedFuzzDB over [K_min, K_max], central beside it
            sel = select_k(session=s, k_min=args.k_min, k_max=k_max, method="elbow", local=False)
            shards = [part[1] for part in s.executor.gather_data(labels=False)]
            X = np.vstack(shards)
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
        fig7 = figure7(sel, shards, X, seed) if args.dataset == "bank" and 4 in sel.federated_centers else None
        wall = time.perf_counter() - t0
        notes[seed] = {"local_k": local_k, "k_max": k_max, "chosen": chosen, "seconds": wall,
                       "load": os.getloadavg()[0], "figure7": fig7}
        log.info("seed %d: local K %s, K_max %d, chosen %s (%.0f s)", seed, local_k, k_max, chosen, wall)
        if args.record:
            _record(seed, sel, local_k, k_max, chosen, X, fig7, wall, args)
    return pd.DataFrame(rows), notes


BALANCE, WEALTHY = 1, 2.4  # the balance column of (age, balance, education); the paper's central wealthy centre


def figure7(sel: Any, shards: list[np.ndarray], X: np.ndarray, seed: int) -> dict[str, Any]:
    """Figure 7 and its text at K = 4: the wealthiest centre's balance (federated, central), the distances of
    the matched centre pairs (sorted), and the share of the clients' own K = 4 centres and of all points with a
    balance above 2.4 (the paper: 7 local centres, 15.9 %; 3.9 % of the points)."""
    from scipy.optimize import linear_sum_assignment

    A, B = np.asarray(sel.federated_centers[4]), np.asarray(sel.central_centers[4])
    D = np.sqrt(((A[:, None, :] - B[None]) ** 2).sum(-1))
    r, c = linear_sum_assignment(D)
    local = np.vstack([central_curve(part, [4], True, seed)[1][4] for part in shards])
    return {"balance_federated": float(A[:, BALANCE].max()), "balance_central": float(B[:, BALANCE].max()),
            "pair_distances": sorted(float(x) for x in D[r, c]),
            "local_above": int((local[:, BALANCE] > WEALTHY).sum()), "local_centres": int(len(local)),
            "points_above_pct": float(100.0 * (X[:, BALANCE] > WEALTHY).mean()),
            "centres_federated": A.tolist(), "centres_central": B.tolist()}


def _record(seed: int, sel: Any, local_k: dict[str, int], k_max: int, chosen: dict[str, Any], X: np.ndarray,
            fig7: dict[str, Any] | None, wall: float, args: argparse.Namespace) -> None:
    config = {"dataset": args.dataset, "k_min": args.k_min, "local_k_max": args.local_k_max,
              "k_max_cap": args.k_max_cap, "max_rounds": args.max_rounds}

    def rec(method: str, variant: str, metrics: dict[str, Any]) -> None:
        record_run(PAPER_ID, RECORDS, method=method, variant=variant, seed=seed, scale="paper", sizes=SIZES,
                   metrics=metrics, config=config, wall_s=wall)

    for name, k in local_k.items():
        rec("local", name.split(" (")[0], {"elbow_k": int(k)})
    for col in ("federated", "central"):
        rec(col, "chosen", {"elbow_k": chosen[f"{col} elbow"], "min_k": chosen[f"{col} min"], "k_max": k_max})
    t = sel.table.set_index("k")
    for k in sel.federated_centers:
        A, B = sel.federated_centers[k], sel.central_centers[k]
        rec("federated", f"K={k}", {"db": float(t.loc[k, "federated"]), "centre_distance": matched_distance(A, B),
                                    "ari_vs_central": hard_ari(X, A, B)})
        rec("central", f"K={k}", {"db": float(t.loc[k, "central"])})
    if fig7 is not None:
        pairs = fig7["pair_distances"]
        rec("federated", "K=4 centres", {"balance_max": fig7["balance_federated"], "pair_distances": pairs,
                                         "third_pair_distance": pairs[2], "centres": fig7["centres_federated"]})
        rec("central", "K=4 centres", {"balance_max": fig7["balance_central"], "centres": fig7["centres_central"]})
        rec("local centres", "K=4", {"above_pct": 100.0 * fig7["local_above"] / fig7["local_centres"],
                                     "above": fig7["local_above"], "of": fig7["local_centres"]})
        rec("points", "all", {"above_pct": fig7["points_above_pct"]})


def run_claim(claim: Any, scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    """The lab's runner: the Bank Marketing protocol for ``seeds``, recorded seed by seed (a recorded seed is
    skipped); ``quick``: statlog, one seed, small ranges."""
    argv = (["--data-dir", data_dir] if data_dir else []) + ["--out", "fedray-output/stallmann2022-bank"]
    if quick:
        argv += ["--quick"]
    else:
        argv += ["--dataset", "bank", "--record", "--k-max-cap", "9", "--local-k-max", "8", "--max-rounds", "50"]
    args = parse_args(argv + ["--seeds", *map(str, seeds[:1] if quick else seeds)])
    done = recorded(PAPER_ID, RECORDS)
    args.seeds = [s for s in args.seeds if quick or not (len(done) and (done["seed"] == s).any())]
    if args.seeds:
        run(args)


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
    lines += ["", "| seed | K_max | federated K (elbow / min) | central K (elbow / min) | FedFuzzDB < central DB at K |",
              "| --- | --- | --- | --- | --- |"]
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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.add_argument("--record", action="store_true", help="record each seed in results/bank.csv (skip recorded ones)")
    p.add_argument("--out", default="fedray-output/stallmann2022-bank")
    args = p.parse_args(argv)
    q = args.quick
    for k, v in {"seeds": [0] if q else [0, 1, 2], "local_k_max": 4 if q else 10, "k_max_cap": 4 if q else 12,
                 "max_rounds": 5 if q else 100}.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.record and args.dataset != "bank":
        p.error(f"--record: only the paper's data (--dataset bank) is recorded; got --dataset {args.dataset}")
    args.data_dir = default_data_dir(args.data_dir)
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
