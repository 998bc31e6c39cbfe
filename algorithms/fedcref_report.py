"""FedCRef evaluation extras: central baselines and plots (Pisa / IIT-CNR 2025, Section 6, Figs. 7-10).

* :func:`central_baseline` — k-means and a compact DEC on the pooled shards with
  the true number of categories (the paper's centralised comparison); pooling
  the rows is a simulation device only, never part of the federated method.
* :func:`plot_curves` — communities found (against the true number of
  categories), wrong associations, isolated clusters, active clients and mean
  client ACC over iterations, for one or more runs side by side.
* :func:`plot_community_graph` — the final association graph: one node per local
  cluster, grouped and coloured by community, isolated clusters in grey, wrong
  edges (evaluation only) in red.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.metrics import hungarian_accuracy
from fedray.core.ops import assign, kmeans


def central_baseline(session: Any, methods: tuple[str, ...] = ("kmeans", "dec"), seed: int = 0,
                     dec_pretrain_epochs: int = 15, dec_epochs: int = 10) -> dict[str, dict[str, float]]:
    """ACC of central clustering of the pooled shards with the true K.

    Returns
    -------
    dict
        ``{method: {"acc": global ACC, "client_acc_mean": mean over clients of the
        per-client ACC, "k": K}}``.
    """

    parts = session.executor.gather_data(labels=True)
    X = np.vstack([p[1] for p in parts])
    y = np.concatenate([p[2] for p in parts])
    sizes = np.cumsum([0] + [len(p[1]) for p in parts])
    k = int(np.unique(y).size)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 77]))
    out: dict[str, dict[str, float]] = {}
    for m in methods:
        if m == "kmeans":
            labels = assign(X, kmeans(X, k, rng, n_init=3))[0]
        elif m == "dec":
            from fedray.nn.autoencoder import dec_cluster

            labels = dec_cluster(X, k, rng, pretrain_epochs=dec_pretrain_epochs, dec_epochs=dec_epochs, seed=seed,
                                 output="sigmoid" if X.min() >= 0 and X.max() <= 1 else "linear")
        else:
            raise ValueError(f"unknown central method {m!r}")
        per_client = [hungarian_accuracy(labels[a:b], y[a:b]) for a, b in zip(sizes[:-1], sizes[1:])]
        out[m] = {"acc": hungarian_accuracy(labels, y), "client_acc_mean": float(np.mean(per_client)), "k": k}
    return out


def _plt():
    import matplotlib.pyplot as plt

    return plt


PANELS = (("communities", "communities found"), ("wrong_associations", "wrong associations (%)"),
          ("isolated_clusters", "isolated clusters"), ("active_clients", "active clients"),
          ("acc_mean", "mean client ACC"))


def plot_curves(runs: dict[str, dict[str, Any]], path: str | Path | None, true_k: int | None = None,
                title: str = "FedCRef over iterations") -> Any:
    """Curves over iterations of several runs.

    Parameters
    ----------
    runs : dict
        ``{name: result.final}`` (each with ``history`` and ``acc_end``).
    path : output PNG, or None to return the figure (notebooks)
    true_k : draws the true number of categories on the communities panel
    """
    plt = _plt()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(3.3 * len(PANELS), 3.0))
    for name, fin in runs.items():
        hist = fin["history"]
        it = np.arange(len(hist))
        for ax, (key, _label) in zip(axes, PANELS):
            vals = np.array([h.get(key, np.nan) for h in hist], dtype=float)
            x = it
            if key == "acc_mean":   # the ACC after the last refinement closes the curve
                vals, x = np.append(vals, fin["acc_end"]), np.arange(len(hist) + 1)
            ax.plot(x, vals, marker="o", ms=3, label=name)
    for ax, (key, label) in zip(axes, PANELS):
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        if key == "communities" and true_k:
            ax.axhline(true_k, color="k", ls="--", lw=0.8)
    axes[-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _finish(plt, fig, path)


def _finish(plt: Any, fig: Any, path: str | Path | None) -> Any:
    if path is None:
        return fig
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_community_graph(model: dict[str, Any], path: str | Path | None, title: str = "final association graph") -> Any:
    """Nodes = local clusters (grouped by community), edges = associations of the last exchange."""
    import networkx as nx

    plt = _plt()
    owner = np.asarray(model["node_owner"])
    node_class = np.asarray(model.get("node_class", np.full(len(owner), -1)))
    g = nx.Graph()
    g.add_nodes_from(range(len(owner)))
    edges = [tuple(map(int, e)) for e in np.asarray(model["edges"]).reshape(-1, 2)]
    g.add_edges_from(edges)
    member = np.full(len(owner), -1)
    for c, nodes in enumerate(model["communities"]):
        member[nodes] = c
    pos = nx.spring_layout(g, seed=0, k=1.5 / max(1, np.sqrt(len(owner))))
    cmap = plt.get_cmap("tab20")
    colors = [cmap(member[i] % 20) if member[i] >= 0 else (0.8, 0.8, 0.8, 1.0) for i in range(len(owner))]
    wrong = [e for e in edges if node_class[e[0]] != node_class[e[1]]]
    fig, ax = plt.subplots(figsize=(6.5, 6))
    nx.draw_networkx_edges(g, pos, edgelist=[e for e in edges if e not in wrong], ax=ax, alpha=0.4)
    nx.draw_networkx_edges(g, pos, edgelist=wrong, ax=ax, edge_color="tab:red", width=1.5)
    nx.draw_networkx_nodes(g, pos, node_color=colors, node_size=90, ax=ax, edgecolors="k", linewidths=0.3)
    if (node_class >= 0).any():
        nx.draw_networkx_labels(g, pos, {i: str(node_class[i]) for i in range(len(owner))}, font_size=6, ax=ax)
    isolated = int((np.bincount(np.ravel(edges), minlength=len(owner)) == 0).sum()) if edges else len(owner)
    ax.set_title(
        f"{title}\n{len(model['communities'])} communities, {isolated} isolated clusters, "
        f"{len(wrong)} wrong edges (node text: majority class, evaluation only)",
        fontsize=9,
    )
    ax.axis("off")
    fig.tight_layout()
    return _finish(plt, fig, path)
