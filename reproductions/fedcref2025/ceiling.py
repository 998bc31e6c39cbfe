"""FedCRef: how much can any association add? Reconstruction-error ceilings (evaluation only).

FedCRef's final clusters come from Algorithm 2: each sample goes to the
candidate autoencoder that reconstructs it best. However good the association,
the client's ACC is then bounded by how well reconstruction error separates the
classes. This script measures that bound on a ``class-subsets`` federation by
replacing every learned piece with an oracle that reads the true labels
(evaluation only; nothing here is a method):

* ``own clean``: each client trains one autoencoder per class it holds on its
  clean samples of that class (a perfect local clustering, no federation) and
  assigns every sample to the best of them;
* ``pooled clean``: one autoencoder per class trained on the union of all
  clients' samples of that class (perfect association and perfect labels:
  the best a community model can be); each client assigns with the models of
  its own classes;
* ``pooled, Algorithm 2``: Algorithm 2 over the client's clean models and all
  ten pooled models, as FedCRef's refinement would run it with perfect
  communities (``candidates="all"``);
* ``pooled only, Algorithm 2``: Algorithm 2 over the ten pooled models alone
  (as ``candidates="replace"`` with every cluster in a community).

The gap between ``pooled clean`` and ``own clean`` is what federation could add
to a client that had already repaired its own labels, which is what the
no-federation ablation does from a simulated dirty start.

    python -m reproductions.fedcref2025.ceiling --data-dir ../shared/datasets --clients 10 --classes 2 5 \\
        --samples-per-class 150 --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

import fedray
from fedray import acc_from_table, client_rng, contingency, data_rng
from fedray.algorithms.fedcref_rules import refine_labels
from fedray.algorithms.fedcref_tools import (
    class_subsets_indices,
    cluster_errors,
    n_weights,
    one_thread,
    train_cluster_model,
)

log = logging.getLogger("fedcref_ceiling")


def _acc(pred: np.ndarray, y: np.ndarray, n_classes: int) -> float:
    return acc_from_table(contingency(pred, y, int(pred.max()) + 1, n_classes))


def _train(spec: dict, X: np.ndarray, epochs: int, rng: np.random.Generator) -> np.ndarray:
    return train_cluster_model(spec, X, epochs=epochs, batch_size=32, lr=1e-3, rng=rng)


def ceilings(args: argparse.Namespace, seed: int) -> list[dict]:
    """One row per client: the ACC of each oracle."""
    ds = fedray.load_dataset(args.dataset, args.data_dir)
    n_classes = int(ds.y.max()) + 1
    parts, chosen, repeats = class_subsets_indices(ds.y, args.clients, data_rng(seed, 11), args.classes,
                                                   args.samples_per_class)
    spec = {"n_features": ds.X.shape[1], "hidden": tuple(args.hidden), "output": "sigmoid", "seed": seed}
    pooled = np.zeros((n_classes, n_weights(spec)), dtype=np.float32)
    for c in range(n_classes):
        idx = np.unique(np.concatenate([p[ds.y[p] == c] for p in parts]))
        if idx.size:
            pooled[c] = _train(spec, ds.X[idx].astype(np.float32), args.epochs, client_rng(seed, 10_000 + c, 0))
    rows = []
    for cid, idx in enumerate(parts):
        X, y = ds.X[idx].astype(np.float32), ds.y[idx]
        held = sorted(set(y.tolist()))
        own = np.stack([_train(spec, X[y == c], args.epochs, client_rng(seed, cid, 0, k))
                        for k, c in enumerate(held)])
        E_own = cluster_errors(spec, own, X)
        E_pool = cluster_errors(spec, pooled, X)
        k = len(held)
        rows.append({
            "seed": seed, "client": cid, "classes": k, "samples": len(y), "repeats": repeats,
            "own clean": _acc(np.argmin(E_own, axis=1), y, n_classes),
            "pooled clean": _acc(np.argmin(E_pool[:, held], axis=1), y, n_classes),
            "pooled, Algorithm 2": _acc(refine_labels(np.hstack([E_own, E_pool]), k)[0], y, n_classes),
            "pooled only, Algorithm 2": _acc(refine_labels(E_pool, k)[0], y, n_classes),
        })
    return rows


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--classes", nargs=2, type=int, default=[2, 5])
    ap.add_argument("--samples-per-class", type=int, default=150)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--hidden", type=int, nargs="+", default=[100, 64, 32])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="results/fedcref-ceiling")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with one_thread():
        for seed in args.seeds:
            t0 = time.perf_counter()
            rows.extend(ceilings(args, seed))
            log.info("seed %d done in %.0f s", seed, time.perf_counter() - t0)
            pd.DataFrame(rows).to_csv(out / "clients.csv", index=False)
    df = pd.DataFrame(rows)
    cols = ["own clean", "pooled clean", "pooled, Algorithm 2", "pooled only, Algorithm 2"]
    table = df.groupby("seed")[cols].mean()
    table["pooled clean - own clean"] = table["pooled clean"] - table["own clean"]
    with pd.option_context("display.width", 200):
        print(table.round(3).to_string())
    table.round(4).to_csv(out / "seeds.csv")
    return table


if __name__ == "__main__":
    main()
