"""Numerical building blocks shared by the clustering algorithms.

Everything here is deterministic numpy (no BLAS reductions whose order depends
on thread counts), so a client computes the same bits in any process.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable

import numpy as np

from fedray.core import kernels
from fedray.core.errors import EmptyClusterWarning

_CHUNK = 1 << 20  # elements of the (rows x centres x features) difference block


def sq_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances, shape (n_samples, n_centres).

    Uses ||x - c||^2 = ||x||^2 - 2 x.c + ||c||^2 on data centred at the centres' mean
    (which keeps the cancellation error small), with non-BLAS ``einsum`` so the bits
    do not depend on thread counts. Rows are processed in blocks to bound memory.
    """
    mu = C.mean(axis=0)
    Cc = C - mu
    cc = np.einsum("kd,kd->k", Cc, Cc, optimize=False)
    # -2 x.c as x.(-2c): scaling by a power of two is exact, so the same bits in one pass less.
    m2 = -2.0 * Cc
    n, d = X.shape
    out = np.empty((n, C.shape[0]), dtype=np.float64)
    step = max(1, _CHUNK // max(1, d))
    for s in range(0, n, step):
        Xc = X[s : s + step] - mu
        block = out[s : s + step]
        np.einsum("nd,kd->nk", Xc, m2, out=block, optimize=False)
        block += np.einsum("nd,nd->n", Xc, Xc, optimize=False)[:, None]
        block += cc[None, :]
        np.maximum(block, 0.0, out=block)
    return out


def assign(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre of every row (the first of equals) and the squared distance to it,
    ``sum_d (x_d - c_d)^2`` in feature order (:func:`fedray.core.kernels.nearest`)."""
    return kernels.nearest(X, C)


def cluster_sums(X: np.ndarray, labels: np.ndarray, k: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Per-cluster (weighted) sums of rows, shape (k, n_features)."""
    out = np.zeros((k, X.shape[1]))
    cols = np.ascontiguousarray(X.T)  # bincount reads its weights contiguously (the same sums, faster)
    for j in range(X.shape[1]):
        w = cols[j] if weights is None else cols[j] * weights
        out[:, j] = np.bincount(labels, weights=w, minlength=k)
    return out


def segment_colsums(A: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Per-segment column sums of ``A`` (rows, k): row j belongs to segment ``owner[j]``; shape (n, k).

    Every sum runs over its rows in order (``bincount``), so a segment's sums are the same
    bits whether it is summed alone (``owner`` all zero) or with other segments.
    """
    k = A.shape[1]
    cell = (owner[:, None] * k + np.arange(k)).ravel()
    return np.bincount(cell, weights=A.ravel(), minlength=n * k).reshape(n, k)


def column_sums(A: np.ndarray) -> np.ndarray:
    """Column sums of ``A`` (rows, k) row by row in order: :func:`segment_colsums` of one segment."""
    return segment_colsums(A, np.zeros(A.shape[0], dtype=np.intp), 1)[0]


def fcm_memberships(X: np.ndarray, C: np.ndarray, m: float) -> np.ndarray:
    """Fuzzy c-means memberships u[j, c] = 1 / sum_l (d_jc / d_jl)^(2/(m-1)), shape (n, k).

    A point lying on a centre gets its zero distance replaced by machine epsilon
    (as in Corcuera Bárcena et al.'s reference code).
    """
    return memberships_from_d2(sq_distances(X, C), m)


def memberships_from_d2(d2: np.ndarray, m: float) -> np.ndarray:
    """:func:`fcm_memberships` from squared distances (n, k); ``d2`` is overwritten. Row by row."""
    np.maximum(d2, np.finfo(np.float64).eps, out=d2)
    p = 1.0 / (m - 1.0)
    inv = d2 ** (-p)  # (d^2)^(-1/(m-1)) = d^(-2/(m-1))
    return inv / inv.sum(axis=1, keepdims=True)


def kmeans_plusplus(X: np.ndarray, k: int, rng: np.random.Generator, weights: np.ndarray | None = None) -> np.ndarray:
    """k-means++ seeding (Arthur & Vassilvitskii), optionally weighted; shape (k, n_features).

    Weights that are negative or not finite (counts noised by differential privacy) count as 0; if none is
    positive, every row weighs the same.
    """
    n = X.shape[0]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if weights is not None and not (np.isfinite(w) & (w >= 0)).all():
        w = np.where(np.isfinite(w) & (w > 0), w, 0.0)
    if not w.sum() > 0:
        w = np.ones(n)
    first = rng.choice(n, p=w / w.sum())
    centers = [X[first]]
    closest = sq_distances(X, X[first][None])[:, 0]
    for _ in range(1, k):
        pot = closest * w
        total = pot.sum()
        idx = rng.choice(n, p=pot / total) if total > 0 else rng.integers(n)
        centers.append(X[idx])
        closest = np.minimum(closest, sq_distances(X, X[idx][None])[:, 0])
    return np.array(centers)


def lloyd(X: np.ndarray, C0: np.ndarray, max_iter: int = 300, tol: float = 1e-8,
          weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Plain (weighted) Lloyd iterations from ``C0``; empty clusters keep their centre.

    Returns (centres, labels, iterations).
    """
    C = np.array(C0, dtype=np.float64, copy=True)
    k = C.shape[0]
    w = None if weights is None else np.asarray(weights, dtype=float)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - `it` is the iteration count returned
        if w is None:  # one fused pass (the same sums in row order as the weighted path with w = 1)
            sums, counts = (a[0] for a in kernels.lloyd_stats(X, C)[:2])
        else:
            labels, _ = assign(X, C)
            sums = cluster_sums(X, labels, k, w)
            counts = np.bincount(labels, weights=w, minlength=k)
        new = C.copy()
        nz = counts > 0
        new[nz] = sums[nz] / counts[nz, None]
        shift = float(np.sum((new - C) ** 2))
        C = new
        if shift <= tol:
            break
    labels, _ = assign(X, C)
    return C, labels, it


def kmeans(X: np.ndarray, k: int, rng: np.random.Generator, n_init: int = 3, max_iter: int = 300,
           weights: np.ndarray | None = None) -> np.ndarray:
    """Best-of-``n_init`` k-means++ + Lloyd (deterministic given ``rng``); centres (k, n_features)."""
    if X.shape[0] < k:
        raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={k}")
    best, best_obj = None, np.inf
    w = np.ones(X.shape[0]) if weights is None else weights
    for _ in range(n_init):
        C, lab, _ = lloyd(X, kmeans_plusplus(X, k, rng, weights), max_iter=max_iter, weights=weights)
        obj = float(np.sum(w * sq_distances(X, C)[np.arange(X.shape[0]), lab]))
        if obj < best_obj:
            best, best_obj = C, obj
    return best


def fcm(X: np.ndarray, C0: np.ndarray, m: float = 2.0, tol: float = 1e-3, max_iter: int = 300
        ) -> tuple[np.ndarray, np.ndarray, int]:
    """Central fuzzy c-means from ``C0``; stops when the Frobenius change of centres < ``tol``.

    Returns (centres, memberships (n, k), iterations).
    """
    C = np.array(C0, dtype=np.float64, copy=True)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - `it` is the iteration count returned
        den, num = (a[0] for a in kernels.fcm_stats(X, C, m)[:2])  # sums of u^m and u^m x, rows in order
        new = C.copy()
        nz = den > 0
        new[nz] = num[nz] / den[nz, None]
        shift = float(np.linalg.norm(new - C))
        C = new
        if shift < tol:
            break
    return C, fcm_memberships(X, C, m), it


def warn_empty(empty: np.ndarray, round_: int, what: str = "cluster", seen: set[int] | None = None) -> None:
    """Warn about clusters that got no points in a round (once per cluster if ``seen`` is given)."""
    idx = np.flatnonzero(empty)
    if seen is not None:
        idx = np.array([i for i in idx if i not in seen], dtype=int)
        seen.update(int(i) for i in idx)
    if idx.size:
        warnings.warn(f"round {round_}: {what}(s) {idx.tolist()} received no points and keep their centre",
                      EmptyClusterWarning, stacklevel=3)


def weighted_average(vectors: list[np.ndarray], weights: Iterable[float]) -> np.ndarray:
    """sum_i w_i v_i / sum_i w_i in float64, returned as float32 (P,)."""
    w = np.asarray(list(weights), dtype=np.float64)
    acc = np.zeros(vectors[0].shape, dtype=np.float64)
    for v, wi in zip(vectors, w):
        acc += wi * np.asarray(v, dtype=np.float64)
    return (acc / w.sum()).astype(np.float32)


def cosine_similarities(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarities of the rows of ``vectors`` (n, P) -> (n, n) (eq. 19); zero rows give 0."""
    V = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(V, axis=1)
    U = V / np.where(norms > 0, norms, 1.0)[:, None]
    S = np.clip(U @ U.T, -1.0, 1.0)
    np.fill_diagonal(S, np.where(norms > 0, 1.0, 0.0))
    return S
