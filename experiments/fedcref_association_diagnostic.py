"""FedCRef: why does the association test reject true same-class pairs? (evaluation-only diagnostic)

Builds a ``class-subsets`` federation, gives every client its initial ``dirty``
clustering, trains one autoencoder per local cluster exactly as phase 1 does,
and computes the association statistic of every (cluster, foreign model) pair
under several normalisations. Each pair is then labelled with the clusters'
majority true classes (evaluation only: the labels never enter a decision) and
the script reports

* the distributions (quantiles) of the statistic over true (same majority class)
  and false pairs, for each normalisation;
* the association graph the test would give at the first exchange for a grid
  of (P, tau) and, with ``--ratios``, FedCRef's ``ratio`` option: edges, wrong
  associations, communities, classes covered, isolated clusters.

Writes ``distributions.csv``, ``grid.csv`` and ``nodes_seed*_epochs*.csv`` (each
cluster's client and majority class) to ``--out``.

It runs in one process without Ray (the functions are the ones the client
actors call), so it takes seconds to minutes:

    python experiments/fedcref_association_diagnostic.py --data-dir ../shared/datasets \\
        --clients 15 --classes 3 5 --samples-per-class 250 --dirtiness 0.4 --out results/fedcref-diag
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedray.algorithms.fedcref_client import initial_labels
from fedray.algorithms.fedcref_rules import (
    NORMALISATIONS,
    association_quality,
    association_statistic,
    communities,
    link_clusters,
)
from fedray.core.seeding import client_rng, data_rng
from fedray.data.datasets import load_dataset
from fedray.data.fedcref_federations import class_subsets_indices
from fedray.nn.autoencoder import ae_for, errors_matrix, initial_ae_weights, train_autoencoder
from fedray.nn.train import get_flat, set_flat, torch_threads

log = logging.getLogger("fedcref_diagnostic")


def build(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Clients' data, initial labels, trained cluster models and the (n, M) error matrix of each client."""
    ds = load_dataset(args.dataset, args.data_dir)
    parts, chosen, repeats = class_subsets_indices(ds.y, args.clients, data_rng(seed, 11), args.classes,
                                                   args.samples_per_class)
    spec = {"n_features": ds.X.shape[1], "hidden": tuple(args.hidden), "output": "sigmoid", "seed": seed}
    model = ae_for(spec, device="cpu")
    clients, weights, owner, node_class = [], [], [], []
    for cid, idx in enumerate(parts):
        X, y = ds.X[idx].astype(np.float32), ds.y[idx]
        rng = client_rng(seed, cid, -1)
        lab = initial_labels({"init": "dirty", "dirtiness": args.dirtiness, "local_k": "true"}, X, y, rng)
        for p in range(int(lab.max()) + 1):
            set_flat(model, initial_ae_weights(spec))
            train_autoencoder(model, X[lab == p], epochs=args.epochs, batch_size=args.batch_size, lr=1e-3,
                              rng=client_rng(seed, cid, 0, p))
            weights.append(get_flat(model))
            owner.append(cid)
            classes, counts = np.unique(y[lab == p], return_counts=True)
            node_class.append(int(classes[np.argmax(counts)]))
        clients.append((X, y, lab))
    W = np.stack(weights)
    owner_a = np.asarray(owner)
    E = [errors_matrix(model, W, X) for X, _, _ in clients]
    return {"clients": clients, "W": W, "owner": owner_a, "node_class": np.asarray(node_class), "E": E,
            "repeats": repeats, "chosen": chosen}


def statistics(b: dict[str, Any], percentile: float, normalisation: str) -> np.ndarray:
    """S (M, M) as the exchange computes it, under ``normalisation``."""
    owner = b["owner"]
    M = len(owner)
    S = np.full((M, M), np.nan)
    for cid, ((_, _, lab), E) in enumerate(zip(b["clients"], b["E"])):
        own = np.flatnonzero(owner == cid)
        for p, i in enumerate(own):
            rows = lab == p
            for j in np.flatnonzero(owner != cid):
                S[i, j] = association_statistic(E[rows, i], E[rows, j], percentile, normalisation,
)
    return S


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--clients", type=int, default=15)
    ap.add_argument("--classes", nargs=2, type=int, default=[3, 5])
    ap.add_argument("--samples-per-class", type=int, default=250)
    ap.add_argument("--dirtiness", type=float, default=0.4)
    ap.add_argument("--epochs", type=int, nargs="+", default=[20])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hidden", type=int, nargs="+", default=[100, 64, 32])
    ap.add_argument("--normalisations", nargs="+", default=list(NORMALISATIONS), choices=list(NORMALISATIONS))
    ap.add_argument("--percentiles", type=float, nargs="+", default=[50, 75, 85, 95])
    ap.add_argument("--taus", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.4, 0.5])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.0],
                    help="FedCRef's ratio option (0: the tau test alone; e.g. 0 0.5)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="results/fedcref-diag")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dist_rows, grid_rows = [], []
    with torch_threads(1):
        for seed in args.seeds:
            for epochs in args.epochs:
                a = argparse.Namespace(**{**vars(args), "epochs": epochs})
                t0 = time.perf_counter()
                b = build(a, seed)
                log.info("seed %d, %d epochs: %d clusters built in %.0f s", seed, epochs, len(b["owner"]),
                         time.perf_counter() - t0)
                pd.DataFrame({"seed": seed, "epochs": epochs, "owner": b["owner"], "majority_class": b["node_class"]}
                             ).to_csv(out / f"nodes_seed{seed}_epochs{epochs}.csv", index=False)
                same = b["node_class"][:, None] == b["node_class"][None, :]
                other = b["owner"][:, None] != b["owner"][None, :]
                for norm in args.normalisations:
                    for P in args.percentiles:
                        S = statistics(b, P, norm)
                        both = np.fmax(S, S.T)           # the pair passes when both directions pass
                        for kind, mask in (("true", same & other), ("false", ~same & other)):
                            v = both[mask]
                            dist_rows.append({"seed": seed, "epochs": epochs, "normalisation": norm, "P": P,
                                              "pairs": kind, "n": int(v.size),
                                              **{f"q{q}": float(np.quantile(v, q / 100)) for q in (5, 25, 50, 75, 95)}})
                        for tau, ratio in ((t, r) for t in args.taus for r in args.ratios):
                            edges = link_clusters(S, b["owner"], tau, "best", ratio)
                            groups, _ = communities(len(b["owner"]), edges)
                            q = association_quality(edges, groups, b["node_class"], len(b["owner"]))
                            tp = float(np.mean(both[same & other] <= tau))
                            fp = float(np.mean(both[~same & other] <= tau))
                            grid_rows.append({"seed": seed, "epochs": epochs, "normalisation": norm, "P": P,
                                              "tau": tau, "ratio": ratio, "true_pass": tp, "false_pass": fp, **q,
                                              "clusters": len(b["owner"])})
                pd.DataFrame(dist_rows).to_csv(out / "distributions.csv", index=False)
                pd.DataFrame(grid_rows).to_csv(out / "grid.csv", index=False)
    dist, grid = pd.DataFrame(dist_rows), pd.DataFrame(grid_rows)
    (out / "settings.json").write_text(json.dumps({k: v for k, v in vars(args).items()}, indent=1))
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(dist.round(3).to_string(index=False))
        print(grid.round(3).to_string(index=False))
    return grid


if __name__ == "__main__":
    main()
