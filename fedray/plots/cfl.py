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
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedray.plots.style import (
    grid_size,
    integer_rounds,
    legend_columns,
    new_figure,
    panel_grid,
    save_figure,
    styled,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def _is_panels(curves: Mapping[str, Any]) -> bool:
    return bool(curves) and all(isinstance(v, Mapping) for v in curves.values())


@styled
def accuracy_over_rounds_figure(curves: Mapping[str, Any], title: str = "", metric: str = "accuracy") -> Figure:
    """Accuracy over rounds for several methods, one panel a federation (grid of at most three columns).

    Parameters
    ----------
    curves : mapping
        ``{method: history}`` for one panel, or ``{panel: {method: history}}`` for
        several panels. A history is a DataFrame with ``round`` and ``metric``
        columns (``Result.history``), or a sequence of ``(round, value)`` pairs,
        or a 2-D array of runs (n_runs, n_rounds) plotted as mean +- std.
    title : str
        Figure title.
    metric : str
        Column to draw (``accuracy`` by default; accuracies, fractions in [0, 1],
        are drawn in %).

    Returns
    -------
    Figure
        Every panel on the same y range, each with its own labelled axes.
    """
    panels = curves if _is_panels(curves) else {"": curves}
    fig = new_figure(grid_size(len(panels), panel=(4.4, 3.4)))
    axes = panel_grid(fig, len(panels))
    percent = metric in ("accuracy", "acc")
    ylabel = "mean client accuracy (%)" if percent else metric.replace("_", " ")
    for ax, (pname, methods) in zip(axes, panels.items()):
        for method, hist in methods.items():
            x, y, s = _xy(hist, metric)
            if x.size == 0:
                continue
            f = 100.0 if percent else 1.0
            (line,) = ax.plot(x, y * f, label=method)
            if s is not None:
                ax.fill_between(x, (y - s) * f, (y + s) * f, color=line.get_color(), alpha=0.2, lw=0)
        ax.set_title(pname)
        integer_rounds(ax)
        ax.set_ylabel(ylabel)
    lims = [ax.get_ylim() for ax in axes if ax.has_data()]
    if lims:
        for ax in axes:
            ax.set_ylim(min(lo for lo, _ in lims), max(hi for _, hi in lims))
    if any(ax.get_legend_handles_labels()[0] for ax in axes):
        axes[-1].legend(loc="best")
    if title:
        fig.suptitle(title)
    return fig


def accuracy_over_rounds(curves: Mapping[str, Any], path: str | Path, title: str = "",
                         metric: str = "accuracy") -> Path:
    """Save :func:`accuracy_over_rounds_figure` as PNG; returns the path."""
    return save_figure(accuracy_over_rounds_figure(curves, title=title, metric=metric), path)


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


#: Font size (points) of the cluster labels in :func:`client_clusters`.
LABEL_PT = 8.0


def _box_layout(boxes: list[tuple[float, int]], gap: float, band: float, aspect: float,
                cell_in: float) -> tuple[list[tuple[float, float]], float, float]:
    """Shelf-pack boxes (width, rows) in cell units, rows of boxes left to right, largest first.

    The shelf width is chosen so that the packed area's width / height is closest to
    ``aspect``. Returns each box's lower-left corner, the total width and height.
    """
    def pack(W: float) -> tuple[list[tuple[float, float]], float, float]:
        shelves: list[list[int]] = [[]]
        x = 0.0
        for i, (w, _) in enumerate(boxes):
            if shelves[-1] and x + w > W + 1e-9:
                shelves.append([])
                x = 0.0
            shelves[-1].append(i)
            x += w + gap
        corners: list[tuple[float, float]] = [(0.0, 0.0)] * len(boxes)
        y, width = 0.0, 0.0
        for shelf in shelves:  # top to bottom: y counts downwards, flipped below
            h = max(boxes[i][1] for i in shelf) + band
            x = 0.0
            for i in shelf:
                corners[i] = (x, y + h)
                x += boxes[i][0] + gap
            width = max(width, x - gap)
            y += h + gap
        height = y - gap
        return [(cx, height - cy) for cx, cy in corners], width, height

    widths = [w for w, _ in boxes]
    best: tuple[float, tuple[list[tuple[float, float]], float, float]] | None = None
    W = max(widths)
    total = sum(widths) + gap * (len(widths) - 1)
    while True:
        packed = pack(W)
        # aspect of the figure, counting the margins around the boxes (inches)
        score = abs(math.log((packed[1] * cell_in + 0.6) / (packed[2] * cell_in + 1.4) / aspect))
        if best is None or score < best[0] - 1e-9:
            best = (score, packed)
        if W >= total:
            break
        W = min(total, W + 0.5)
    return best[1]


def _cluster_boxes(a: np.ndarray, g: np.ndarray, s: np.ndarray) -> tuple[list[str], list[tuple], float]:
    """The label and ``(members, cols, rows, width)`` of each found cluster's box, and the cell size in inches.

    Boxes come largest first, "no cluster" (-1) last; members are sorted by true group, then
    by falling size, and laid out in a near-square grid of ``cols`` x ``rows`` cells; a box is
    widened (``width`` in cells) to fit its label.
    """
    n = a.shape[0]
    clusters = sorted(np.unique(a).tolist(), key=lambda c: (c < 0, -int((a == c).sum()), c))
    labels = ["no cluster" if c < 0 else f"cluster {c}" for c in clusters]
    cell_in = float(np.clip(3.6 / math.sqrt(max(n, 1)), 0.22, 0.45))  # inches per client cell
    shapes = []
    for c, label in zip(clusters, labels):
        members = np.flatnonzero(a == c)
        members = members[np.lexsort((-s[members], g[members]))]
        cols = max(1, math.ceil(math.sqrt(len(members))))
        rows = math.ceil(len(members) / cols)
        label_w = (len(label) * 0.6 * LABEL_PT / 72 + 0.1) / cell_in
        shapes.append((members, cols, rows, max(float(cols), label_w)))
    return labels, shapes, cell_in


def _draw_boxes(ax: Any, shapes: list[tuple], corners: list[tuple[float, float]], labels: list[str],
                r: np.ndarray, colour: Any) -> None:
    """Draw each cluster's box, its label and a circle of radius ``r[client]`` per member client."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Circle, FancyBboxPatch

    circles, colours = [], []
    for (members, cols, rows, w), (bx, by), label in zip(shapes, corners, labels):
        x0 = bx + (w - cols) / 2  # members centred in a box widened for its label
        ax.add_patch(FancyBboxPatch((bx - 0.05, by - 0.05), w + 0.1, rows + 0.1, boxstyle="round,pad=0.05",
                                    fc="none", ec="0.45", lw=1.0))
        for j, cid in enumerate(members):
            circles.append(Circle((x0 + j % cols + 0.5, by + rows - (j // cols) - 0.5), r[cid]))
            colours.append(colour(cid))
        ax.text(bx + w / 2, by + rows + 0.2, label, ha="center", va="bottom", fontsize=LABEL_PT)
    ax.add_collection(PatchCollection(circles, facecolors=colours, edgecolors="k", linewidths=0.3))


@styled
def client_clusters_figure(assignment: Sequence[int], true_groups: Sequence[int] | None,
                           sizes: Sequence[float] | None, title: str = "client clusters found",
                           group_names: Sequence[str] | None = None) -> Figure:
    """One box per found cluster; circles = clients, colour = true group, area ~ samples.

    The boxes are packed in rows so that the figure keeps a width / height near 1.5
    for any number of clients and clusters (4 to a few hundred), and the cell of a
    client shrinks with their number (between 0.22 and 0.45 inch); every text stays
    at 7 points or more.

    Parameters
    ----------
    assignment : sequence of int, shape (n_clients,)
        Found cluster of each client (-1: unknown, drawn last in a box "no cluster").
    true_groups : sequence of int or None, shape (n_clients,)
        True group of each client (colours and legend); None: one colour.
    sizes : sequence of float or None, shape (n_clients,)
        Samples per client (circle area is proportional); None: equal circles.
    title : str
        Figure title.
    group_names : sequence of str or None
        Names of the true groups for the legend (default ``group k``).

    Returns
    -------
    Figure
    """
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    a = np.asarray(assignment, dtype=np.int64)
    n = a.shape[0]
    g = np.zeros(n, dtype=np.int64) if true_groups is None else np.asarray(true_groups, dtype=np.int64)
    s = np.ones(n) if sizes is None else np.asarray(sizes, dtype=np.float64)
    r = np.maximum(0.42 * np.sqrt(np.clip(s, 0, None) / max(float(s.max(initial=0.0)), 1e-12)), 0.08)  # area ~ samples
    cmap = colormaps["tab10" if g.max(initial=0) < 10 else "tab20"]
    labels, shapes, cell_in = _cluster_boxes(a, g, s)
    gap, band = 0.6, max(0.8, 0.24 / cell_in)  # between boxes; above a box for its label (cells)
    corners, width, height = _box_layout([(w, rows) for _, _, rows, w in shapes], gap, band, 1.5, cell_in)

    groups = np.unique(g)
    names = [group_names[k] if group_names is not None and k < len(group_names) else f"group {k}" for k in groups]
    fig_w = max(5.6, width * cell_in + 0.6)
    ncol = legend_columns(names, fig_w - 0.4)
    legend_h = 0.0 if true_groups is None else 0.3 + 0.22 * math.ceil(len(names) / ncol)
    fig = new_figure((fig_w, max(2.6, height * cell_in + 0.9 + legend_h)))
    ax = fig.subplots()
    _draw_boxes(ax, shapes, corners, labels, r, lambda cid: cmap(int(g[cid]) % cmap.N))
    ax.set_xlim(-0.3, width + 0.3)
    ax.set_ylim(-0.3, height + 0.1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("box: a cluster found · circle: a client, area ∝ samples" +
                 (" · colour: true group" if true_groups is not None else ""), fontsize=8)
    if true_groups is not None:
        handles = [Line2D([0], [0], marker="o", ls="", ms=7, mec="k", mew=0.3, color=cmap(int(k) % cmap.N), label=nm)
                   for k, nm in zip(groups, names)]
        fig.legend(handles=handles, loc="outside lower center", ncol=ncol, title="true group")
    fig.suptitle(title)
    return fig


def client_clusters(assignment: Sequence[int], true_groups: Sequence[int] | None, sizes: Sequence[float] | None,
                    path: str | Path, title: str = "client clusters found",
                    group_names: Sequence[str] | None = None) -> Path:
    """Save :func:`client_clusters_figure` as PNG; returns the path (see there for the parameters)."""
    return save_figure(client_clusters_figure(assignment, true_groups, sizes, title=title, group_names=group_names),
                       path)
