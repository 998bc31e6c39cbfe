"""Triebe & Rajagopal (2019), Section 3.4, Figures 6 and 7: how the centroids progress, central and federated.

Figure 6 is central k-means (Lloyd on the union, T = 20) from a random start; Figure 7
is Federated K-means with (a) E = 1, β = 1 and (b) E = 10, β = 0.1, each for
α ∈ {1, 0.5}, T = 200, B = ∞. The captions leave the sample fraction C unstated: we
take C = 0.1, the fraction of the paper's Sections 3.2–3.3. Data, start and metrics
are those of :mod:`reproductions.triebe2019.sweep`; each run's record keeps the
intra-cluster distance after every round (``curve``), the final centroids, how many of
the five Gaussians (means 1..5) got a centroid within σ = 0.2 of its mean (``found``) and
the first round after which the intra-cluster distance stays within 1 % of its
final value (``settled``).

    python -m reproductions run triebe2019/figure7a-progress --seeds 0 1 2 3 4 5 6 7 8 9
    python -m reproductions.triebe2019.progress --out /tmp/progress    # the curves, drawn from the records
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from fedray import lloyd
from fedray.algorithms.fedkmeans import FedKMeans
from reproductions.common import record_run, recorded
from reproductions.triebe2019.sweep import (
    CENTRAL,
    CENTRAL_ITERS,
    PAPER,
    ROUNDS,
    K,
    central_start,
    fed_params,
    metrics,
    session,
    union,
    variant,
)

log = logging.getLogger("triebe_progress")

RECORDS = "progress"
FRACTION = 0.1
PANELS = {"figure7a": {"E": 1, "beta": 1.0}, "figure7b": {"E": 10, "beta": 0.1}}
TRUE_MEANS = np.arange(1.0, K + 1.0)
SIZES = "50 non-IID clients × 10 points (1-D), K = 5, T = 200 (central 20), B = ∞, C = 0.1"


class TracedFedKMeans(FedKMeans):
    """Federated K-means whose history carries every round's centroids (columns ``c0`` … ``c4``; 1-D data)."""

    def update(self, ctx, replies):  # noqa: ANN001 - the contract's types
        out = super().update(ctx, replies)
        out.update({f"c{i}": float(v) for i, v in enumerate(self.centers[:, 0])})
        return out


def settings(panel: str) -> list[dict[str, float]]:
    return [{"alpha": a, "C": FRACTION, **PANELS[panel]} for a in (1.0, 0.5)]


def summary(X: np.ndarray, path: list[np.ndarray]) -> dict[str, object]:
    """The record of one centroid path: the curve, the final metrics, the Gaussians found, when it settled."""
    curve = [metrics(X, C)["intra"] for C in path]
    final = path[-1]
    near = np.abs(final[:, 0][None, :] - TRUE_MEANS[:, None]).min(axis=1)
    off = np.abs(np.asarray(curve) - curve[-1]) > 0.01 * curve[-1]
    settled = int(np.flatnonzero(off)[-1] + 2) if off.any() else 1
    return {**metrics(X, final), "found": int((near <= 0.2).sum()), "settled": settled,
            "centroids": sorted(round(float(c), 5) for c in final[:, 0]), "curve": [round(c, 5) for c in curve]}


def central_path(X: np.ndarray, seed: int) -> list[np.ndarray]:
    """Lloyd's centroids after each of its ``CENTRAL_ITERS`` iterations from the central random start."""
    C, path = central_start(X, seed), []
    for _ in range(CENTRAL_ITERS):
        C = lloyd(X, C, max_iter=1)[0]
        path.append(C)
    return path


def run(panels: Iterable[str], seeds: Iterable[int], rounds: int = ROUNDS, record: bool = True,
        scale: str = "paper") -> list[dict[str, object]]:
    """Central k-means and the panels' federated runs for each seed, recorded as each ends (resumable)."""
    done = recorded(PAPER, RECORDS) if record else None
    have = set() if done is None else {(v, int(s)) for v, s, sc in zip(done["variant"], done["seed"], done["scale"])
                                          if sc == scale}
    todo_settings = [g for p in panels for g in settings(p)]
    rows = []
    for seed in seeds:
        todo = [g for g in todo_settings if (variant(g), seed) not in have]
        if (CENTRAL, seed) in have and not todo:
            continue
        with session(seed, rounds) as s:
            X = union(s)
            if (CENTRAL, seed) not in have:
                t0 = time.perf_counter()
                m = summary(X, central_path(X, seed))
                rows.append({"variant": CENTRAL, "seed": seed, **m})
                if record:
                    record_run(PAPER, RECORDS, method=CENTRAL, variant=CENTRAL, seed=seed, scale=scale, sizes=SIZES,
                               metrics=m, config={"iterations": CENTRAL_ITERS}, wall_s=time.perf_counter() - t0)
            for g in todo:
                t0 = time.perf_counter()
                s.config.federation.fraction = g["C"]
                res = s.run(TracedFedKMeans, fed_params(g, rounds), output=False)
                h = res.history
                path = [np.array([[h[f"c{i}"].iloc[t]] for i in range(K)]) for t in range(len(h))]
                if not np.allclose(path[-1], res.model["centers"]):
                    raise RuntimeError("the traced centroids of the last round differ from the model's")
                m = summary(X, path)
                rows.append({"variant": variant(g), "seed": seed, **m})
                if record:
                    record_run(PAPER, RECORDS, method="fedkmeans", variant=variant(g), seed=seed, scale=scale,
                               sizes=SIZES, metrics=m, config={**g, "rounds": rounds},
                               wall_s=time.perf_counter() - t0)
        log.info("seed %d: progress of %d runs", seed, len(todo) + 1)
    return rows


def run_claim(claim, scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    """The lab's runner: ``figure7a-progress`` runs central k-means (Figure 6) and Figure 7a, recorded."""
    run([claim.id.split("-")[0]], seeds[:1] if quick else seeds, rounds=30 if quick else ROUNDS, scale=scale)


def plot(rows: pd.DataFrame, out: Path) -> Path:
    """The mean intra-cluster distance against the round, one curve per variant (the progress of Figures 6–7)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for v, sub in rows.groupby("variant"):
        curves = np.array([np.asarray(c, dtype=float) for c in sub["curve"]])
        t = np.arange(1, curves.shape[1] + 1)
        ax.plot(t, curves.mean(axis=0), label=f"{v} (n={len(sub)})", ls="--" if v == CENTRAL else "-")
    ax.set_xscale("log")
    ax.set_xlabel("round (central: iteration)")
    ax.set_ylabel("mean intra-cluster distance")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    (out / "plots").mkdir(parents=True, exist_ok=True)
    path = out / "plots" / "triebe_progress.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="fedray-output/triebe_progress")
    ap.add_argument("--quick", action="store_true", help="seed 0, 30 rounds, no records")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        rows = pd.DataFrame(run(list(PANELS), [0], rounds=30, record=False))
    else:
        df = recorded(PAPER, RECORDS)
        rows = pd.DataFrame([{"variant": r["variant"], "seed": r["seed"], **json.loads(r["metrics"])}
                             for _, r in df[df["scale"] == "paper"].iterrows()])
    if rows.empty:
        log.warning("no records yet: run `python -m reproductions run triebe2019/figure7a-progress` first")
        return 1
    rows.to_parquet(out / "progress.parquet", index=False)
    print(plot(rows, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
