"""Stallmann & Wilbik (2022), Section 3.2.2: choosing K on the G2 sets (Tables 3–7, Figures 2–4).

The G2 sets (Fränti et al.): 2048 points, 1024 from each of two Gaussians centred at (500, 500, ...) and
(600, 600, ...) with standard deviation S in every coordinate, integer coordinates; D = 2, 4, ..., 1024 and
S = 10, 20, ..., 100. The data folder holds the 2-D originals (``benchmark:g2/g2-2-S``); the other dimensions
are drawn here by the same recipe (:func:`generate`, one fixed draw per (D, S), as a file would be).

Protocol (one *unit* = one set and one repeat): the set is split uniformly at random over P ∈ {2, 5, 10}
clients (the repeat is the seed of the split and of the algorithms); K is chosen over [2, 6] by the minimum
of FedFuzzDB with FedFCM (k-means averaging) and with ``fedfcm-avg`` (federated averaging), at most 50 rounds
per K, and by the fuzzy DB index of central FCM on the union (best of 10 starts per K). Each unit gives seven
records of ``results/g2.csv`` (central and the six federated runs), written when the unit ends; a unit
already recorded is skipped. The knowledge gap (eq. 19) compares the K = 2 centres with the class means.

    python -m reproductions.stallmann2022.g2 --dims 2 --source original --repeats 0 1     # the 2-D originals
    python -m reproductions.stallmann2022.g2 --dims 4 8 16 --repeats 0                    # generated sets
    python -m reproductions.stallmann2022.g2 --summarise                                  # Tables 4-7, figures
"""
from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import fedray
from reproductions.common import data_dir as default_data_dir
from reproductions.common import record_run, recorded, results_dir

log = logging.getLogger("stallmann_g2")

PAPER = "stallmann2022"
RECORDS = "g2"
QUANTILES = "g2-quantiles"
DIMS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SPREADS = tuple(range(10, 110, 10))
LAB_SPREADS = (10, 40, 70, 100)  # the lab's runner: four of the ten spreads (the CLI's default is all ten)
CLIENTS = (2, 5, 10)
ALGORITHMS = ("fedfcm", "fedfcm-avg")
THRESHOLD = 1.3  # Table 3 counts only runs whose index at the true K = 2 is below this
N_POINTS, CENTRES = 1024, (500.0, 600.0)  # per cluster; the clusters' centre in every coordinate
G2_STREAM = 2022  #: data_rng(draw, G2_STREAM, D, S): the generated G2 sets
STATS = {"q25": lambda s: s.quantile(0.25), "q50": lambda s: s.quantile(0.5), "q75": lambda s: s.quantile(0.75),
         "min": lambda s: s.min(), "max": lambda s: s.max()}
SIZES = "2048 points; P ∈ {2, 5, 10} IID clients; K ∈ [2, 6]; ≤ 50 rounds per K; central FCM best of 10 starts"


# ---------------------------------------------------------------------------------------------- the data

def generate(dim: int, spread: float, draw: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One G2 set by the published recipe: 1024 points from N(500·1, S²I) then 1024 from N(600·1, S²I) in D
    dimensions, each coordinate truncated to an integer (as the 2-D originals are; see the README).

    Returns ``(X, y)``: ``X`` float64 of shape (2048, D) holding integers, ``y`` 0 for the first cluster, 1 for
    the second. ``draw`` picks the random draw (the same (D, S, draw) gives the same set).
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise fedray.ConfigError(f"g2 dim: must be an integer >= 1; got {dim!r}")
    if isinstance(spread, bool) or not isinstance(spread, (int, float, np.integer, np.floating)) \
            or not math.isfinite(spread) or spread <= 0:
        raise fedray.ConfigError(f"g2 spread: must be a finite number > 0; got {spread!r}")
    if isinstance(draw, bool) or not isinstance(draw, (int, np.integer)) or draw < 0:
        raise fedray.ConfigError(f"g2 draw: must be an integer >= 0; got {draw!r}")
    rng = fedray.data_rng(int(draw), G2_STREAM, int(dim), int(round(float(spread) * 1000)))
    X = np.vstack([np.trunc(rng.normal(c, float(spread), size=(N_POINTS, int(dim)))) for c in CENTRES])
    return X, np.repeat(np.arange(2, dtype=np.int64), N_POINTS)


def load_set(dim: int, spread: int, source: str, data_dir: str | None) -> tuple[Any, np.ndarray, np.ndarray]:
    """``(data.dataset value, X, y)`` of one set: ``original`` (the 2-D files), ``generated`` or ``g2mg``."""
    if source == "generated":
        X, y = generate(dim, spread)
        return fedray.from_arrays(X, y, partition="iid"), X, y
    if source == "original":
        if dim != 2:
            raise fedray.ConfigError(f"g2 --source original: the data folder holds D = 2 only; got D = {dim}")
        name = f"benchmark:g2/g2-2-{int(spread)}"
    elif source == "g2mg":
        name = f"benchmark:g2mg/g2mg_{int(dim)}_{int(spread)}"
    else:
        raise fedray.ConfigError(f"g2 --source: expected original, generated or g2mg; got {source!r}")
    ds = fedray.load_dataset(name, data_dir)
    return name, np.asarray(ds.X, dtype=np.float64), np.asarray(ds.y)


def _config(dataset: Any, n_clients: int, seed: int, data_dir: str | None, algorithm: str,
            max_rounds: int) -> dict[str, Any]:
    return {"seed": int(seed), "algorithm": {"name": algorithm, "params": {"max_rounds": int(max_rounds)}},
            "data": ({"dataset": dataset, "data_dir": data_dir, "partition": {"name": "iid"}}
                     if isinstance(dataset, str) else {"dataset": dataset}),
            "federation": {"n_clients": int(n_clients), "fraction": 1.0},
            "runtime": {"backend": "local", "progress": False}}


# ---------------------------------------------------------------------------------------------- the runs

def label(method: str, P: int) -> str:
    return "central" if method == "central" else f"{method} P={P}"


def run_unit(dim: int, spread: int, repeat: int, *, source: str, data_dir: str | None,
             clients: tuple[int, ...] = CLIENTS, algorithms: tuple[str, ...] = ALGORITHMS, max_rounds: int = 50,
             n_init: int = 10, scale: str = "paper", record: bool = True) -> list[dict[str, Any]]:
    """One set and one repeat: central and every (algorithm, P); recorded when the unit ends."""
    t0 = time.perf_counter()
    dataset, X, y = load_set(dim, spread, source, data_dir)
    ref = np.vstack([X[y == c].mean(axis=0) for c in np.unique(y)])
    var = X.var(axis=0)
    rows = []
    first = True
    for P in clients:
        for alg in algorithms:
            t_call = time.perf_counter()
            sel = fedray.select_k(_config(dataset, P, repeat, data_dir, alg, max_rounds), k_min=2, k_max=6,
                                  local=False, central=first, n_init=n_init)
            call_s = time.perf_counter() - t_call
            runs = ([("central", 0, "central", sel.central_centers)] if first else []) \
                + [(alg, P, "federated", sel.federated_centers)]
            for method, p, col, centres in runs:
                idx = dict(zip(sel.table["k"], sel.table[col]))
                chosen = int(sel.chosen[col])
                rows.append({"method": label(method, p), "dim": int(dim), "spread": int(spread), "P": int(p),
                             "source": source, "chosen_k": chosen, "correct": 100.0 * (chosen == 2),
                             "correct_kept": 100.0 * (chosen == 2) if idx[2] < THRESHOLD else float("nan"),
                             "gap_k2": knowledge(centres[2], ref, var), "wall_s": call_s,
                             **{f"db_k{k}": float(v) for k, v in idx.items()}})
            first = False
    wall = time.perf_counter() - t0
    if record:
        for r in rows:
            record_run(PAPER, RECORDS, method=r["method"], variant=f"D={dim} S={spread}", seed=repeat, scale=scale,
                       sizes=SIZES, metrics={k: v for k, v in r.items() if k not in ("method", "wall_s")},
                       config={"max_rounds": max_rounds, "n_init": n_init, "k_range": [2, 6], "source": source},
                       wall_s=r["wall_s"])
    log.info("G2 D=%d S=%d repeat %d (%s): %.1f s", dim, spread, repeat, source, wall)
    return rows


def knowledge(centres: np.ndarray, ref: np.ndarray, var: np.ndarray) -> float:
    return float(fedray.knowledge_gap(centres, ref, var))


def source_of(dim: int, source: str) -> str:
    """``auto``: the original files at D = 2, generated sets elsewhere."""
    if source != "auto":
        return source
    return "original" if dim == 2 else "generated"


def run(data_dir: str | None, dims: tuple[int, ...], spreads: tuple[int, ...], repeats: list[int], *,
        source: str = "auto", record: bool = True, **kw: Any) -> pd.DataFrame:
    """Every (set, repeat) not yet recorded, repeat by repeat (so a run stopped early weighs every set alike)."""
    done = recorded(PAPER, RECORDS) if record else pd.DataFrame(columns=["variant", "seed", "method"])
    have = set(zip(done["variant"], done["seed"].astype(int))) if len(done) else set()
    rows = []
    for rep in repeats:
        for dim in dims:
            for spread in spreads:
                if (f"D={dim} S={spread}", rep) in have:
                    continue
                rows += run_unit(dim, spread, rep, source=source_of(dim, source), data_dir=data_dir, record=record,
                                 **kw)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- the tables

def records_frame() -> pd.DataFrame:
    """The recorded units as one frame (``method``, ``seed`` and the metrics without their prefix)."""
    df = recorded(PAPER, RECORDS)
    if not len(df):
        return pd.DataFrame()
    out = df[["method", "seed", "wall_s", "load", "device"]].copy()
    for c in [c for c in df.columns if c.startswith("m:")]:
        out[c[2:]] = df[c]
    return complete_repeats(out)


def complete_repeats(df: pd.DataFrame) -> pd.DataFrame:
    """Only the repeats every recorded set has, so every set weighs alike."""
    sets = df[["dim", "spread"]].drop_duplicates().shape[0]
    per = df[["dim", "spread", "seed"]].drop_duplicates().groupby("seed").size()
    keep = per[per == sets].index
    if len(keep) < len(per):
        log.info("tables from repeats %s (every set has them); left out %s", list(keep), sorted(set(per.index) - set(keep)))
    return df[df["seed"].isin(keep)].reset_index(drop=True)


def summarise(scale: str = "paper") -> pd.DataFrame:
    """Tables 4–7 from the records: the quantiles of the index and of the knowledge gap at K = 2 per column,
    over every complete repeat of every set, rewritten to ``results/g2-quantiles.csv``."""
    df = records_frame()
    path = results_dir(PAPER) / f"{QUANTILES}.csv"
    if path.exists():
        path.unlink()
    if not len(df):
        return pd.DataFrame()
    dims = sorted(df["dim"].unique())
    reps = sorted(df["seed"].unique())
    sizes = (f"quantiles over {df[['dim', 'spread']].drop_duplicates().shape[0]} sets (D = "
             f"{', '.join(str(int(d)) for d in dims)}) × repeats {reps[0]}–{reps[-1]}")
    rows = []
    for method, d in df.groupby("method", sort=False):
        for stat, fn in STATS.items():
            m = {"db": float(fn(d["db_k2"])), "gap": float(fn(d["gap_k2"])), "runs": int(len(d))}
            rows.append({"method": method, "stat": stat, **m})
            record_run(PAPER, QUANTILES, method=method, variant=stat, seed=int(reps[0]), scale=scale, sizes=sizes,
                       metrics=m, config={"from": f"results/{RECORDS}.csv", "repeats": [int(r) for r in reps],
                                          "dims": [int(x) for x in dims]},
                       wall_s=float(pd.to_numeric(d["wall_s"], errors="coerce").sum()), load=_load_range(d["load"]), device="; ".join(
                           sorted(set(d["device"]))))
    return pd.DataFrame(rows)


def _load_range(loads: pd.Series) -> str:
    vals = pd.to_numeric(loads, errors="coerce").dropna()
    return f"{vals.min():.1f}–{vals.max():.1f}" if len(vals) else "unknown"


def markdown(df: pd.DataFrame) -> str:
    """Table 3 and the per-spread and per-dimension shares from a :func:`records_frame`."""
    cols = [m for m in ("central", *(label(a, P) for a in ALGORITHMS for P in CLIENTS)) if m in set(df["method"])]
    kept = df.dropna(subset=["correct_kept"])
    lines = [f"Table 3 (index at K = 2 below {THRESHOLD}), repeats {sorted(df['seed'].unique())}:", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
             "| " + " | ".join(f"{kept[kept['method'] == m]['correct_kept'].mean():.1f}%" for m in cols) + " |", ""]
    for by in ("spread", "dim"):
        lines += [f"Correct-K share per {by} (all runs):", "", f"| {by} | " + " | ".join(cols) + " |",
                  "|---|" + "---|" * len(cols)]
        for v in sorted(df[by].unique()):
            d = df[df[by] == v]
            lines.append(f"| {int(v)} | " + " | ".join(f"{(d[d['method'] == m]['chosen_k'] == 2).mean():.2f}"
                                                     for m in cols) + " |")
        lines.append("")
    return "\n".join(lines)


def plots(df: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "plots").mkdir(parents=True, exist_ok=True)
    for by, fname, xlabel in (("spread", "correct_by_spread.png", "spread S (sigma)"),
                              ("dim", "correct_by_dim.png", "dimension D")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for m in ("central", *(label("fedfcm", P) for P in CLIENTS)):
            d = df[df["method"] == m].groupby(by)["chosen_k"].apply(lambda s: (s == 2).mean())
            ax.plot(d.index, d.values, "k--o" if m == "central" else "-o", label=m)
        if by == "dim":
            ax.set_xscale("log", base=2)
        ax.set(xlabel=xlabel, ylabel="share of runs with K = 2 chosen", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "plots" / fname, dpi=100)
        plt.close(fig)


# ---------------------------------------------------------------------------------------------- commands

def run_claim(claim: Any, scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    """The lab's runner: every D at the spreads :data:`LAB_SPREADS` for the repeats ``seeds`` (the 2-D originals
    at D = 2), then Tables 4–7 from every complete repeat recorded."""
    if quick:
        run(data_dir, (2, 8), (10, 60), seeds[:1], clients=(2, 5), max_rounds=10, n_init=2, scale=scale)
    else:
        run(data_dir, DIMS, LAB_SPREADS, seeds, scale=scale)
    summarise(scale)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=list(DIMS))
    ap.add_argument("--spreads", type=int, nargs="+", default=list(SPREADS))
    ap.add_argument("--repeats", type=int, nargs="+", default=[0], help="the repeats (seeds) to run (paper: 0–19)")
    ap.add_argument("--source", choices=("auto", "original", "generated", "g2mg"), default="auto",
                    help="auto: the original files at D = 2, generated sets elsewhere; g2mg: Gagolewski's variant")
    ap.add_argument("--summarise", action="store_true", help="no runs: Tables 4–7 and the figures from the records")
    ap.add_argument("--quick", action="store_true", help="2 sets, 1 repeat, P in {2, 5}, 10 rounds; nothing recorded")
    ap.add_argument("--out", default="fedray-output/stallmann2022-g2")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    args.data_dir = default_data_dir(args.data_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        df = run(args.data_dir, (2, 8), (10, 60), [0], source=args.source, record=False, clients=(2, 5),
                 max_rounds=10, n_init=2)
        df = df.rename(columns={"repeat": "seed"}).assign(seed=0)
    else:
        if not args.summarise:
            run(args.data_dir, tuple(args.dims), tuple(args.spreads), args.repeats, source=args.source)
        summarise()
        df = records_frame()
    if not len(df):
        log.info("no records yet")
        return 0
    md = markdown(df)
    (out / "g2.md").write_text(md)
    plots(df, out)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
