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

    python -m reproductions.fedcref2025.association_diagnostic --data-dir ../shared/datasets \\
        --clients 15 --classes 3 5 --samples-per-class 250 --dirtiness 0.4 --out results/fedcref-diag
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import fedray
from fedray.algorithms.fedcref_rules import (
    LINK_MODES,
    NORMALISATIONS,
    align_labels,
    association_quality,
    association_statistic,
    communities,
    link_clusters,
    refine_labels,
)
from fedray.algorithms.fedcref_tools import (
    class_subsets_indices,
    cluster_errors,
    compact_labels,
    initial_labels,
    one_thread,
    train_cluster_model,
)

log = logging.getLogger("fedcref_diagnostic")


def build(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Clients' data, initial labels, trained cluster models and the (n, M) error matrix of each client."""
    ds = fedray.load_dataset(args.dataset, args.data_dir, **json.loads(args.data_options))
    parts, chosen, repeats = class_subsets_indices(ds.y, args.clients, fedray.data_rng(seed, 11), args.classes,
                                                   args.samples_per_class)
    spec = {"n_features": ds.X.shape[1], "hidden": tuple(args.hidden), "output": "sigmoid", "seed": seed}
    clients, weights, owner, node_class, share = [], [], [], [], []
    for cid, idx in enumerate(parts):
        X, y = ds.X[idx].astype(np.float32), ds.y[idx]
        rng = fedray.client_rng(seed, cid, -1)
        lab = initial_labels({"init": "dirty", "dirtiness": args.dirtiness, "local_k": "true"}, X, y, rng)
        Wc = _train(spec, X, lab, args, [seed, cid, 0])
        for r in range(args.local_refinements):   # Algorithm 2 with the client's own models, then retrain
            raw, _ = refine_labels(cluster_errors(spec, Wc, X), int(lab.max()) + 1)
            lab = compact_labels(align_labels(raw, lab))
            Wc = _train(spec, X, lab, args, [seed, cid, r + 1])
        for p in range(int(lab.max()) + 1):
            weights.append(Wc[p])
            owner.append(cid)
            classes, counts = np.unique(y[lab == p], return_counts=True)
            node_class.append(int(classes[np.argmax(counts)]))
            share.append(float(counts.max() / counts.sum()))
        clients.append((X, y, lab))
    W = np.stack(weights)
    owner_a = np.asarray(owner)
    E = [cluster_errors(spec, W, X) for X, _, _ in clients]
    return {"clients": clients, "W": W, "owner": owner_a, "node_class": np.asarray(node_class), "E": E,
            "share": np.asarray(share),
            "repeats": repeats, "chosen": chosen}


#: Arguments that change a build (data, start, Phase 1 training); every other argument only changes
#: how a build is evaluated. A new argument that changes the build must be added here.
BUILD_KEYS = ("dataset", "data_options", "clients", "classes", "samples_per_class", "dirtiness", "epochs",
              "batch_size", "hidden", "local_refinements")
#: Arguments that do not change a build: where the data and the results are, which seeds, and the
#: rules evaluated on a build.
EVAL_KEYS = ("data_dir", "out", "seeds", "normalisations", "percentiles", "taus", "ratios", "links", "selfs",
             "stricts", "equal")
#: Bumped when the build's code changes what a build holds.
BUILD_FORMAT = 2


def build_key(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The canonical dict of everything that changes a build: :data:`BUILD_KEYS`, the seed and the format."""
    a = vars(args)
    key = {k: a[k] for k in BUILD_KEYS}
    key["data_options"] = json.loads(a["data_options"]) if isinstance(a["data_options"], str) else a["data_options"]
    key["classes"], key["hidden"] = [int(v) for v in key["classes"]], [int(v) for v in key["hidden"]]
    key["dirtiness"] = float(key["dirtiness"])
    key.update(seed=int(seed), format=BUILD_FORMAT)
    return key


def build_file(args: argparse.Namespace, seed: int, out: Path) -> Path:
    """The cache file of a build: its name holds a hash of :func:`build_key`'s canonical JSON."""
    text = json.dumps(build_key(args, seed), sort_keys=True, separators=(",", ":"))
    return out / f"build_{hashlib.sha256(text.encode()).hexdigest()[:16]}.npz"


def cached_build(args: argparse.Namespace, seed: int, out: Path) -> dict[str, Any]:
    """:func:`build`, or its arrays read back from ``out`` (the training is the costly part).

    The file is keyed on :func:`build_key` (a hash in its name, the dict itself inside), so
    builds of other data sets, federations or training settings never share a file."""
    f = build_file(args, seed, out)
    if f.exists():
        z = np.load(f)
        n = int(z["n_clients"])
        return {"clients": [(None, None, z[f"lab{c}"]) for c in range(n)], "E": [z[f"E{c}"] for c in range(n)],
                "owner": z["owner"], "node_class": z["node_class"], "share": z["share"],
                "repeats": int(z["repeats"]), "key": json.loads(str(z["key"])), "wall_s": float(z["wall_s"]),
                "load": z["load"].tolist()}
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    b = build(args, seed)
    b.update(wall_s=time.perf_counter() - t0, load=[load0, os.getloadavg()[0]])
    arrays = {f"lab{c}": lab for c, (_, _, lab) in enumerate(b["clients"])}
    arrays.update({f"E{c}": E for c, E in enumerate(b["E"])})
    b["key"] = build_key(args, seed)
    tmp = f.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, n_clients=len(b["clients"]), owner=b["owner"], node_class=b["node_class"],
                        share=b["share"], repeats=int(b["repeats"]), key=json.dumps(b["key"], sort_keys=True),
                        wall_s=b["wall_s"], load=np.asarray(b["load"]), **arrays)
    tmp.replace(f)    # whole or absent: an interrupted build leaves no half file under the key
    return b


def _train(spec: dict, X: np.ndarray, lab: np.ndarray, args: argparse.Namespace, key: list[int]) -> np.ndarray:
    """One autoencoder per local cluster, from fresh weights, as phase 1 trains them: (K, P)."""
    return np.stack([train_cluster_model(spec, X[lab == p], epochs=args.epochs, batch_size=args.batch_size,
                                         rng=fedray.client_rng(*key, p)) for p in range(int(lab.max()) + 1)])


def statistics(b: dict[str, Any], percentile: float, normalisation: str, siblings: bool = False,
               equal: float = 0.0) -> np.ndarray:
    """S (M, M) as the exchange computes it, under ``normalisation``; with ``siblings``, also
    each cluster against the client's own other cluster models (the rest stays NaN)."""
    owner = b["owner"]
    M = len(owner)
    S = np.full((M, M), np.nan)
    for cid, ((_, _, lab), E) in enumerate(zip(b["clients"], b["E"])):
        own = np.flatnonzero(owner == cid)
        for p, i in enumerate(own):
            rows = lab == p
            cols = np.flatnonzero(owner != cid) if not siblings else own[own != i]
            for j in cols:
                S[i, j] = association_statistic(E[rows, i], E[rows, j], percentile, normalisation, equal)
    return S


def self_filter(edges: list[tuple[int, int]], S: np.ndarray, sib: np.ndarray, alpha: float) -> list[tuple[int, int]]:
    """Keep the edges whose score is at most ``alpha`` times the smaller sibling score of its two ends.

    ``sib[i]`` = min over the owner's other clusters j' of S[i, j']: how close the
    owner's best other model comes to cluster i's own model (0 alpha: no filter).
    """
    if alpha <= 0:
        return edges
    return [(i, j) for i, j in edges if max(S[i, j], S[j, i]) <= alpha * min(sib[i], sib[j])]


def parser() -> argparse.ArgumentParser:
    """The command line (each argument either changes a build, :data:`BUILD_KEYS`, or is in :data:`EVAL_KEYS`)."""
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
    ap.add_argument("--local-refinements", type=int, default=0,
                    help="refinements (Algorithm 2) with the client's own models, each followed by retraining, "
                    "before the exchange")
    ap.add_argument("--links", nargs="+", default=["best"], choices=list(LINK_MODES))
    ap.add_argument("--stricts", type=int, nargs="+", default=[0], choices=[0, 1],
                    help="1: the test is statistic < tau (the authors' code), 0: <= tau (the paper's text)")
    ap.add_argument("--equal", choices=["pass", "fail"], default="pass",
                    help="a cluster whose differences are all equal: statistic 0 (pass) or NaN, no link (fail)")
    ap.add_argument("--selfs", type=float, nargs="+", default=[0.0],
                    help="sibling filter: keep an edge when its score is at most this share of the score of "
                    "either end's best sibling model (0: off)")
    ap.add_argument("--data-options", default="{}", help="JSON of the data set's options, e.g. '{\"part\": \"train\"}'")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="results/fedcref-diag")
    return ap


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dist_rows, grid_rows = [], []
    with one_thread():
        for seed in args.seeds:
            for epochs in args.epochs:
                a = argparse.Namespace(**{**vars(args), "epochs": epochs})
                t0 = time.perf_counter()
                b = cached_build(a, seed, out)
                log.info("seed %d, %d epochs: %d clusters built in %.0f s", seed, epochs, len(b["owner"]),
                         time.perf_counter() - t0)
                pd.DataFrame({"seed": seed, "epochs": epochs, "owner": b["owner"], "majority_class": b["node_class"]}
                             ).to_csv(out / f"nodes_seed{seed}_epochs{epochs}.csv", index=False)
                same = b["node_class"][:, None] == b["node_class"][None, :]
                other = b["owner"][:, None] != b["owner"][None, :]
                for norm in args.normalisations:
                    for P in args.percentiles:
                        S = statistics(b, P, norm, equal=0.0 if args.equal == "pass" else np.nan)
                        both = np.fmax(S, S.T)           # the pair passes when both directions pass
                        for kind, mask in (("true", same & other), ("false", ~same & other)):
                            v = both[mask]
                            dist_rows.append({"seed": seed, "epochs": epochs, "normalisation": norm, "P": P,
                                              "pairs": kind, "n": int(v.size),
                                              **{f"q{q}": float(np.quantile(v, q / 100)) for q in (5, 25, 50, 75, 95)}})
                        sib = np.nanmin(statistics(b, P, norm, siblings=True), axis=1)
                        for tau, ratio, link, alpha, strict in ((t, r, lk, al, st) for t in args.taus
                                                                for r in args.ratios for lk in args.links
                                                                for al in args.selfs for st in args.stricts):
                            edges = self_filter(link_clusters(S, b["owner"], tau, link, ratio, bool(strict)),
                                                S, sib, alpha)
                            groups, _ = communities(len(b["owner"]), edges)
                            q = association_quality(edges, groups, b["node_class"], len(b["owner"]))
                            tp = float(np.mean(both[same & other] <= tau))
                            fp = float(np.mean(both[~same & other] <= tau))
                            grid_rows.append({"seed": seed, "epochs": epochs, "normalisation": norm, "P": P,
                                              "tau": tau, "ratio": ratio, "link": link, "self": alpha,
                                              "strict": strict, "equal": args.equal,
                                              "true_pass": tp, "false_pass": fp, **q, "clusters": len(b["owner"])})
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
