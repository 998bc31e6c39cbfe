"""Triebe & Rajagopal (2019), Section 3: Federated K-means against central k-means on non-IID 1-D data.

``scenario:triebe-1d`` (50 clients, 10 points each, every client from one of five
Gaussians with means 1..5, scale 0.2); K = 5, T = 200 rounds, B = ∞, random initial
centroids (uniform in the data range), reassignment after 20 rounds under 1 %.
Sweeps (the paper's Figures 1–5), each for α ∈ {1, 0.5}:

* sample fraction C ∈ {0.1, 0.2, 0.5, 1.0} with E = 1, β = 1;
* local epochs E ∈ {1, 5, 10} with C = 0.1, β ∈ {1, 0.1};
* client rate β ∈ {1, 0.5, 0.2, 0.1} with C = 0.1, E ∈ {1, 10}.

Metrics (as in the paper): mean Euclidean intra-cluster distance (each point to its
nearest centroid) and the Davies–Bouldin index, mean and standard deviation over
10 seeds; "central" is Lloyd k-means on the union from a random start (T = 20).

Writes ``triebe.parquet``, ``triebe.md`` and ``plots/triebe_*.png`` to ``--out``.

    python experiments/triebe_sweep.py
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

import fedray
from fedray.algorithms.fedfuzzdb import crisp_davies_bouldin
from fedray.core.ops import assign, lloyd

log = logging.getLogger("triebe_sweep")


def sweeps(quick: bool) -> list[dict]:
    alphas = (1.0, 0.5)
    out = []
    fractions = (0.1, 1.0) if quick else (0.1, 0.2, 0.5, 1.0)
    for a in alphas:
        for c in fractions:
            out.append({"sweep": "fraction", "alpha": a, "fraction": c, "epochs": 1, "beta": 1.0})
    for a in alphas:
        for b in ((1.0,) if quick else (1.0, 0.1)):
            for e in ((1, 10) if quick else (1, 5, 10)):
                out.append({"sweep": "epochs", "alpha": a, "fraction": 0.1, "epochs": e, "beta": b})
    for a in alphas:
        for e in ((1,) if quick else (1, 10)):
            for b in ((1.0, 0.1) if quick else (1.0, 0.5, 0.2, 0.1)):
                out.append({"sweep": "beta", "alpha": a, "fraction": 0.1, "epochs": e, "beta": b})
    return out


def _metrics(X: np.ndarray, C: np.ndarray) -> tuple[float, float]:
    _, d2 = assign(X, C)
    return float(np.sqrt(d2).mean()), crisp_davies_bouldin(X, C)


def run(seeds: int, rounds: int, quick: bool) -> pd.DataFrame:
    rows = []
    grid = sweeps(quick)
    for seed in range(seeds):
        t0 = time.perf_counter()
        cfg = fedray.make_config(seed=seed, algorithm={"name": "fedkmeans"}, data={"dataset": "scenario:triebe-1d"},
                                 federation={"rounds": rounds}, runtime={"backend": "local", "progress": False})
        with fedray.Session(cfg) as s:
            X = np.vstack([p[1] for p in s.executor.gather_data(labels=False)])
            rng = np.random.default_rng(np.random.SeedSequence([seed, 404]))
            C0 = rng.uniform(X.min(), X.max(), size=(5, 1))
            Cc = lloyd(X, C0, max_iter=20)[0]
            intra, db = _metrics(X, Cc)
            rows.append({"sweep": "central", "seed": seed, "intra": intra, "db": db})
            for g in grid:
                s.config.federation.fraction = g["fraction"]
                params = {"n_clusters": 5, "init": "random-box", "alpha": g["alpha"], "beta": g["beta"],
                          "epochs": g["epochs"], "batch_size": None, "max_rounds": rounds}
                res = s.run("fedkmeans", params, output=False)
                intra, db = _metrics(X, res.model["centers"])
                rows.append({**g, "seed": seed, "intra": intra, "db": db,
                             "reassigned": float(res.history["reassigned"].sum())})
        log.info("seed %d: %d federated runs in %.1f s", seed, len(grid), time.perf_counter() - t0)
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame) -> str:
    cen = df[df["sweep"] == "central"]
    lines = [f"Central k-means: intra-cluster distance {cen['intra'].mean():.4f} ± {cen['intra'].std():.4f}, "
             f"Davies–Bouldin {cen['db'].mean():.4f} ± {cen['db'].std():.4f} ({cen['seed'].nunique()} seeds).\n"]
    for sweep, var, fixed in (("fraction", "fraction", ("epochs", "beta")), ("epochs", "epochs", ("beta",)),
                              ("beta", "beta", ("epochs",))):
        d = df[df["sweep"] == sweep]
        if d.empty:
            continue
        keys = ["alpha", *fixed, var]
        g = d.groupby(keys).agg(intra=("intra", "mean"), intra_sd=("intra", "std"), db=("db", "mean"),
                                db_sd=("db", "std")).reset_index()
        varied = {"fraction": "sample fraction C", "epochs": "client epochs E"}.get(var, "client rate β")
        lines.append(f"#### varying {varied}\n")
        lines.append("| " + " | ".join(keys) + " | intra-cluster distance | Davies–Bouldin |")
        lines.append("|" + "---|" * (len(keys) + 2))
        for _, r in g.iterrows():
            lines.append("| " + " | ".join(f"{r[k]:g}" for k in keys)
                         + f" | {r['intra']:.4f} ± {r['intra_sd']:.4f} | {r['db']:.4f} ± {r['db_sd']:.4f} |")
        lines.append("")
    return "\n".join(lines)


def plots(df: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "plots").mkdir(parents=True, exist_ok=True)
    cen = df[df["sweep"] == "central"]
    for sweep, var in (("fraction", "fraction"), ("epochs", "epochs"), ("beta", "beta")):
        d = df[df["sweep"] == sweep]
        if d.empty:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        other = [c for c in ("epochs", "beta") if c != var and d[c].nunique() > 1]
        for key, sub in d.groupby(["alpha", *other]):
            key = key if isinstance(key, tuple) else (key,)
            label = ", ".join(f"{n}={v:g}" for n, v in zip(["alpha", *other], key))
            m = sub.groupby(var)[["intra", "db"]].agg(["mean", "std"])
            for ax, metric in zip(axes, ("intra", "db")):
                ax.errorbar(m.index, m[(metric, "mean")], yerr=m[(metric, "std")], marker="o", capsize=3, label=label)
        for ax, metric, title in zip(axes, ("intra", "db"), ("mean intra-cluster distance", "Davies–Bouldin")):
            ax.axhline(cen[metric].mean(), color="k", ls="--", label="central")
            ax.set_xlabel(var)
            ax.set_title(title)
            ax.grid(alpha=0.3)
            if var == "beta":
                ax.set_xscale("log")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "plots" / f"triebe_{sweep}.png", dpi=100)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 30 rounds, a smaller grid")
    ap.add_argument("--out", default="fedray-output/triebe_sweep")
    ap.add_argument("--data-dir", default=None, help="unused (the scenario is generated)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df = run(2 if args.quick else args.seeds, 30 if args.quick else args.rounds, args.quick)
    df.to_parquet(out / "triebe.parquet", index=False)
    md = markdown(df)
    (out / "triebe.md").write_text(md)
    plots(df, out)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
