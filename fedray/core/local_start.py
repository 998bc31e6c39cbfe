"""The k-FED local start: k-means++ and Lloyd on each client's shard, for one client or many at once.

:func:`local_centers` is the client function of k-FED's one-shot round (Dennis, Li & Smith 2021) and of
the ``kfed`` start of the centre-based algorithms: k-means++ (Arthur & Vassilvitskii) from the client's
own stream, then Lloyd, on the client's shard; it returns the local centres and their sizes.

:func:`local_centers_many`, its batched form, runs them for all of a host's clients together: the clients
with the same number of rows are stacked as one (clients, rows, features) array and every step of both
methods runs on the stack, each client with its own centres and its own stream (``client_rng(seed,
client, round)``, seeded for all the clients at once). Each step applies the per-client form's
operations, element for element and in the same order, so that every client's centres and counts are the
same bits:

* k-means++'s distances to a new centre are ``einsum("nd,nd->n")`` of the rows less the centre (what
  :func:`fedray.core.ops.sq_distances` comes to for one centre);
* its draws are each client's own ``random()`` (``integers(n)`` when every row lies on a centre), turned
  into an index by the cumulative sum of the probabilities over the rows, divided by its last value, as
  ``Generator.choice`` does;
* Lloyd's distances add ``(x_d - c_d)^2`` over the features in order, a row goes to the first nearest
  centre, and the sums per centre add the rows in row order (:mod:`fedray.core.kernels`); each client stops
  at the iteration at which its own shift falls to the tolerance.

A client outside what the stacked steps cover runs :func:`local_centers` itself: an empty shard, fewer
than k rows or repeated rows among its first k, values that are not finite float64, or probabilities
``choice`` might refuse.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from fedray.core.contract import batched
from fedray.core.ops import kmeans_plusplus, lloyd

#: Lloyd's iterations and tolerance of the local start.
MAX_ITER = 100
TOL = 1e-8
#: Elements (clients x rows x centres) of the distance block a stacked step holds at once.
_BLOCK = 1 << 22
#: Up to this many local centres, the first k rows are checked pairwise for repeats; above it, by np.unique.
_PAIRWISE_K = 32


def _local_many(payloads: list[dict], shared: Any, batch: Any) -> list[dict[str, np.ndarray]]:
    """:func:`local_centers` for every client of ``batch`` (the same bits and the same replies)."""
    first = payloads[0]
    if any(p != first for p in payloads):
        raise ValueError("clients with different payloads")  # the host runs them client by client
    k = int(first["k"])
    X, off = batch.X, np.asarray(batch.offsets)
    m = len(batch)
    if m == 0:
        return []
    rngs = batch.rngs()
    sizes = np.diff(off)
    d = X.shape[1] if X.ndim == 2 else 0
    centers = np.empty((m, max(k, 0), d))
    counts = np.empty((m, max(k, 0)))
    stacked = np.zeros(m, dtype=bool)
    if X.ndim == 2 and X.dtype == np.float64 and k >= 1:
        for n in np.unique(sizes[sizes >= k]).tolist():
            sel = np.flatnonzero(sizes == n)
            for lo in range(0, len(sel), max(1, _BLOCK // (n * k))):
                part = sel[lo:lo + max(1, _BLOCK // (n * k))]
                X3 = _stack(X, off, part, n)
                ok = _plain_rows(X3, k)
                part, X3 = part[ok], X3[ok]
                if not len(part):
                    continue
                C, done = _plusplus(X3, k, [rngs[i] for i in part.tolist()])
                part, X3, C = part[done], X3[done], C[done]
                if len(part):
                    centers[part], counts[part] = _lloyd(X3, C)
                    stacked[part] = True
    # plain dicts, as one client alone sends them: local centres are each client's own (k-FED's one disclosure),
    # never statistics to be summed, masked or logged as such
    out: list[dict[str, np.ndarray]] = []
    fresh = None
    for i in range(m):
        if stacked[i]:
            out.append({"centers": centers[i].copy(), "counts": counts[i].copy()})
            continue
        if fresh is None:
            fresh = batch.rngs()  # streams not drawn from yet
        client = SimpleNamespace(data=SimpleNamespace(X=X[off[i]:off[i + 1]]), rng=fresh[i])
        out.append(local_centers(first, shared, client))
    return out


@batched(_local_many)
def local_centers(payload: dict, shared: Any, client: Any) -> dict[str, np.ndarray]:
    """k-means++ and Lloyd on the client's shard; returns local centres (k, d) and their sizes (k,)."""
    X = client.data.X
    k = min(int(payload["k"]), _n_distinct_upto(X, int(payload["k"])))
    if k == 0:
        return {"centers": np.zeros((0, X.shape[1])), "counts": np.zeros(0)}
    C, labels, _ = lloyd(X, kmeans_plusplus(X, k, client.rng), max_iter=MAX_ITER, tol=TOL)
    return {"centers": C, "counts": np.bincount(labels, minlength=k).astype(float)}


def _n_distinct_upto(X: np.ndarray, k: int) -> int:
    if X.shape[0] == 0:
        return 0
    return int(min(k, np.unique(X[: max(10 * k, 1000)], axis=0).shape[0] if X.shape[0] > 0 else 0)) or 1


# --- the stacked steps -------------------------------------------------------------------
def _stack(X: np.ndarray, off: np.ndarray, part: np.ndarray, n: int) -> np.ndarray:
    """The rows of clients ``part`` (n rows each) as one (clients, n, d) array (a view when they are
    consecutive)."""
    start = off[part]
    if np.all(np.diff(start) == n) and len(part):
        return X[start[0]:start[0] + n * len(part)].reshape(len(part), n, X.shape[1])
    return X[start[:, None] + np.arange(n)]


def _plain_rows(X3: np.ndarray, k: int) -> np.ndarray:
    """Bool per client: all its values are finite and its first k rows are pairwise different (then it
    has k distinct rows, and :func:`local_centers` keeps k)."""
    ok = np.isfinite(X3).all(axis=(1, 2))
    if k > _PAIRWISE_K:
        ok &= np.fromiter((np.unique(x[:k], axis=0).shape[0] == k for x in X3), dtype=bool, count=len(X3))
        return ok
    head = X3[:, :k]
    for a in range(1, k):
        ok &= (head[:, a, None, :] != head[:, :a, :]).any(axis=2).all(axis=1)
    return ok


def _d2_to(X3: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared distances (clients, n) of each client's rows to its centre ``c[i]``, as sq_distances gives
    them for one centre: ``einsum("nd,nd->n")`` of the rows less the centre."""
    m, n, d = X3.shape
    diff = (X3 - c[:, None, :]).reshape(m * n, d)
    return np.einsum("nd,nd->n", diff, diff, optimize=False).reshape(m, n)


def _choice_p(gens: list[np.random.Generator], P: np.ndarray) -> np.ndarray:
    """Each client's ``choice(n, p=P[i])`` (its generator's ``random()`` and the normalised cumulative sum)."""
    cdf = np.cumsum(P, axis=1)
    cdf /= cdf[:, -1:]
    u = np.fromiter((g.random() for g in gens), dtype=np.float64, count=len(gens))
    return (cdf <= u[:, None]).sum(axis=1)  # searchsorted(side="right") on a non-decreasing row


def _plusplus(X3: np.ndarray, k: int, gens: list[np.random.Generator]) -> tuple[np.ndarray, np.ndarray]:
    """k-means++ (unweighted) for each client: centres (clients, k, d), and a bool per client, False where a
    draw's probabilities are outside what the stacked step reproduces (that client runs on its own)."""
    m, n, d = X3.shape
    rows = np.arange(m)
    w = np.ones(n)
    p0 = w / w.sum()
    idx = _choice_p(gens, np.broadcast_to(p0, (m, n)))
    C = np.empty((m, k, d))
    C[:, 0] = X3[rows, idx]
    closest = _d2_to(X3, C[:, 0])
    done = np.ones(m, dtype=bool)
    for j in range(1, k):
        total = closest.sum(axis=1)
        pos = total > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            P = closest / total[:, None]
        # choice refuses probabilities that do not add up to 1; leave anything near that to the client itself
        done &= np.isfinite(total) & (~pos | (np.abs(P.sum(axis=1) - 1.0) <= 1e-9))
        idx = np.zeros(m, dtype=np.int64)
        hit = np.flatnonzero(pos & done)
        if len(hit) == m:
            idx = _choice_p(gens, P)
        else:
            for i in np.flatnonzero(~pos & done).tolist():  # all rows on centres: integers(n), in client order
                idx[i] = gens[i].integers(n)
            if len(hit):
                idx[hit] = _choice_p([gens[i] for i in hit.tolist()], P[hit])
        C[:, j] = X3[rows, idx]
        closest = np.minimum(closest, _d2_to(X3, C[:, j]))
    return C, done


def _nearest(XT: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Each row's nearest centre (clients, n) among its own client's centres ``C`` (clients, k, d), the rows
    given feature-major ``XT`` (clients, d, n): distances add ``(x_d - c_d)^2`` over the features in order
    (as :mod:`fedray.core.kernels` adds them), and the first of equal distances wins (``argmin``'s choice)."""
    m, d, n = XT.shape
    best = lab = None
    for j in range(C.shape[1]):
        a = None
        for f in range(d):
            t = XT[:, f, :] - C[:, j, f, None]
            np.multiply(t, t, out=t)
            a = t if a is None else np.add(a, t, out=a)  # 0 + t0^2 is t0^2: the kernels' sum from zero
        if best is None:
            best, lab = a, np.zeros((m, n), dtype=np.intp)
        else:
            closer = a < best  # strictly: the first nearest stays
            lab[closer] = j
            np.minimum(best, a, out=best)
    if not np.isfinite(best).all():  # NaN distances: argmin's choice over the whole row
        return np.argmin(np.stack([_d2_one(XT, C, j) for j in range(C.shape[1])], axis=2), axis=2)
    return lab


def _d2_one(XT: np.ndarray, C: np.ndarray, j: int) -> np.ndarray:
    a = np.zeros(XT.shape[::2])
    for f in range(XT.shape[1]):
        t = XT[:, f, :] - C[:, j, f, None]
        a += t * t
    return a


def _lloyd(X3: np.ndarray, C0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd from each client's centres ``C0`` (clients, k, d) until its own shift is at most the tolerance
    (or :data:`MAX_ITER`); returns the centres and the counts of the final assignment (clients, k)."""
    m, n, d = X3.shape
    k = C0.shape[1]
    C = np.array(C0, dtype=np.float64, copy=True)
    XT = np.ascontiguousarray(X3.transpose(0, 2, 1))  # (clients, d, n): each feature's rows contiguous
    active, Xa, Ca = np.arange(m), XT, C.copy()
    for _ in range(MAX_ITER):
        ma = len(active)
        cell = (np.arange(ma)[:, None] * k + _nearest(Xa, Ca)).ravel()
        sums = np.empty((ma * k, d))
        for f in range(d):
            sums[:, f] = np.bincount(cell, weights=Xa[:, f, :].ravel(), minlength=ma * k)
        cnt = np.bincount(cell, minlength=ma * k).astype(np.float64)
        new = Ca.reshape(ma * k, d).copy()
        nz = cnt > 0
        new[nz] = sums[nz] / cnt[nz, None]
        new = new.reshape(ma, k, d)
        shift = ((new - Ca) ** 2).reshape(ma, k * d).sum(axis=1)
        Ca = new
        stop = shift <= TOL
        if stop.any():
            C[active[stop]] = Ca[stop]
            keep = ~stop
            active, Xa, Ca = active[keep], Xa[keep], Ca[keep]
            if not len(active):
                break
    C[active] = Ca
    labels = _nearest(XT, C)
    counts = np.bincount((np.arange(m)[:, None] * k + labels).ravel(), minlength=m * k).astype(np.float64)
    return C, counts.reshape(m, k)


# --- the server's side -----------------------------------------------------------------
def gathered(replies: Any) -> tuple[np.ndarray, np.ndarray]:
    """The local centres (rows, d) of a k-FED round's replies and their counts (rows,), in client order,
    clients that sent none left out; read straight from the columns where the replies are columns."""
    parts = replies.column_parts() if hasattr(replies, "column_parts") else None
    if parts is not None and set(parts) == {"centers", "counts"}:
        C = np.concatenate([p.reshape(-1, p.shape[-1]) for p in parts["centers"]]).astype(np.float64, copy=False)
        w = np.concatenate([p.ravel() for p in parts["counts"]]).astype(np.float64, copy=False)
        return C, w
    sent = [r.update for r in replies if len(r.update["centers"])]
    if not sent:
        return np.zeros((0, 0)), np.zeros(0)
    return np.vstack([u["centers"] for u in sent]), np.concatenate([u["counts"] for u in sent])


def n_distinct(C: np.ndarray, k: int) -> int:
    """Distinct rows of ``C`` when fewer than ``k``; else some number >= ``k`` (a prefix that has ``k``
    distinct rows already answers)."""
    head = np.unique(C[: max(64 * k, 4096)], axis=0).shape[0]
    return head if head >= k or len(C) <= max(64 * k, 4096) else np.unique(C, axis=0).shape[0]
