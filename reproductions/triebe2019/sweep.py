"""Triebe & Rajagopal (2019), Section 3, Figures 1–5: Federated K-means against central k-means, swept.

``scenario:triebe-1d`` (50 clients, 10 points each, every client from one of five
Gaussians with means 1..5, scale 0.2; the data are redrawn per seed); K = 5, T = 200
rounds, B = ∞, random initial centroids (uniform in the data range), reassignment of
a cluster under 1 % of all points for 20 rounds. Each panel of the paper's Figures
1–5 sweeps one setting for α ∈ {1, 0.5} (:data:`PANELS`):

* Figures 1–3, the sample fraction C ∈ {0.1, 0.2, 0.5, 1} at (E, β) = (1, 1),
  (10, 1), (10, 0.1), (5, 1) and (5, 0.2);
* Figure 4, the local epochs E ∈ {1, 5, 10} at C = 0.1, β ∈ {1, 0.1};
* Figure 5, the client rate β ∈ {1, 0.5, 0.2, 0.1} at C = 0.1, E ∈ {1, 10}.

Metrics (as in the paper): mean Euclidean intra-cluster distance (each point to its
nearest centroid) and the Davies–Bouldin index, per seed; "central" is Lloyd k-means
on the union from a random start (T = 20). Panels share settings (Figure 1's C = 0.1
is Figure 4's E = 1), so every setting runs once a seed and is one record of
``results/sweep.csv`` (resumable: recorded runs are skipped).

    python -m reproductions run triebe2019/figure2a-intra --seeds 0 1 2 3 4 5 6 7 8 9   # one panel
    python -m reproductions.triebe2019.sweep --record                                  # every panel, recorded
    python -m reproductions.triebe2019.sweep --quick --out /tmp/triebe                 # a small form, no records

``--out`` gets ``triebe.parquet``, ``triebe.md`` and ``plots/triebe_<panel>.png``.
"""
from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

import fedray
from fedray import assign, lloyd
from fedray.algorithms.fedfuzzdb import crisp_davies_bouldin
from reproductions.common import record_run, recorded

log = logging.getLogger("triebe_sweep")

PAPER = "triebe2019"
RECORDS = "sweep"
ALPHAS = (1.0, 0.5)
FRACTIONS = (0.1, 0.2, 0.5, 1.0)
# panel: (the swept setting, its values, the fixed settings), as in the captions of Figures 1–5
PANELS: dict[str, tuple[str, tuple[float, ...], dict[str, float]]] = {
    "figure1": ("C", FRACTIONS, {"E": 1, "beta": 1.0}),
    "figure2a": ("C", FRACTIONS, {"E": 10, "beta": 1.0}),
    "figure2b": ("C", FRACTIONS, {"E": 10, "beta": 0.1}),
    "figure3a": ("C", FRACTIONS, {"E": 5, "beta": 1.0}),
    "figure3b": ("C", FRACTIONS, {"E": 5, "beta": 0.2}),
    "figure4a": ("E", (1, 5, 10), {"C": 0.1, "beta": 1.0}),
    "figure4b": ("E", (1, 5, 10), {"C": 0.1, "beta": 0.1}),
    "figure5a": ("beta", (1.0, 0.5, 0.2, 0.1), {"C": 0.1, "E": 1}),
    "figure5b": ("beta", (1.0, 0.5, 0.2, 0.1), {"C": 0.1, "E": 10}),
}
K, ROUNDS, CENTRAL_ITERS = 5, 200, 20
CENTRAL = "central"
QUICK = [{"alpha": 1.0, "C": 0.1, "E": 1, "beta": 1.0}, {"alpha": 0.5, "C": 1.0, "E": 1, "beta": 1.0},
         {"alpha": 1.0, "C": 0.1, "E": 5, "beta": 1.0}]
SIZES = "50 non-IID clients × 10 points (1-D), K = 5, T = 200, B = ∞"


def variant(s: dict[str, float]) -> str:
    """A setting's name in the records: ``α=0.5 C=0.2 E=1 β=1``."""
    return f"α={s['alpha']:g} C={s['C']:g} E={int(s['E'])} β={s['beta']:g}"


def panel_settings(panel: str) -> list[dict[str, float]]:
    """The settings a panel plots: each α, then each value of the swept setting."""
    if panel not in PANELS:
        raise ValueError(f"panel {panel!r} is not one of {', '.join(PANELS)}")
    name, values, fixed = PANELS[panel]
    return [{"alpha": a, **fixed, name: v} for a in ALPHAS for v in values]


def panel_variants(panel: str) -> tuple[str, ...]:
    """The panel's variants as the records name them, then ``central``."""
    return (*(variant(s) for s in panel_settings(panel)), CENTRAL)


def settings_of(panels: Iterable[str]) -> list[dict[str, float]]:
    """The distinct settings of some panels, in order."""
    out: dict[str, dict[str, float]] = {}
    for p in panels:
        for s in panel_settings(p):
            out.setdefault(variant(s), s)
    return list(out.values())


def metrics(X: np.ndarray, C: np.ndarray) -> dict[str, float]:
    """The paper's two metrics: mean distance of a point to its nearest centroid, and Davies–Bouldin."""
    _, d2 = assign(X, C)
    return {"intra": float(np.sqrt(d2).mean()), "db": float(crisp_davies_bouldin(X, C))}


def central_start(X: np.ndarray, seed: int) -> np.ndarray:
    """Central k-means' random start: K centroids uniform in the data range (its own stream of the seed)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 404]))
    return rng.uniform(X.min(), X.max(), size=(K, X.shape[1]))


def session(seed: int, rounds: int) -> fedray.Session:
    cfg = fedray.make_config(seed=seed, algorithm={"name": "fedkmeans"}, data={"dataset": "scenario:triebe-1d"},
                             federation={"rounds": rounds}, runtime={"backend": "local", "progress": False})
    return fedray.Session(cfg)


def union(s: fedray.Session) -> np.ndarray:
    return np.vstack([p[1] for p in s.executor.gather_data(labels=False)])


def fed_params(g: dict[str, float], rounds: int) -> dict[str, object]:
    return {"n_clusters": K, "init": "random-box", "alpha": g["alpha"], "beta": g["beta"], "epochs": int(g["E"]),
            "batch_size": None, "max_rounds": rounds}


def run(settings: list[dict[str, float]], seeds: Iterable[int], rounds: int = ROUNDS, record: bool = True,
        scale: str = "paper") -> pd.DataFrame:
    """Central k-means and every setting for each seed; with ``record`` each run is recorded as it ends and
    runs already recorded are skipped (their records are returned)."""
    done = recorded(PAPER, RECORDS) if record else None
    have = set() if done is None else {(v, int(s)) for v, s, sc in zip(done["variant"], done["seed"], done["scale"])
                                          if sc == scale}
    rows = []
    for seed in seeds:
        todo = [g for g in settings if (variant(g), seed) not in have]
        if (CENTRAL, seed) in have and not todo:
            log.info("seed %d: recorded already", seed)
            continue
        t0 = time.perf_counter()
        with session(seed, rounds) as s:
            X = union(s)
            if (CENTRAL, seed) not in have:
                t_run = time.perf_counter()
                m = metrics(X, lloyd(X, central_start(X, seed), max_iter=CENTRAL_ITERS)[0])
                rows.append({"variant": CENTRAL, "seed": seed, **m})
                if record:
                    record_run(PAPER, RECORDS, method=CENTRAL, variant=CENTRAL, seed=seed, scale=scale, sizes=SIZES,
                               metrics=m, config={"iterations": CENTRAL_ITERS, "start": "uniform in the data range"},
                               wall_s=time.perf_counter() - t_run)
            for g in todo:
                t_run = time.perf_counter()
                s.config.federation.fraction = g["C"]
                res = s.run("fedkmeans", fed_params(g, rounds), output=False)
                m = {**metrics(X, res.model["centers"]), "reassigned": float(res.history["reassigned"].sum())}
                rows.append({"variant": variant(g), "seed": seed, **g, **m})
                if record:
                    record_run(PAPER, RECORDS, method="fedkmeans", variant=variant(g), seed=seed, scale=scale,
                               sizes=SIZES, metrics=m, config={**g, "rounds": rounds},
                               wall_s=time.perf_counter() - t_run)
        log.info("seed %d: %d federated runs in %.1f s", seed, len(todo), time.perf_counter() - t0)
    return pd.DataFrame(rows)


def records_frame(scale: str = "paper") -> pd.DataFrame:
    """The recorded runs in :func:`run`'s shape (variant, seed, the setting, intra, db)."""
    import json

    done = recorded(PAPER, RECORDS)
    done = done[done["scale"] == scale]
    rows = [{"variant": r["variant"], "seed": int(r["seed"]), **json.loads(r["config"]), "intra": r["m:intra"],
             "db": r["m:db"]} for _, r in done.iterrows()]
    return pd.DataFrame(rows)


def run_claim(claim, scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    """The lab's runner: the claim's panel (``figure2a`` of ``figure2a-intra``) over ``seeds``, recorded."""
    panel = claim.id.split("-")[0]
    if quick:
        run(panel_settings(panel)[:2], seeds[:1], rounds=30, scale=scale)
    else:
        run(panel_settings(panel), seeds, scale=scale)


def markdown(df: pd.DataFrame) -> str:
    """Per panel, mean ± standard deviation over the seeds of both metrics, central k-means last."""
    g = df.groupby("variant")[["intra", "db"]].agg(["mean", "std", "count"])
    lines = []
    for panel, (name, _, fixed) in PANELS.items():
        rows = [v for v in panel_variants(panel) if v in g.index]
        if len(rows) <= 1:
            continue
        lines += [f"#### {panel}: varying {name} at " + ", ".join(f"{k}={v:g}" for k, v in fixed.items()) + "\n",
                  "| setting | intra-cluster distance | Davies–Bouldin | seeds |", "|---|---|---|---|"]
        for v in rows:
            r = g.loc[v]
            lines.append(f"| {v} | {r[('intra', 'mean')]:.4f} ± {r[('intra', 'std')]:.4f} | "
                         f"{r[('db', 'mean')]:.4f} ± {r[('db', 'std')]:.4f} | {int(r[('intra', 'count')])} |")
        lines.append("")
    return "\n".join(lines)


def plots(df: pd.DataFrame, out: Path) -> None:
    """One figure a panel: both metrics against the swept setting, one curve per α, central dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "plots").mkdir(parents=True, exist_ok=True)
    cen = df[df["variant"] == CENTRAL]
    for panel, (name, _, fixed) in PANELS.items():
        d = df[df["variant"].isin(panel_variants(panel)[:-1])]
        if d.empty:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for a, sub in d.groupby("alpha"):
            m = sub.groupby(name)[["intra", "db"]].agg(["mean", "std"])
            for ax, metric in zip(axes, ("intra", "db")):
                ax.errorbar(m.index, m[(metric, "mean")], yerr=m[(metric, "std")], marker="o", capsize=3,
                            label=f"α={a:g}")
        for ax, metric, title in zip(axes, ("intra", "db"), ("mean intra-cluster distance", "Davies–Bouldin")):
            if len(cen):
                ax.axhline(cen[metric].mean(), color="k", ls="--", label="central")
            ax.set_xlabel(name)
            ax.set_title(f"{panel}: {title} ({', '.join(f'{k}={v:g}' for k, v in fixed.items())})", fontsize=9)
            ax.grid(alpha=0.3)
            if name == "beta":
                ax.set_xscale("log")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "plots" / f"triebe_{panel}.png", dpi=100)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 30 rounds, three settings; no records")
    ap.add_argument("--record", action="store_true", help="record each run in results/sweep.csv (resumable)")
    ap.add_argument("--out", default="fedray-output/triebe_sweep")
    ap.add_argument("--data-dir", default=None, help="unused (the scenario is generated)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--panels", nargs="+", choices=list(PANELS), default=list(PANELS))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        df = run(QUICK, [0, 1], rounds=30, record=False)
    else:
        df = run(settings_of(args.panels), args.seeds, record=args.record)
        if args.record:
            df = records_frame()
    df.to_parquet(out / "triebe.parquet", index=False)
    md = markdown(df)
    (out / "triebe.md").write_text(md)
    plots(df, out)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
