"""Fused row kernels: nearest centre, Lloyd and fuzzy c-means statistics per segment of rows.

A host's clients are contiguous segments of one array (``offsets``: segment ``i`` is
rows ``offsets[i]:offsets[i + 1]``); a single client is one segment. Each kernel reads
every row once and writes its statistics per segment, so a round's work is one pass
over the host's rows whatever the number of clients.

The arithmetic is fixed, so the bits do not depend on how rows are grouped:

* a squared distance is ``sum_d (x_d - c_d)^2`` added over the features in order;
* the nearest centre is the first one with the smallest distance;
* every per-segment sum adds its rows in row order (as ``np.bincount`` does).

Two implementations compute exactly that: a compiled one (numba, when it is
installed: about 15 ms for 5 x 10^5 rows of 8 features and 8 centres on one core)
and a numpy one (3 to 9 times slower). They give the same bits
(``tests/core/test_kernels.py``), so a node without numba computes what the others
compute, and calls smaller than :data:`JIT_MIN_WORK` take the numpy one. Fuzzy
c-means with a fuzzifier other than 2 needs ``pow``, whose last bit may differ
between the two, so it always runs in numpy. ``FEDRAY_KERNELS=numpy`` in the
environment turns the compiled one off.

The compiled kernels are built on first use in a process (about a second with
numba's import) and cached on disk beside this module when the folder is writable.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

_BLOCK = 1 << 13  # rows per block of the numpy implementation (its block x K distances stay in cache)
#: Work (rows x centres x features) from which a call runs compiled. Smaller calls take the numpy
#: implementation, whose bits are the same: a process whose calls are all small (tests, a few
#: hundred rows a client) never pays numba's import and load (about a second per process).
JIT_MIN_WORK = 1 << 19
_compiled: dict[str, Callable[..., Any]] | None = None
_tried = False


def backend() -> str:
    """``"numba"`` when large calls run compiled in this process, else ``"numpy"``."""
    return "numba" if _jit() is not None else "numpy"


def _use_jit(X: np.ndarray, C: np.ndarray) -> dict[str, Callable[..., Any]] | None:
    if X.shape[0] * C.shape[0] * max(1, C.shape[1]) < JIT_MIN_WORK:
        return None
    return _jit()


def _jit() -> dict[str, Callable[..., Any]] | None:
    global _compiled, _tried
    if _tried:
        return _compiled
    _tried = True
    if os.environ.get("FEDRAY_KERNELS", "").strip().lower() == "numpy":
        return None
    try:
        import numba  # noqa: F401
    except Exception:  # not installed, or a numba that does not support this numpy
        log.debug("numba is not available; fedray uses its numpy kernels (the same bits, slower)")
        return None
    try:
        _compiled = _build()
    except Exception as e:  # a broken numba install must not stop a run
        log.warning("numba kernels could not be built (%s); using the numpy ones", e)
        _compiled = None
    return _compiled


def _build() -> dict[str, Callable[..., Any]]:
    """The compiled kernels, ``{"lloyd": ..., "fcm2": ...}`` (imports numba)."""
    from numba import njit

    # fastmath stays off: no reassociation and no fused multiply-add, so each
    # operation rounds as numpy's does.
    jit = njit(cache=True, nogil=True, fastmath=False)
    row_d2 = _build_row_d2(jit)
    return {"lloyd": _build_lloyd(jit, row_d2), "fcm2": _build_fcm2(jit, row_d2)}


def _build_row_d2(jit: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled squared distances of one row to every centre, features in order."""

    @jit
    def row_d2(X, j, CT, acc):  # acc[k] = sum_d (X[j, d] - CT[d, k])^2, features in order
        D, K = CT.shape
        for k in range(K):
            acc[k] = 0.0
        for d in range(D):
            xd = X[j, d]
            for k in range(K):
                t = xd - CT[d, k]
                acc[k] += t * t

    return row_d2


def _build_lloyd(jit: Callable[..., Any], row_d2: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled Lloyd kernel: per segment, the sums and counts of the rows nearest to each
    centre and the sum of their squared distances (when ``counts`` is not empty), and each
    row's nearest centre and squared distance (when ``labels`` is not empty)."""

    @jit
    def lloyd(X, CT, offsets, sums, counts, sse, labels, d2):
        D, K = CT.shape
        acc = np.empty(K)
        for s in range(offsets.shape[0] - 1):
            tot = 0.0
            for j in range(offsets[s], offsets[s + 1]):
                row_d2(X, j, CT, acc)
                bk = 0
                best = acc[0]
                for k in range(1, K):
                    if acc[k] < best:
                        best = acc[k]
                        bk = k
                if labels.shape[0] > 0:
                    labels[j] = bk
                    d2[j] = best
                if counts.shape[0] > 0:
                    counts[s, bk] += 1.0
                    for d in range(D):
                        sums[s, bk, d] += X[j, d]
                    tot += best
            if sse.shape[0] > 0:
                sse[s] = tot

    return lloyd


def _build_fcm2(jit: Callable[..., Any], row_d2: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled fuzzy c-means kernel for fuzzifier 2: per segment, the sums of w = u^2 per
    centre, of w x and, if wanted, of w d^2."""

    @jit
    def fcm2(X, CT, offsets, eps, u, ws, obj, want_obj):  # fuzzifier m = 2: no pow
        D, K = CT.shape
        d2 = np.empty(K)
        w = np.empty(K)
        for s in range(offsets.shape[0] - 1):
            tot = 0.0
            for j in range(offsets[s], offsets[s + 1]):
                row_d2(X, j, CT, d2)
                den = 0.0
                for k in range(K):
                    c = d2[k] if d2[k] > eps else eps
                    v = 1.0 / c
                    w[k] = v
                    den += v
                row = 0.0
                for k in range(K):
                    uk = w[k] / den
                    wk = uk * uk
                    u[s, k] += wk
                    for d in range(D):
                        ws[s, k, d] += wk * X[j, d]
                    if want_obj:
                        row += wk * d2[k]
                tot += row
            if want_obj:
                obj[s] = tot

    return fcm2


# --- numpy implementations (the same operations in the same order) -------------------------
def _block_d2(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared distances of the rows of ``X`` (b, D) to every centre, (b, K): features added in order."""
    A = np.zeros((X.shape[0], C.shape[0]))
    for d in range(C.shape[1]):
        t = np.subtract.outer(X[:, d], C[:, d])
        np.multiply(t, t, out=t)
        A += t
    return A


def _block_d2_t(XT: np.ndarray, C: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """:func:`_block_d2` transposed, for long blocks: rows are the columns of ``XT`` (D, b), the
    result goes to ``out`` (K, b). The same operations on every element, in fewer, longer passes."""
    for k in range(C.shape[0]):
        a = out[k]
        a.fill(0.0)
        for d in range(C.shape[1]):
            np.subtract(XT[d], C[k, d], out=tmp)
            np.multiply(tmp, tmp, out=tmp)
            np.add(a, tmp, out=a)


def _nearest_numpy(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = X.shape[0]
    labels = np.empty(n, dtype=np.intp)
    d2 = np.empty(n)
    if n < 4096:  # few rows: D passes over (n, K)
        A = _block_d2(X, C)
        labels[:] = np.argmin(A, axis=1)  # the first smallest, as the compiled loop's strict "<"
        d2[:] = A[np.arange(n), labels]
        return labels, d2
    acc = np.empty((C.shape[0], min(_BLOCK, n)))
    tmp = np.empty(acc.shape[1])
    for s in range(0, n, _BLOCK):
        XT = np.ascontiguousarray(X[s:s + _BLOCK].T)
        b = XT.shape[1]
        A = acc[:, :b]
        _block_d2_t(XT, C, A, tmp[:b])
        lab = np.argmin(A, axis=0)  # the first smallest
        labels[s:s + b] = lab
        d2[s:s + b] = A[lab, np.arange(b)]
    return labels, d2


def _lloyd_numpy(X: np.ndarray, C: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, (K, D) = len(offsets) - 1, C.shape
    owner = np.repeat(np.arange(n), np.diff(offsets))
    labels, d2 = _nearest_numpy(X, C)
    cell = owner * K + labels
    cols = np.ascontiguousarray(X.T)
    sums = np.empty((n * K, D))
    for d in range(D):
        sums[:, d] = np.bincount(cell, weights=cols[d], minlength=n * K)
    counts = np.bincount(cell, minlength=n * K).astype(np.float64).reshape(n, K)
    return sums.reshape(n, K, D), counts, np.bincount(owner, weights=d2, minlength=n)


def _fcm_numpy(X: np.ndarray, C: np.ndarray, offsets: np.ndarray, m: float, objective: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    n, (K, D) = len(offsets) - 1, C.shape
    rows = X.shape[0]
    owner = np.repeat(np.arange(n), np.diff(offsets))
    eps = np.finfo(np.float64).eps
    W = np.empty((rows, K))
    rowobj = np.zeros(rows) if objective else None
    for s in range(0, rows, _BLOCK):
        A = _block_d2(X[s:s + _BLOCK], C)
        V = np.maximum(A, eps)  # the compiled loop's "d2 if d2 > eps else eps" (d2 >= 0)
        if m == 2.0:
            np.divide(1.0, V, out=V)
        else:  # the platform's pow: only this implementation runs it (see _use_jit)
            np.power(V, -1.0 / (m - 1.0), out=V)
        den = np.zeros(len(V))
        for k in range(K):
            den += V[:, k]
        Wb = W[s:s + len(V)]
        np.divide(V, den[:, None], out=Wb)
        if m == 2.0:
            np.multiply(Wb, Wb, out=Wb)
        else:
            np.power(Wb, m, out=Wb)
        if objective:
            r = rowobj[s:s + len(V)]
            for k in range(K):
                r += Wb[:, k] * A[:, k]
    if n == 1:  # one segment: sums over axis 0 of a C-ordered array add the rows in order, as bincount
        ws1 = np.empty((K, D))
        for k in range(K):
            ws1[k] = np.add.reduce(W[:, k, None] * X, axis=0)
        obj1 = (
            np.bincount(owner, weights=rowobj, minlength=1) if objective else None
        )  # a vector: not add.reduce (pairwise)
        return np.add.reduce(W, axis=0)[None], ws1[None], obj1
    u = np.empty((n, K))
    ws = np.empty((n, K, D))
    cols = np.ascontiguousarray(X.T)
    for k in range(K):
        w = np.ascontiguousarray(W[:, k])
        u[:, k] = np.bincount(owner, weights=w, minlength=n)
        for d in range(D):
            ws[:, k, d] = np.bincount(owner, weights=w * cols[d], minlength=n)
    obj = np.bincount(owner, weights=rowobj, minlength=n) if objective else None
    return u, ws, obj


# --- the public functions -------------------------------------------------------------------
def _prepare(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = np.ascontiguousarray(X, dtype=np.float64)
    C = np.ascontiguousarray(C, dtype=np.float64)
    if X.ndim != 2 or C.ndim != 2 or X.shape[1] != C.shape[1]:
        raise ValueError(f"rows {X.shape} and centres {C.shape} must be 2-d with the same number of features")
    if C.shape[0] == 0:
        raise ValueError("at least one centre is needed")
    return X, C


def _offsets(offsets: np.ndarray | None, rows: int) -> np.ndarray:
    if offsets is None:
        return np.array([0, rows], dtype=np.int64)
    off = np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size < 1 or off[0] != 0 or off[-1] != rows or np.any(np.diff(off) < 0):
        raise ValueError(f"offsets must rise from 0 to the number of rows ({rows})")
    return off


def nearest(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nearest centre of every row (the first of equals) and the squared distance to it."""
    X, C = _prepare(X, C)
    jit = _use_jit(X, C)
    if jit is None:
        return _nearest_numpy(X, C)
    labels, d2 = np.empty(X.shape[0], dtype=np.intp), np.empty(X.shape[0])
    z = np.zeros((0, 0))
    jit["lloyd"](X, np.ascontiguousarray(C.T), np.array([0, X.shape[0]], dtype=np.int64),
                 np.zeros((0, 0, 0)), z, np.zeros(0), labels, d2)
    return labels, d2


def lloyd_stats(X: np.ndarray, C: np.ndarray, offsets: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per segment: the sums of the rows nearest to each centre (n, K, D), their counts (n, K)
    and the sum of their squared distances (n,). ``offsets`` None is one segment of all rows."""
    X, C = _prepare(X, C)
    off = _offsets(offsets, X.shape[0])
    jit = _use_jit(X, C)
    if jit is None:
        return _lloyd_numpy(X, C, off)
    n, (K, D) = len(off) - 1, C.shape
    sums, counts, sse = np.zeros((n, K, D)), np.zeros((n, K)), np.zeros(n)
    jit["lloyd"](X, np.ascontiguousarray(C.T), off, sums, counts, sse, np.zeros(0, dtype=np.intp), np.zeros(0))
    return sums, counts, sse


def fcm_stats(X: np.ndarray, C: np.ndarray, m: float, offsets: np.ndarray | None = None, objective: bool = False
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per segment, with fuzzy memberships u (fuzzifier ``m``) and w = u^m: the sums of w per
    centre (n, K), of w x (n, K, D) and, if ``objective``, of w d^2 (n,), else None.

    A row on a centre has its zero distance replaced by machine epsilon, as
    :func:`fedray.core.ops.fcm_memberships` does.
    """
    X, C = _prepare(X, C)
    off = _offsets(offsets, X.shape[0])
    m = float(m)
    # Another fuzzifier needs pow, whose last bit may differ between numba's and numpy's:
    # such calls always take numpy, so the bits never depend on the size of a call.
    jit = _use_jit(X, C) if m == 2.0 else None
    if jit is None:
        return _fcm_numpy(X, C, off, m, objective)
    n, (K, D) = len(off) - 1, C.shape
    u, ws, obj = np.zeros((n, K)), np.zeros((n, K, D)), np.zeros(n)
    jit["fcm2"](X, np.ascontiguousarray(C.T), off, float(np.finfo(np.float64).eps), u, ws, obj, bool(objective))
    return u, ws, (obj if objective else None)
