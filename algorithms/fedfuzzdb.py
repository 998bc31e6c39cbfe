"""FedFuzzDB: the federated fuzzy Davies–Bouldin index, and a crisp federated Davies–Bouldin index.

Stallmann & Wilbik (2022), Sections 2.1.3 and 2.2.2. The fuzzy Davies–Bouldin
index of centres c_1..c_K on data X (N points) is

    S_i = U_i · ((1/N) Σ_x ‖x − c_i‖^q)^{1/q},   U_i = (1/N) Σ_x u_i(x)      (eqs. 12, 13)
    M_ij = ‖c_i − c_j‖_p,  R_ij = (S_i + S_j) / M_ij,  R_i = max_{j≠i} R_ij,
    index = (1/K) Σ_i R_i                                                   (eqs. 7–9, 11)

with u_i(x) the fuzzy c-means memberships (eq. 5). Every sum over x splits into
per-client sums (eqs. 15–17): a client sends N_l, Σ_x ‖x − c_i‖^q and Σ_x u_i(x)
per cluster — a :class:`~fedray.core.stats.Stats` — and the server adds them up, so the
federated index equals the index on the pooled data for the same centres. Under
secure aggregation (or ``hide_n``, :mod:`fedray.analysis.validation`) the server learns
only the sums, N = Σ_l N_l included: the "summed statistic" of Section 2.2.3.

The crisp index (eq. 10: S_i = ((1/T_i) Σ_{x∈i} ‖x − c_i‖^q)^{1/q}, T_i the points
nearest to c_i) is the extension the paper names as future work; clients send
T_i and the spread sums per cluster. Clusters without points are left out.

This module holds the index's maths: the client functions, the index from summed
statistics and the pooled (non-federated) versions. Running it over a session's
clients is :mod:`fedray.analysis.validation`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedray.core.contract import batched
from fedray.core.errors import ConfigError, DataError
from fedray.core.ops import (
    assign,
    column_sums,
    memberships_from_d2,
    segment_colsums,
    sq_distances,
)
from fedray.core.stats import Stats, StatsBlock


# --- checks --------------------------------------------------------------------
def check_qpm(q: float, p: float, m: float | None = None) -> None:
    """A one-line ConfigError unless the spread exponent ``q`` and the Minkowski exponent ``p`` are > 0 and
    the fuzzifier ``m`` (where given) is > 1."""
    if not q > 0:
        raise ConfigError(f"validation q: the spread exponent must be > 0; got {q!r}")
    if not p > 0:
        raise ConfigError(f"validation p: the Minkowski exponent of centre distances must be > 0; got {p!r}")
    if m is not None and not m > 1:
        raise ConfigError(f"validation m: the fuzzifier must be > 1; got {m!r}")


def as_centres(C: Any) -> np.ndarray:
    """``C`` as a float64 array (k, d) of at least 2 centres, or a one-line DataError."""
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] < 2:
        raise DataError(f"Davies–Bouldin needs at least 2 centres as an array (k, d); got shape {C.shape}")
    return C


# --- the index from spreads -----------------------------------------------------
def db_from_spreads(C: np.ndarray, S: np.ndarray, p: float = 2.0) -> float:
    """Davies–Bouldin index from centres (k, d) and cluster spreads (k,) (eqs. 7–9, 11).

    Coinciding centres give an infinite index.
    """
    C = np.asarray(C, dtype=np.float64)
    S = np.asarray(S, dtype=np.float64)
    if C.shape[0] < 2:
        return float("nan")
    diff = np.abs(C[:, None, :] - C[None, :, :])
    M = np.sum(diff ** p, axis=-1) ** (1.0 / p)
    with np.errstate(divide="ignore", invalid="ignore"):
        R = (S[:, None] + S[None, :]) / M
    R[M == 0] = np.inf
    np.fill_diagonal(R, -np.inf)
    return float(np.mean(np.max(R, axis=1)))


def _count_entry(n: int, payload: dict[str, Any], client: Any) -> dict[str, np.ndarray]:
    return {"n": np.array([float(n)])}


def _count_block(batch: Any, payload: dict[str, Any]) -> dict[str, np.ndarray]:
    return {"n": batch.sizes.astype(np.float64)[:, None]}


def _same_payload(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    if any(p != payloads[0] for p in payloads):
        raise ValueError("clients with different payloads")  # the host runs them client by client
    return payloads[0]


def fuzzy_db_stats_many(payloads: list[dict[str, Any]], centers: np.ndarray, batch: Any) -> StatsBlock:
    """:func:`fuzzy_db_stats` for all of a host's clients in one pass over their rows (the same bits)."""
    payload = _same_payload(payloads)
    q = float(payload.get("q", 1.0))
    X, owner, n = batch.X, batch.owner, len(batch)
    d2 = sq_distances(X, centers)
    U = memberships_from_d2(d2.copy(), float(payload["m"]))
    return StatsBlock(spread=segment_colsums(np.sqrt(d2) ** q, owner, n), support=segment_colsums(U, owner, n),
                      **_count_block(batch, payload))


@batched(fuzzy_db_stats_many)
def fuzzy_db_stats(payload: dict[str, Any], centers: np.ndarray, client: Any) -> Stats:
    """A client's FedFuzzDB sums for ``centers`` (k, d).

    Returns
    -------
    Stats
        ``n`` (1,), ``spread`` (k,) =
        Σ_x ‖x − c_i‖^q and ``support`` (k,) = Σ_x u_i(x), summed over the rows in order.
    """
    X = client.data.X
    q = float(payload.get("q", 1.0))
    d2 = sq_distances(X, centers)
    U = memberships_from_d2(d2.copy(), float(payload["m"]))
    return Stats(spread=column_sums(np.sqrt(d2) ** q), support=column_sums(U),
                 **_count_entry(X.shape[0], payload, client))


def crisp_db_stats_many(payloads: list[dict[str, Any]], centers: np.ndarray, batch: Any) -> StatsBlock:
    """:func:`crisp_db_stats` for all of a host's clients in one pass over their rows (the same bits)."""
    payload = _same_payload(payloads)
    q = float(payload.get("q", 1.0))
    X, owner, n = batch.X, batch.owner, len(batch)
    k = centers.shape[0]
    labels, d2 = assign(X, centers)
    cell = owner * k + labels
    return StatsBlock(counts=np.bincount(cell, minlength=n * k).astype(np.float64).reshape(n, k),
                      spread=np.bincount(cell, weights=np.sqrt(d2) ** q, minlength=n * k).reshape(n, k),
                      **_count_block(batch, payload))


@batched(crisp_db_stats_many)
def crisp_db_stats(payload: dict[str, Any], centers: np.ndarray, client: Any) -> Stats:
    """A client's crisp Davies–Bouldin sums: ``counts`` T_i (k,) and ``spread`` Σ_{x∈i} ‖x − c_i‖^q (k,)."""
    X = client.data.X
    q = float(payload.get("q", 1.0))
    k = centers.shape[0]
    labels, d2 = assign(X, centers)
    return Stats(counts=np.bincount(labels, minlength=k).astype(np.float64),
                 spread=np.bincount(labels, weights=np.sqrt(d2) ** q, minlength=k),
                 **_count_entry(X.shape[0], payload, client))


# --- server side -----------------------------------------------------------------
def total_count(t: Stats) -> float:
    """N = Σ_l N_l from summed statistics."""
    return float(t["n"][0])


def fuzzy_db_from_stats(centers: np.ndarray, stats: Stats, q: float = 1.0, p: float = 2.0) -> float:
    """FedFuzzDB (eqs. 15–17 and 7–11) from summed client statistics."""
    C = as_centres(centers)
    N = total_count(stats)
    if N <= 0:
        raise DataError("FedFuzzDB: the clients hold no samples")
    S = (stats["support"] / N) * (stats["spread"] / N) ** (1.0 / q)
    return db_from_spreads(C, S, p)


def crisp_db_from_stats(centers: np.ndarray, stats: Stats, q: float = 1.0, p: float = 2.0) -> float:
    """Crisp federated Davies–Bouldin index (eq. 10) from summed statistics; empty clusters are left out."""
    C = as_centres(centers)
    T = stats["counts"]
    keep = T > 0
    S = (stats["spread"][keep] / T[keep]) ** (1.0 / q)
    return db_from_spreads(C[keep], S, p)


# --- pooled (non-federated) versions -----------------------------------------------
class _Pooled:
    """A stand-in for a client holding ``X`` (to reuse the client functions)."""

    def __init__(self, X: np.ndarray) -> None:
        self.data = type("D", (), {"X": np.asarray(X, dtype=np.float64)})()
        self.id = 0


def fuzzy_davies_bouldin(X: np.ndarray, centers: np.ndarray, m: float = 2.0, q: float = 1.0, p: float = 2.0) -> float:
    """Fuzzy Davies–Bouldin index of ``centers`` (k, d) on pooled data ``X`` (n, d) (Vergani & Binaghi)."""
    check_qpm(q, p, m)
    C = as_centres(centers)
    return fuzzy_db_from_stats(C, fuzzy_db_stats({"m": m, "q": q}, C, _Pooled(X)), q, p)


def crisp_davies_bouldin(X: np.ndarray, centers: np.ndarray, q: float = 1.0, p: float = 2.0) -> float:
    """Crisp Davies–Bouldin index of nearest-centre clusters on pooled data (eq. 10 with centres ``centers``)."""
    check_qpm(q, p)
    C = as_centres(centers)
    return crisp_db_from_stats(C, crisp_db_stats({"q": q}, C, _Pooled(X)), q, p)
