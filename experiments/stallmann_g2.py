"""Stallmann & Wilbik (2022), Section 3.2.2: choosing K on the G2 sets (Table 3, Figures 2–3, Tables 4–7).

Every ``g2mg_D_S`` set (2048 points, two Gaussians) is split uniformly at random
over P ∈ {2, 5, 10} clients; K is chosen over [2, 6] by the minimum of FedFuzzDB
with FedFCM (k-means averaging) and with the ``fedfcm-avg`` variant, and by the
fuzzy DB index of central FCM on the union (best of ``--n-init`` starts, each
k-means++, Lloyd, then FCM; ``--central-only`` computes just this baseline, the
same numbers as a full run gives for it). The correct-K rate counts only runs
whose index at the true K = 2 is below 1.3 (as the paper does); the knowledge gap
(eq. 19) compares the K = 2 centres with the class means of the reference labels.

Writes to ``--out``: ``g2.parquet`` (one row per set, repeat, method and P),
``g2.md`` (Tables 3–7 beside the paper's), ``plots/correct_by_spread.png`` and
``plots/correct_by_dim.png``.

    python experiments/stallmann_g2.py --data-dir ../shared/datasets --repeats 10
    python experiments/stallmann_g2.py --data-dir ../shared/datasets --repeats 10 --central-only
    python experiments/stallmann_g2.py --quick --data-dir ../shared/datasets
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fedray.analysis.kselect import central_curve, choose_k, select_k
from fedray.analysis.validation import knowledge_gap
from fedray.api.session import Session
from fedray.data import load_dataset
from fedray.data.scenarios import g2_config, g2_dataset

log = logging.getLogger("stallmann_g2")

PAPER_TABLE3 = {"central": 92.9, ("fedfcm", 2): 91.4, ("fedfcm", 5): 88.0, ("fedfcm", 10): 87.2,
                ("fedfcm-avg", 2): 90.4, ("fedfcm-avg", 5): 89.5, ("fedfcm-avg", 10): 88.9}
PAPER_DB_K2 = {  # Table 4 (k-means averaging): 25 %, 50 %, 75 %, min; central, P = 2, 5, 10
    "q25": (0.6762, 0.6771, 0.6766, 0.6766), "q50": (0.8640, 0.8638, 0.8627, 0.8627),
    "q75": (1.3092, 1.3073, 1.2961, 1.2944), "min": (0.5460, 0.5459, 0.5459, 0.5458)}
PAPER_GAP_K2 = {  # Table 6 (k-means averaging)
    "q25": (0.2850, 0.2724, 0.2700, 0.2587), "q50": (0.8904, 0.8897, 0.8900, 0.8898),
    "q75": (5.9544, 5.9272, 5.8335, 5.4764), "min": (0.0286, 0.0278, 0.0265, 0.0253)}
THRESHOLD = 1.3


def _reference(dim: int, spread: int, data_dir: str, battery: str = "g2mg") -> tuple[np.ndarray, np.ndarray]:
    ds = load_dataset(g2_dataset(dim, spread, battery), data_dir)
    means = np.vstack([ds.X[ds.y == c].mean(axis=0) for c in np.unique(ds.y)])
    return means, ds.X.var(axis=0)


def run_set(data_dir: str | None, dim: int, spread: int, clients: list[int], repeats: int,
            algorithms: tuple[str, ...], max_rounds: int = 50, n_init: int = 10, central_only: bool = False,
            first_repeat: int = 0, battery: str = "g2mg") -> list[dict]:
    """Every repeat, client count and method on one G2 set (``g2mg_{dim}_{spread}``, or ``g2-{dim}-{spread}``
    with ``battery="g2"``)."""
    ref, var = _reference(dim, spread, data_dir, battery)
    rows = []
    t0 = time.perf_counter()
    ks = list(range(2, 7))
    for rep in range(first_repeat, first_repeat + repeats):
        curves = []
        if central_only:  # the union in the order select_k builds it (shards of the first P)
            with Session(g2_config(dim, spread, clients[0], seed=rep, data_dir=data_dir, battery=battery)) as s:
                X = np.vstack([part[1] for part in s.executor.gather_data(labels=False)])
            vals, centres = central_curve(X, ks, True, rep, n_init=n_init)
            curves.append(("central", 0, dict(zip(ks, vals)), choose_k(ks, vals), centres))
        else:
            first = True
            for P in clients:
                for alg in algorithms:
                    sel = select_k(g2_config(dim, spread, P, seed=rep, data_dir=data_dir, algorithm=alg,
                                             params={"max_rounds": max_rounds}, battery=battery),
                                   k_min=2, k_max=6, local=False, central=first, n_init=n_init)
                    for method, p, col, centres in ([("central", 0, "central", sel.central_centers)] if first else []) \
                            + [(alg, P, "federated", sel.federated_centers)]:
                        curves.append((method, p, dict(zip(sel.table["k"], sel.table[col])), sel.chosen[col], centres))
                    first = False
        for method, p, idx, chosen, centres in curves:
            rows.append({"dim": dim, "spread": spread, "repeat": rep, "method": method, "P": p, "n_init": n_init,
                         "chosen_k": chosen, "db_k2": idx[2], "gap_k2": knowledge_gap(centres[2], ref, var),
                         **{f"db_k{k}": v for k, v in idx.items()}})
    log.info("%s: %d repeat(s) from %d in %.1f s", g2_dataset(dim, spread, battery), repeats, first_repeat,
             time.perf_counter() - t0)
    return rows


def run(data_dir: str | None, sets: list[tuple[int, int]], clients: list[int], repeats: int,
        algorithms: tuple[str, ...], max_rounds: int = 50, jobs: int = 1, partial: Path | None = None,
        n_init: int = 10, central_only: bool = False, first_repeat: int = 0, battery: str = "g2mg") -> pd.DataFrame:
    """All sets and repeats, ``jobs`` worker processes; the rows so far are saved to ``partial`` after each
    (set, repeat), and a (set, repeat) already in ``partial`` is not run again (a rerun resumes)."""
    done = pd.read_parquet(partial) if partial is not None and partial.exists() else pd.DataFrame()
    rows: list[dict] = done.to_dict("records")
    have = set(zip(done["dim"], done["spread"], done["repeat"])) if len(done) else set()
    # repeat by repeat over all sets: a run stopped early leaves every set with the same repeats
    todo = [(d, s, r) for r in range(first_repeat, first_repeat + repeats) for d, s in sets if (d, s, r) not in have]
    log.info("%d (set, repeat) pairs to run, %d already in %s", len(todo), len(have), partial)
    args = [(data_dir, d, s, clients, 1, algorithms, max_rounds, n_init, central_only, r, battery) for d, s, r in todo]
    if jobs <= 1:
        results = (run_set(*a) for a in args)
    else:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=jobs)
        results = pool.map(run_set, *zip(*args))
    for r in results:
        rows += r
        if partial is not None:
            pd.DataFrame(rows).to_parquet(partial, index=False)
    if jobs > 1:
        pool.shutdown()
    df = pd.DataFrame(rows)
    keep = {(d, s) for d, s in sets}
    wanted = df.apply(
        lambda r: (r["dim"], r["spread"]) in keep and first_repeat <= r["repeat"] < first_repeat + repeats, axis=1
    )
    return df[wanted].reset_index(drop=True)


def complete_repeats(df: pd.DataFrame) -> pd.DataFrame:
    """Only the repeats every set has (a run stopped early, read from its partial file, weighs every set alike)."""
    n_sets = df[["dim", "spread"]].drop_duplicates().shape[0]
    per = df[["dim", "spread", "repeat"]].drop_duplicates().groupby("repeat").size()
    keep = per[per == n_sets].index
    if len(keep) < len(per):
        log.info("tables from repeats %s (the ones every set has); left out %s", list(keep),
                 sorted(set(per.index) - set(keep)))
    return df[df["repeat"].isin(keep)].reset_index(drop=True)


def correct_rate(df: pd.DataFrame, filtered: bool = True) -> float:
    d = df[df["db_k2"] < THRESHOLD] if filtered else df
    return float(100.0 * (d["chosen_k"] == 2).mean()) if len(d) else float("nan")


def markdown(df: pd.DataFrame, clients: list[int], algorithms: tuple[str, ...], repeats: int) -> str:
    algorithms = tuple(a for a in algorithms if (df["method"] == a).any()) or ("central",)
    starts = sorted(df["n_init"].unique().tolist()) if "n_init" in df else ["3 (bare k-means++)"]
    lines = [f"#### Table 3 — correct K (index at K = 2 below {THRESHOLD}); ours (paper), "
             f"{df[['dim', 'spread']].drop_duplicates().shape[0]} sets × {repeats} repeat(s); central FCM: best of "
             f"{', '.join(str(n) for n in starts)} starts per K\n"]
    lines.append("| method | central | " + " | ".join(f"{P} clients" for P in clients) + " |")
    lines.append("|---|---|" + "---|" * len(clients))
    cen = df[df["method"] == "central"]
    for alg in algorithms:
        cells = [f"{correct_rate(cen):.1f}% ({PAPER_TABLE3['central']}%)" if alg == algorithms[0] else ""]
        for P in clients:
            d = df[(df["method"] == alg) & (df["P"] == P)]
            cells.append(f"{correct_rate(d):.1f}% ({PAPER_TABLE3.get((alg, P), '—')}%)" if len(d) else "—")
        lines.append(f"| {alg} | " + " | ".join(cells) + " |")
    lines.append("")
    fed = [a for a in algorithms if a != "central"]
    lines.append("Without the 1.3 filter: central " + f"{correct_rate(cen, False):.1f}%" + "".join(
        f"; {alg} P={P} {correct_rate(df[(df['method'] == alg) & (df['P'] == P)], False):.1f}%"
        for alg in fed for P in clients) + ". Share of runs kept by the filter: " + "; ".join(
        f"{m} {100 * (df[df['method'] == m]['db_k2'] < THRESHOLD).mean():.0f}%" for m in ("central", *fed)) + ".")
    lines.append("")
    cols = [("central", 0)] + [(a, P) for a in algorithms if a != "central" for P in clients]
    for by, label in (("spread", "S"), ("dim", "D")):
        lines.append(f"Correct-K share per {'spread' if by == 'spread' else 'dimension'} {label} (all runs):\n")
        lines.append(
            f"| {label} | " + " | ".join("central" if m == "central" else f"{m} P={P}" for m, P in cols) + " |"
        )
        lines.append("|---|" + "---|" * len(cols))
        for v in sorted(df[by].unique()):
            cells = []
            for m, P in cols:
                d = df[(df[by] == v) & (df["method"] == m) & ((df["P"] == P) | (m == "central"))]
                cells.append(f"{(d['chosen_k'] == 2).mean():.2f}" if len(d) else "—")
            lines.append(f"| {int(v)} | " + " | ".join(cells) + " |")
        lines.append("")
    for key, title, paper in (("db_k2", "Table 4 — fuzzy DB at K = 2, k-means averaging", PAPER_DB_K2),
                              ("gap_k2", "Table 6 — knowledge gap at K = 2, k-means averaging", PAPER_GAP_K2)):
        lines.append(f"#### {title}; ours (paper)\n")
        lines.append("| statistic | central | " + " | ".join(f"{P} clients" for P in clients) + " |")
        lines.append("|---|---|" + "---|" * len(clients))
        groups = [cen] + [df[(df["method"] == "fedfcm") & (df["P"] == P)] for P in clients]
        stats = {"q25": lambda s: s.quantile(0.25), "q50": lambda s: s.quantile(0.5), "q75": lambda s: s.quantile(0.75),
                 "min": lambda s: s.min(), "max": lambda s: s.max()}
        for name, fn in stats.items():
            cells = []
            for i, g in enumerate(groups):
                ref = paper.get(name)
                pv = f" ({ref[i]})" if ref is not None and i < len(ref) and len(clients) == 3 else ""
                cells.append(f"{fn(g[key]):.4g}{pv}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plots(df: pd.DataFrame, out: Path, clients: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "plots").mkdir(parents=True, exist_ok=True)
    for by, fname, label in (("spread", "correct_by_spread.png", "spread S (sigma)"),
                             ("dim", "correct_by_dim.png", "dimension D")):
        fig, ax = plt.subplots(figsize=(6, 4))
        cen = df[df["method"] == "central"].groupby(by)["chosen_k"].apply(lambda s: (s == 2).mean())
        ax.plot(cen.index, cen.values, "k--o", label="central")
        for P in clients:
            d = df[(df["method"] == "fedfcm") & (df["P"] == P)].groupby(by)["chosen_k"].apply(lambda s: (s == 2).mean())
            ax.plot(d.index, d.values, "-o", label=f"FedFCM, {P} clients")
        if by == "dim":
            ax.set_xscale("log", base=2)
        ax.set_xlabel(label)
        ax.set_ylabel("share of runs with K = 2 chosen")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "plots" / fname, dpi=100)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 sets, 1 repeat, P in {2, 5}, at most 10 rounds")
    ap.add_argument("--out", default="fedray-output/stallmann_g2")
    ap.add_argument("--data-dir", default=None, help="benchmark data folder (default: $FEDRAY_DATA_DIR)")
    ap.add_argument("--repeats", type=int, default=10, help="repeats per set (the paper: 20)")
    ap.add_argument("--max-rounds", type=int, default=50, help="cap on FedFCM rounds per K")
    ap.add_argument("--n-init", type=int, default=10, help="starts of central FCM per K (the best is kept)")
    ap.add_argument("--central-only", action="store_true", help="only the central baseline (no federated runs)")
    ap.add_argument("--first-repeat", type=int, default=0, help="seed of the first repeat")
    ap.add_argument("--spreads", type=int, nargs="+", default=None, help="only these spreads S (full run)")
    ap.add_argument("--dims", type=int, nargs="+", default=None, help="only these dimensions D (full run)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (sets run in parallel)")
    ap.add_argument("--battery", choices=("g2mg", "g2"), default="g2mg",
                    help="g2mg: Gagolewski's g2mg_D_S (D = 1..128, S = 10..90); g2: Fränti's original g2-2-S "
                         "(D = 2, S = 10..100)")
    ap.add_argument("--tables-from", nargs="+", default=None, metavar="PARQUET",
                    help="skip the runs; build the tables and figures from g2.parquet files of earlier runs")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    g2 = args.battery == "g2"
    if args.quick:
        sets, clients, repeats, max_rounds = ([(2, 10), (2, 60)] if g2 else [(2, 10), (8, 30)]), [2, 5], 1, 10
    else:
        dims = args.dims or ((2,) if g2 else (1, 2, 4, 8, 16, 32, 64, 128))
        sets = [(d, s) for d in dims for s in (args.spreads or range(10, 110 if g2 else 100, 10))]
        clients, repeats, max_rounds = [2, 5, 10], args.repeats, args.max_rounds
    algorithms = ("fedfcm", "fedfcm-avg")
    if args.tables_from:
        df = complete_repeats(pd.concat([pd.read_parquet(f) for f in args.tables_from], ignore_index=True))
        repeats = int(df["repeat"].nunique())
    else:
        df = run(args.data_dir, sets, clients, repeats, algorithms, max_rounds, jobs=args.jobs,
                 partial=out / "g2.partial.parquet", n_init=args.n_init, central_only=args.central_only,
                 first_repeat=args.first_repeat, battery=args.battery)
    df.to_parquet(out / "g2.parquet", index=False)
    md = markdown(df, clients, algorithms, repeats)
    (out / "g2.md").write_text(md)
    plots(df, out, clients)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
