"""Mehta & Shao (2023), Tables V and VI on rotated MNIST: FLACC's memory T, and weight updates against gradients.

One FLACC run a (variant, seed) on MNIST's training images, rotated 0/90/180/270° for 10/20/30/40 %
of the clients, everything else the paper's (α₀ = 0, n_merge = 2, N_sep = 10, B = 32, η = 0.1,
``cnn28``) but the sizes of the scale:

* ``reduced`` (2 CPUs): 20 clients, c = 0.3, 60–120 samples a client, E = 5, 30 rounds;
* ``paper``: 100 clients, c = 0.2, 200–800 samples, E = 5, 100 rounds (a GPU: a run took about
  2 minutes on one H200 at this size).

Variants: ``T=2``, ``T=5``, ``T=10``, ``T=25``, ``T=inf`` (Table V; T = 10 with weight updates and
α₀ = 0 is the paper's default, and also Table IV's and Table VI's first column), ``alpha_0=+0.1`` and
``alpha_0=-0.1`` (Table IV) and ``gradients`` (Table VI and Fig. 8: ``similarity: gradients``, T = 10). Each run is recorded in ``results/robustness-rotated-mnist.csv`` as it ends (accuracy, clusters,
ARI, separation round, the merges, and alpha_min_cross of every merging round for Fig. 8); runs
already recorded are skipped.

    python -m reproductions run mehta2023/table5-rotated-mnist --seeds 0 1 2
    python -m reproductions run mehta2023/table6-rotated-mnist --seeds 0 1 2
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

import fedray
from reproductions.common import Claim, pending, record_run

log = logging.getLogger("mehta2023.robustness")

PAPER = "mehta2023"
RECORDS = "robustness-rotated-mnist"
MEMORY = {"T=2": 2, "T=5": 5, "T=10": 10, "T=25": 25, "T=inf": None}
ALPHA_0 = {"alpha_0=+0.1": 0.1, "alpha_0=-0.1": -0.1}
#: the variants of each table, in the order they run (T = 10 with weight updates and alpha_0 = 0 is the default)
VARIANTS = {"table4": ("T=10", "alpha_0=+0.1", "alpha_0=-0.1"), "table5": ("T=inf", "T=2", "T=5", "T=10", "T=25"),
            "table6": ("T=10", "gradients"), "figure8": ("T=10", "gradients")}
SIZES = {
    "reduced": {"n_clients": 20, "fraction": 0.3, "samples": [60, 120], "epochs": 5, "rounds": 30, "eval_every": 10},
    "paper": {"n_clients": 100, "fraction": 0.2, "samples": [200, 800], "epochs": 5, "rounds": 100, "eval_every": 10},
    "quick": {"n_clients": 8, "fraction": 0.5, "samples": [20, 30], "epochs": 2, "rounds": 3, "eval_every": 3},
}


def sizes_text(scale: str) -> str:
    s = SIZES[scale]
    return (f"{s['n_clients']} clients, c = {s['fraction']}, {s['samples'][0]}–{s['samples'][1]} samples, "
            f"E = {s['epochs']}, {s['rounds']} rounds")


def flacc_params(variant: str, epochs: int, eval_every: int) -> dict[str, Any]:
    """FLACC's parameters of a variant: the paper's, with the variant's memory or similarity."""
    params: dict[str, Any] = {"lr": 0.1, "batch_size": 32, "epochs": epochs, "eval_every": eval_every,
                              "alpha_0": 0.0, "n_merge": 2, "n_sep": 10, "memory": 10, "similarity": "updates"}
    if variant == "gradients":
        params["similarity"] = "gradients"
    elif variant in ALPHA_0:
        params["alpha_0"] = ALPHA_0[variant]
    else:
        params["memory"] = MEMORY[variant]
    return params


def config(seed: int, size: dict[str, Any], data_dir: str | None, quick: bool) -> dict[str, Any]:
    data = ({"dataset": "sklearn:digits"} if quick else
            {"dataset": "mnist", "data_dir": data_dir, "options": {"part": "train"}})
    data["partition"] = {"name": "rotated", "samples": list(size["samples"])}
    return {"seed": seed, "algorithm": {"name": "flacc"}, "data": data,
            "federation": {"n_clients": size["n_clients"], "fraction": size["fraction"], "rounds": size["rounds"]},
            "runtime": {"backend": "local", "progress": True}}


def metrics_of(res: Any) -> dict[str, Any]:
    """The record of one FLACC run: accuracy (%), clusters, ARI, separation, merges and alpha_min_cross per round."""
    fin, h = res.final, res.history
    merging = h[h["phase"] == "merging"] if "phase" in h else h.iloc[:0]
    amc = [None if not np.isfinite(v) else round(float(v), 6) for v in merging.get("alpha_min_cross", [])]
    steps = np.diff([v for v in amc if v is not None])
    return {"accuracy": 100 * float(fin["accuracy"]), "n_clusters": int(fin["n_clusters"]),
            "ari": float(fin.get("ari", float("nan"))), "separation_round": fin.get("separation_round"),
            "merges": [[m["round"], list(m["first"]), list(m["second"]), round(float(m["similarity"]), 6)]
                       for m in fin.get("merges", [])],
            "alpha_min_cross": amc,
            # Fig. 8's "variability": the spread of alpha_min_cross from one merging round to the next
            "amc_step_std": float(np.std(steps)) if steps.size > 1 else float("nan"),
            **group_similarity(res.model)}


def group_similarity(model: dict[str, Any]) -> dict[str, float]:
    """Mean cosine similarity of two clients' updates (or gradients) over the merging rounds they were sampled
    together in, averaged over the pairs within a true group and across groups (NaN: no such pair seen)."""
    S = np.asarray(model.get("similarity_mean", []), dtype=float)
    g = np.asarray(model.get("true_groups", []))
    if S.ndim != 2 or g.size != S.shape[0]:
        return {}
    seen = np.isfinite(S) & ~np.eye(g.size, dtype=bool)
    same = g[:, None] == g[None, :]
    mean = {k: float(S[seen & m].mean()) if (seen & m).any() else float("nan")
            for k, m in (("sim_within", same), ("sim_across", ~same))}
    return mean


def run(variants: tuple[str, ...], scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    size = SIZES["quick" if quick else scale]
    todo = pending(PAPER, RECORDS, [{"method": "flacc", "variant": v, "seed": s, "scale": scale}
                                    for s in seeds for v in variants])
    for job in todo:
        seed, variant = int(job["seed"]), job["variant"]
        cfg = config(seed, size, data_dir, quick)
        params = flacc_params(variant, size["epochs"], size["eval_every"])
        t0 = time.perf_counter()
        with fedray.Session(cfg) as session:
            res = session.run("flacc", params, output=False)
        wall = time.perf_counter() - t0
        m = metrics_of(res)
        log.info("%s seed %d: accuracy %.2f, %d clusters, ARI %.3f, separation %s (%.0f s)", variant, seed,
                 m["accuracy"], m["n_clusters"], m["ari"], m["separation_round"], wall)
        record_run(PAPER, RECORDS, method="flacc", variant=variant, seed=seed, scale=scale,
                   sizes=sizes_text("quick" if quick else scale), metrics=m,
                   config={**cfg, "algorithm": {"name": "flacc", "params": params}}, wall_s=wall)


def run_claim(claim: Claim, scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    """The lab's runner: the variants of Table V or Table VI (by the claim's id)."""
    run(VARIANTS[claim.id.split("-")[0]], scale, seeds, quick, data_dir)
