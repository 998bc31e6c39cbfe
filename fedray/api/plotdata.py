"""The statistics behind the output plots, summed over the clients during a run.

The data density under the centres (a histogram of the union, or of its projection on the
federated PCA) is a sum of per-client histograms and moments: no rows move, and under
privacy the sums are secure. The session gathers them through its layer stack while the run
is live and hands them to :meth:`fedray.api.results.Result.save` as :class:`PlotData`, so
writing the outputs never calls clients.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedray.core.contract import batched
from fedray.core.stats import Stats, StatsBlock


def _cells(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value as :func:`numpy.histogramdd` finds it (the last edge in the last bin); -1 outside."""
    i = np.searchsorted(edges, x, side="right") - 1
    i[x == edges[-1]] = len(edges) - 2
    i[(i < 0) | (i >= len(edges) - 1)] = -1
    return i


def _histograms(values: list[np.ndarray], edges: tuple[np.ndarray, ...], offsets: np.ndarray) -> np.ndarray:
    """Per segment ``offsets[c]:offsets[c + 1]`` of the rows, the histogram of ``values`` (one array a
    dimension) over ``edges``: shape (n_segments, bins...), as float64 counts (``numpy.histogramdd``'s)."""
    shape = tuple(len(e) - 1 for e in edges)
    cells = [_cells(np.ascontiguousarray(v), e) for v, e in zip(values, edges)]
    flat = np.ravel_multi_index(tuple(np.maximum(c, 0) for c in cells), shape)
    keep = np.all(np.stack(cells) >= 0, axis=0)
    n = len(offsets) - 1
    owner = np.repeat(np.arange(n), np.diff(offsets))
    size = int(np.prod(shape))
    index = owner[keep] * size + flat[keep]
    counts = np.bincount(index, weights=np.ones(len(index)), minlength=n * size)  # float64 counts, no copy
    return counts.reshape((n, *shape))


def _histogram2d_many(payloads: list[Any], shared: tuple, batch: Any) -> StatsBlock:
    edges, mean, axes = shared
    P = (batch.X - mean) @ axes
    return StatsBlock(h=_histograms([P[:, 0], P[:, 1]], edges, np.asarray(batch.offsets)))


@batched(_histogram2d_many)
def _histogram2d(payload: Any, shared: tuple, client: Any) -> Stats:
    edges, mean, axes = shared
    P = (client.data.X - mean) @ axes
    return Stats(h=_histograms([P[:, 0], P[:, 1]], edges, np.array([0, len(P)]))[0])


def _histogram1d_many(payloads: list[Any], edges: np.ndarray, batch: Any) -> StatsBlock:
    return StatsBlock(h=_histograms([batch.X[:, 0]], (edges,), np.asarray(batch.offsets)))


@batched(_histogram1d_many)
def _histogram1d(payload: Any, edges: np.ndarray, client: Any) -> Stats:
    X = client.data.X
    return Stats(h=_histograms([X[:, 0]], (edges,), np.array([0, len(X)]))[0])


def _moments(payload: Any, shared: Any, client: Any) -> Stats:
    X = client.data.X
    return Stats(n=np.array(float(X.shape[0])), sum=X.sum(axis=0), outer=X.T @ X)


SumFn = Callable[[Any, Any], Any]


@dataclass
class PlotData:
    """What the output plots show beside the model, gathered from the clients during the run.

    All of it is plain data: writing the outputs never calls clients. Every field may be None
    (no plot of that kind, or a federation too small for a secure sum under privacy).
    """

    feature_names: tuple[str, ...] = ()
    n_features: int = 0
    #: 1-D data: (histogram (bins,), edges (bins + 1,)) of the union
    density_1d: tuple[np.ndarray, np.ndarray] | None = None
    #: (mean (d,), axes (d, 2)) of the federated PCA (the identity for 2-D data)
    projection: tuple[np.ndarray, np.ndarray] | None = None
    #: (histogram (bins, bins), x edges, y edges) of the union projected on ``projection``
    density_2d: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    #: the federation's true group of each client, where known (clustered FL)
    true_groups: Any = None


def projection_2d(total: SumFn, info: Any) -> tuple[np.ndarray, np.ndarray]:
    """Mean and top-2 principal axes of the union, from summed per-client moments (no rows move).

    ``total(fn, shared)`` sums ``fn``'s statistics over every client (None when it cannot).
    Returns (mean of shape (n_features,), axes of shape (n_features, 2)).
    """
    d = info.n_features
    if d == 2:
        return np.zeros(2), np.eye(2)
    t = total(_moments, None)
    if t is None:  # under privacy with too few clients for a secure sum: the first two features
        return np.zeros(d), np.eye(d)[:, :2]
    n, s, ss = float(t["n"]), t["sum"], t["outer"]
    mean = s / n
    cov = ss / n - np.outer(mean, mean)
    w, v = np.linalg.eigh(cov)
    axes = v[:, ::-1][:, :2]
    axes = axes * np.sign(axes[np.argmax(np.abs(axes), axis=0), [0, 1]])  # deterministic signs
    return mean, axes


def density_2d(total: SumFn, info: Any, bins: int | None = None,
               projection: tuple[np.ndarray, np.ndarray] | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Summed 2-D histogram of all clients' points (projected on ``projection`` if given), for plots.

    Under privacy the histograms are summed securely (a one-row client's histogram shows
    which cell its row falls in); None when the federation is too small for that."""
    mean, axes = projection if projection is not None else (np.zeros(2), np.eye(2))
    if bins is None:
        bins = int(np.clip(np.sqrt(info.total_samples) / 1.5, 25, 150))
    lo, hi = info.feature_min, info.feature_max
    corners = np.array(np.meshgrid(*[[a, b] for a, b in zip(lo, hi)])).reshape(len(lo), -1).T if len(lo) <= 12 else None
    if corners is not None:
        proj = (corners - mean) @ axes
        plo, phi = proj.min(axis=0), proj.max(axis=0)
    else:
        span = np.sqrt(np.sum((hi - lo) ** 2)) / 2
        plo, phi = np.full(2, -span), np.full(2, span)
    edges = (np.linspace(plo[0], phi[0], bins + 1), np.linspace(plo[1], phi[1], bins + 1))
    t = total(_histogram2d, (edges, mean, axes))
    if t is None:
        return None
    return t["h"], edges[0], edges[1]


def density_1d(total: SumFn, info: Any, bins: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Summed histogram of all clients' values of a one-feature data set, for plots (no rows move).

    Summed securely under privacy; None when the federation is too small for that."""
    if bins is None:
        bins = int(np.clip(np.sqrt(info.total_samples), 20, 120))
    lo, hi = float(info.feature_min[0]), float(info.feature_max[0])
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    t = total(_histogram1d, edges)
    return None if t is None else (t["h"], edges)


def gather(total: SumFn, info: Any, model: dict[str, Any]) -> PlotData:
    """The statistics the output plots need for ``model`` (centres over the data density)."""
    names = tuple(str(n) for n in (info.extras.get("feature_names") or ()))
    out = PlotData(feature_names=names, n_features=int(info.n_features), true_groups=info.extras.get("true_groups"))
    C = model.get("centers")
    if not (isinstance(C, np.ndarray) and C.ndim == 2 and C.shape[1] == info.n_features):
        return out
    if info.n_features == 1:
        out.density_1d = density_1d(total, info)
    else:
        out.projection = projection_2d(total, info)
        out.density_2d = density_2d(total, info, projection=out.projection)
    return out
