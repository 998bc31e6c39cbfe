"""Stallmann & Wilbik (2022), Tables 1 and 2: the motivational example.

Fuzzy Davies–Bouldin index per K for the central clustering, the federated
clustering (FedFCM with k-means averaging, Table 1; the ``fedfcm-avg`` variant,
Table 2) and each client alone (the paper's local range K = 2..5), on
``scenario:stallmann-motivational``; plus the knowledge gap (eq. 19) of the K = 5
centres to the five generating centres.

Every (algorithm, seed) records one row per column (central, federated, client 1–3) in
``results/table1.csv`` when it ends: the chosen K, the index at every K and, for the federated and central
columns, the knowledge gap at K = 5 (resumable: a recorded (algorithm, seed) is skipped). ``--out`` gets
``table1.parquet`` (long format), ``table1.md`` (seed 0 beside the paper's numbers) and ``plots/*.png``.

    python -m reproductions run stallmann2022/table1-chosen-k --seeds 0 1 2 3 4 5 6 7 8 9
    python -m reproductions.stallmann2022.table1 --out fedray-output/stallmann2022-table1
    python -m reproductions.stallmann2022.table1 --quick
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import fedray
from fedray import Session, Task, choose_k, federated_variance, knowledge_gap, local_index_curve, select_k
from reproductions.common import record_run, recorded

log = logging.getLogger("stallmann_table1")

PAPER_ID, RECORDS = "stallmann2022", "table1"
SIZES = "3120 points, 3 natural clients; K = 2..8 (each client alone 2..5); ≤ 100 rounds; baselines best of 10 starts"
SCENARIO = "scenario:stallmann-motivational"

# Tables 1 and 2 of the paper: K -> (central, federated, client 1, client 2, client 3)
PAPER = {
    "fedfcm": {2: (0.8707, 0.8179, 0.6426, 0.6437, 0.6381), 3: (0.5687, 0.6055, 0.7289, 0.6991, 0.7704),
               4: (0.4869, 0.4951, 1.0637, 1.0706, 1.1248), 5: (0.4348, 0.4289, 0.9260, 0.8927, 0.9496),
               6: (0.5440, 0.6202), 7: (0.6707, 0.5072), 8: (0.5680, 0.6221)},
    "fedfcm-avg": {2: (0.8707, 1.0047, 1.0356, 0.8620, 0.9685), 3: (0.5687, 0.9143, 0.8880, 0.8370, 0.8647),
                   4: (0.4869, 1.1683, 1.1924, 0.9221, 1.1662), 5: (0.4348, 2.9158, 2.8867, 2.4132, 2.9538),
                   6: (0.5440, 1.5063), 7: (0.6707, 0.9248), 8: (0.5680, 1.2115)},
}
CLIENTS = ("local:client-1", "local:client-2", "local:client-3")


def _fmt(v: float) -> str:
    return "—" if v is None or not np.isfinite(v) else f"{v:.4f}"


def _wide_local(session: Session, k_max: int) -> dict[str, dict[int, float]]:
    """Each client alone over K = 2..k_max (the paper stops at 5)."""
    payload = {"ks": list(range(2, k_max + 1)), "fuzzy": True, "m": 2.0, "q": 1.0, "p": 2.0, "tol": 1e-3}
    tasks = {c: Task(local_index_curve, payload, None) for c in range(session.info.n_clients)}
    res = session.call(fedray.adhoc_call("local curves"), tasks)
    return {f"local:{session.descriptions[r.client_id]['name']}": dict(zip(r.update["ks"], r.update["index"]))
            for r in res.replies}


def run(out: Path, seeds: list[int], k_max: int, algorithms: tuple[str, ...], max_rounds: int = 100,
        n_init: int = 10, record: bool = False, scale: str = "paper") -> pd.DataFrame:
    """One (algorithm, seed) after another; with ``record``, each is recorded when it ends and skipped when
    recorded already (its rows are then absent from the frame returned)."""
    rows = []
    centres = np.asarray(fedray.load_dataset(SCENARIO).meta["true_centers"], dtype=np.float64)
    done = recorded(PAPER_ID, RECORDS) if record else None
    for alg in algorithms:
        for seed in seeds:
            if done is not None and len(done) and ((done["method"] == alg) & (done["seed"] == seed)).any():
                log.info("%s seed %d: recorded already", alg, seed)
                continue
            cfg = {"seed": seed, "algorithm": {"name": alg, "params": {"max_rounds": max_rounds}},
                   "data": {"dataset": SCENARIO},
                   "runtime": {"backend": "local", "progress": False}}
            t0 = time.perf_counter()
            with Session(cfg) as s:
                sel = select_k(session=s, k_min=2, k_max=k_max, n_init=n_init,
                               output=out / "k_selection" / f"{alg}-seed{seed}" if seed == seeds[0] else None)
                gap = gap_c = np.nan
                if 5 in sel.federated_centers:
                    var = federated_variance(s)
                    gap = knowledge_gap(sel.federated_centers[5], centres, var)
                    gap_c = knowledge_gap(sel.central_centers[5], centres, var)
                # the local-only baseline over the full range (not in the paper's table)
                wide = _wide_local(s, k_max) if seed == seeds[0] else None
            for _, r in sel.table.iterrows():
                for col in ("federated", "central", *CLIENTS):
                    rows.append({"algorithm": alg, "seed": seed, "k": int(r["k"]), "curve": col, "value": r[col]})
            for col, k in sel.chosen.items():
                rows.append({"algorithm": alg, "seed": seed, "k": -1, "curve": f"chosen:{col}", "value": k})
            rows.append({"algorithm": alg, "seed": seed, "k": 5, "curve": "gap:federated", "value": gap})
            rows.append({"algorithm": alg, "seed": seed, "k": 5, "curve": "gap:central", "value": gap_c})
            rows.append({"algorithm": alg, "seed": seed, "k": -1, "curve": "n_init", "value": n_init})
            rows += [{"algorithm": alg, "seed": seed, "k": int(r["k"]), "curve": "rounds", "value": r["rounds"]}
                     for _, r in sel.table.iterrows()]
            if wide is not None:
                for col, curve in wide.items():
                    rows.append({"algorithm": alg, "seed": seed, "k": -1, "curve": f"chosen-wide:{col}",
                                 "value": choose_k(list(curve), list(curve.values()))})
                    rows += [{"algorithm": alg, "seed": seed, "k": k, "curve": f"wide:{col}", "value": v}
                             for k, v in curve.items()]
            wall = time.perf_counter() - t0
            log.info("%s seed %d: chosen %s, gap %.3f (%.1f s)", alg, seed, sel.chosen, gap, wall)
            if record:
                _record(alg, seed, sel, {"federated": gap, "central": gap_c}, wall, scale,
                        {"k_max": k_max, "max_rounds": max_rounds, "n_init": n_init})
    return pd.DataFrame(rows)


def _record(alg: str, seed: int, sel: Any, gaps: dict[str, float], wall: float, scale: str,
            config: dict[str, Any]) -> None:
    """One record per column of the table (central, federated, client 1–3): chosen K, index per K, gap at K = 5."""
    for col in ("central", "federated", *CLIENTS):
        metrics: dict[str, Any] = {"chosen_k": sel.chosen.get(col)}
        metrics.update({f"db_k{int(k)}": float(v) for k, v in zip(sel.table["k"], sel.table[col])
                        if np.isfinite(v)})
        if col in gaps:
            metrics["gap_k5"] = float(gaps[col])
        record_run(PAPER_ID, RECORDS, method=alg, variant=col.replace("local:", ""), seed=seed, scale=scale,
                   sizes=SIZES, metrics=metrics, config=config, wall_s=wall)


def markdown(df: pd.DataFrame, seeds: list[int]) -> str:
    parts = []
    s0 = seeds[0]
    for alg, title in (("fedfcm", "Table 1 — FedFCM (k-means averaging)"),
                       ("fedfcm-avg", "Table 2 — federated averaging variant (fedfcm-avg)")):
        d = df[(df["algorithm"] == alg) & (df["seed"] == s0)]
        if d.empty:
            continue
        starts = df[(df["algorithm"] == alg) & (df["curve"] == "n_init")]["value"]
        starts = int(starts.iloc[0]) if len(starts) else 3
        parts.append(f"#### {title}, seed {s0} (paper's value in brackets)\n")
        parts.append(f"Central and local columns: best of {starts} starts per K (k-means++, Lloyd, then FCM; "
                     "lowest FCM objective).\n")
        parts.append("| K | central | federated | client 1 | client 2 | client 3 |")
        parts.append("|---|---|---|---|---|---|")
        chosen = {r["curve"].split(":", 1)[1]: int(r["value"]) for _, r in d[d["curve"].str.startswith("chosen:")].iterrows()}
        for k in sorted(d.loc[d["k"] > 0, "k"].unique()):
            cells = []
            paper = PAPER[alg].get(int(k), ())
            for i, col in enumerate(("central", "federated", *CLIENTS)):
                v = d[(d["k"] == k) & (d["curve"] == col)]["value"]
                v = float(v.iloc[0]) if len(v) else np.nan
                ref = _fmt(paper[i]) if i < len(paper) else "—"
                cell = f"{_fmt(v)} ({ref})"
                cells.append(f"**{cell}**" if chosen.get(col) == k else cell)
            parts.append(f"| {int(k)} | " + " | ".join(cells) + " |")
        parts.append("")
        # choices over every seed
        ch = df[(df["algorithm"] == alg) & df["curve"].str.startswith("chosen:")]
        summary = []
        for col in ("central", "federated", *CLIENTS):
            vals = ch[ch["curve"] == f"chosen:{col}"]["value"].astype(int).tolist()
            summary.append(f"{col.replace('local:', '')}: " + ", ".join(f"K={v}×{vals.count(v)}" for v in sorted(set(vals))))
        gaps = df[(df["algorithm"] == alg) & (df["curve"] == "gap:federated")]["value"]
        gapc = df[(df["algorithm"] == alg) & (df["curve"] == "gap:central")]["value"]
        parts.append(f"Chosen K over {len(seeds)} seed(s): " + "; ".join(summary) + ".  ")
        parts.append(f"Knowledge gap (eq. 19) of the K = 5 centres to the generating centres: federated "
                     f"{gaps.mean():.3f} (min {gaps.min():.3f}, max {gaps.max():.3f}), central {gapc.mean():.3f}.")
        wide = df[(df["algorithm"] == alg) & df["curve"].str.startswith("chosen-wide:")]
        if len(wide):
            kw = int(df[df["curve"].str.startswith("wide:")]["k"].max())
            parts.append(f"With the local range widened to K = 2..{kw}, the clients alone choose "
                         + ", ".join(f"{r['curve'].split(':')[-1]} K={int(r['value'])}" for _, r in wide.iterrows()) + ".")
        parts.append("")
    return "\n".join(parts)


def plot_data(out: Path, seed: int) -> None:
    """The motivational data per client with the federated K = 5 centres (Figure 1 of the paper)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    centres = np.load(out / "k_selection" / f"fedfcm-seed{seed}" / "centers.npz")["federated_k5"]
    with Session({"seed": seed, "algorithm": {"name": "fedfcm"}, "data": {"dataset": SCENARIO},
                  "runtime": {"backend": "local", "progress": False}}) as s:
        shards = s.executor.gather_data()
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8), sharex=True, sharey=True)
    for (_, X, y) in shards:
        axes[0].scatter(X[:, 0], X[:, 1], c=y, s=2, cmap="tab10", vmin=0, vmax=9)
    axes[0].set_title("union (colour: generating Gaussian)")
    for ax, (cid, X, y) in zip(axes[1:], shards):
        ax.scatter(X[:, 0], X[:, 1], c=y, s=2, cmap="tab10", vmin=0, vmax=9)
        ax.scatter(centres[:, 0], centres[:, 1], marker="x", s=80, c="k")
        ax.set_title(f"client {cid + 1} + federated centres")
    fig.tight_layout()
    (out / "plots").mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "plots" / "motivational_clients.png", dpi=100)
    plt.close(fig)


def run_claim(claim: Any, scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    """The lab's runner: both tables (FedFCM and ``fedfcm-avg``) for ``seeds``, recorded (algorithm, seed) by
    (algorithm, seed); ``quick``: one seed, K up to 6, at most 20 rounds, 2 starts."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if quick:
            run(Path(tmp), seeds[:1], 6, ("fedfcm", "fedfcm-avg"), max_rounds=20, n_init=2, record=True, scale=scale)
        else:
            run(Path(tmp), seeds, 8, ("fedfcm", "fedfcm-avg"), record=True, scale=scale)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, K up to 6, at most 20 rounds")
    ap.add_argument("--out", default="fedray-output/stallmann2022-table1")
    ap.add_argument("--data-dir", default=None, help="unused (the scenario is generated)")
    ap.add_argument("--seeds", type=int, default=10, help="number of seeds (full run)")
    ap.add_argument("--n-init", type=int, default=10, help="starts of the central and local baselines per K")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [0] if args.quick else list(range(args.seeds))
    k_max = 6 if args.quick else 8
    df = run(out, seeds, k_max, ("fedfcm", "fedfcm-avg"), max_rounds=20 if args.quick else 100, n_init=args.n_init)
    df.to_parquet(out / "table1.parquet", index=False)
    md = markdown(df, seeds)
    (out / "table1.md").write_text(md)
    plot_data(out, seeds[0])
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
