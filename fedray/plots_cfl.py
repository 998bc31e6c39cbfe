"""Plots of clustered federated learning (Mehta & Shao 2023, Figures 4-6).

* :func:`accuracy_over_rounds` — mean client test accuracy per round, one line a
  method, one panel a federation (Fig. 4 top);
* :func:`client_clusters` — the client clusters a method found: one box per found
  cluster, one circle per client, coloured by its true group and sized by its
  number of samples (Fig. 4 bottom).

matplotlib only, saved as PNG; no torch.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedray.plots import _plt


def _is_panels(curves: Mapping[str, Any]) -> bool:
    return bool(curves) and all(isinstance(v, Mapping) for v in curves.values())


def accuracy_over_rounds(curves: Mapping[str, Any], path: str | Path, title: str = "",
                         metric: str = "accuracy") -> Path:
    """Accuracy over rounds for several methods.

    Parameters
    ----------
    curves : mapping
        ``{method: history}`` for one panel, or ``{panel: {method: history}}`` for
        panels side by side. A history is a DataFrame with ``round`` and ``metric``
        columns (``Result.history``), or a sequence of ``(round, value)`` pairs,
        or a 2-D array of runs (n_runs, n_rounds) plotted as mean +- std.
    path : str or Path
    metric : str
        Column to draw (``accuracy`` by default).
    """
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    panels = curves if _is_panels(curves) else {"": curves}
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 3.6), squeeze=False, sharey=True)
    for ax, (pname, methods) in zip(axes[0], panels.items()):
        for method, hist in methods.items():
            x, y, s = _xy(hist, metric)
            if x.size == 0:
                continue
            (line,) = ax.plot(x, y, label=method, lw=1.6)
            if s is not None:
                ax.fill_between(x, y - s, y + s, color=line.get_color(), alpha=0.2, lw=0)
        ax.set_title(pname)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(metric.replace("_", " "))
    axes[0][-1].legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _xy(hist: Any, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    if isinstance(hist, pd.DataFrame):
        h = hist[hist[metric].notna()] if metric in hist.columns else hist.iloc[0:0]
        return h["round"].to_numpy(float), h[metric].to_numpy(float) if len(h) else np.zeros(0), None
    arr = np.asarray(hist, dtype=float)
    if arr.ndim == 2 and arr.shape[1] == 2 and not np.isnan(arr).any():
        return arr[:, 0], arr[:, 1], None
    if arr.ndim == 2:
        x = np.arange(arr.shape[1], dtype=float)
        keep = ~np.all(np.isnan(arr), axis=0)
        return x[keep], np.nanmean(arr, axis=0)[keep], np.nanstd(arr, axis=0)[keep]
    x = np.arange(arr.shape[0], dtype=float)
    keep = ~np.isnan(arr)
    return x[keep], arr[keep], None


def client_clusters(assignment: Sequence[int], true_groups: Sequence[int] | None, sizes: Sequence[float] | None,
                    path: str | Path, title: str = "client clusters found",
                    group_names: Sequence[str] | None = None) -> Path:
    """One box per found cluster; circles = clients, colour = true group, area ~ samples.

    Parameters
    ----------
    assignment : sequence of int, shape (n_clients,)
        Found cluster of each client (-1: unknown, drawn in its own box "?").
    true_groups : sequence of int or None, shape (n_clients,)
    sizes : sequence of float or None, shape (n_clients,)
        Samples per client (circle area is proportional).
    group_names : names of the true groups, for the legend.
    """
    plt = _plt()
    from matplotlib.patches import Circle, FancyBboxPatch

    a = np.asarray(assignment, dtype=np.int64)
    n = a.shape[0]
    g = np.zeros(n, dtype=np.int64) if true_groups is None else np.asarray(true_groups, dtype=np.int64)
    s = np.ones(n) if sizes is None else np.asarray(sizes, dtype=np.float64)
    r = 0.42 * np.sqrt(s / max(s.max(), 1e-12))  # radius in cell units, area ~ samples
    clusters = sorted(np.unique(a).tolist(), key=lambda c: (c < 0, -int((a == c).sum()), c))
    cmap = plt.get_cmap("tab10" if g.max(initial=0) < 10 else "tab20")
    x0 = 0.0
    fig_w = 0.0
    boxes = []
    for c in clusters:
        members = np.flatnonzero(a == c)
        members = members[np.lexsort((-s[members], g[members]))]
        cols = max(1, math.ceil(math.sqrt(len(members))))
        rows = math.ceil(len(members) / cols)
        boxes.append((c, members, cols, rows, x0))
        x0 += cols + 0.8
        fig_w = x0
    height = max((b[3] for b in boxes), default=1)
    fig, ax = plt.subplots(figsize=(min(2.0 + 0.55 * fig_w, 18), 1.6 + 0.55 * height))
    for c, members, cols, rows, bx in boxes:
        ax.add_patch(FancyBboxPatch((bx - 0.05, -0.05), cols + 0.1, rows + 0.1, boxstyle="round,pad=0.05",
                                    fc="none", ec="0.5", lw=1.0))
        for j, cid in enumerate(members):
            cx, cy = bx + j % cols + 0.5, rows - (j // cols) - 0.5
            ax.add_patch(Circle((cx, cy), r[cid], color=cmap(int(g[cid]) % cmap.N), ec="k", lw=0.3))
        ax.text(bx + cols / 2, rows + 0.35, "?" if c < 0 else f"cluster {c}", ha="center", va="bottom", fontsize=8)
    ax.set_xlim(-0.4, max(fig_w - 0.4, 1))
    ax.set_ylim(-0.4, height + 0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    if true_groups is not None:
        from matplotlib.lines import Line2D

        handles = [Line2D([0], [0], marker="o", ls="", color=cmap(int(k) % cmap.N),
                          label=(group_names[k] if group_names is not None and k < len(group_names) else f"group {k}"))
                   for k in np.unique(g)]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=min(6, len(handles)),
                  fontsize=7, frameon=False)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
