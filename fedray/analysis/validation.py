"""Federated cluster validation over a session's clients: FedFuzzDB, a crisp federated
Davies–Bouldin index, federated variances and the knowledge gap.

The index's maths (client functions, the index from summed statistics, pooled versions) is
:mod:`fedray.algorithms.fedfuzzdb` (Stallmann & Wilbik 2022, Sections 2.1.3 and 2.2.2).
Here the statistics are summed over every client through the session's layer stack
(:meth:`fedray.api.session.Session.total`): under ``privacy.secure_aggregation`` (or with
``hide_n=True``) through the one secure sum, so the server learns only the totals —
N = Σ_l N_l included —; otherwise per-client sums reach the server, as in the paper.

The knowledge gap (eq. 19) between estimated centres c̃ and reference centres c is
Σ_k sqrt(Σ_i (c̃_k[i] − c_k[i])² / Var(x[i])), with the centres matched by the
Hungarian method; the variances come from federated column sums.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from fedray.algorithms.fedfuzzdb import (
    as_centres,
    check_qpm,
    crisp_db_from_stats,
    crisp_db_stats,
    fuzzy_db_from_stats,
    fuzzy_db_stats,
)
from fedray.core import calls
from fedray.core.contract import Task
from fedray.core.errors import DataError
from fedray.core.stats import Stats
from fedray.data.checks import column_moments

if TYPE_CHECKING:  # pragma: no cover
    from fedray.api.session import Session

log = logging.getLogger(__name__)


# --- federated helpers on a session ----------------------------------------------------
def _sum_over_all(session: Session, fn: Any, payload: Any, shared: Any, secure: bool = False) -> Stats:
    """The total of ``fn``'s statistics over every client of ``session`` (an ad-hoc call through its
    layers; securely summed under privacy or when ``secure``)."""
    tasks = {cid: Task(fn, payload, shared) for cid in range(session.info.n_clients)}
    return session.total(calls.adhoc("validation"), tasks, secure=secure)


def federated_fuzzy_db(session: Session, centers: np.ndarray, m: float = 2.0, q: float = 1.0, p: float = 2.0,
                       hide_n: bool = False) -> float:
    """FedFuzzDB of ``centers`` (k, d) (in the session's scaled feature space) over all clients."""
    check_qpm(q, p, m)
    C = as_centres(centers)
    payload = {"m": float(m), "q": float(q)}
    return fuzzy_db_from_stats(C, _sum_over_all(session, fuzzy_db_stats, payload, C, secure=hide_n), q, p)


def federated_crisp_db(session: Session, centers: np.ndarray, q: float = 1.0, p: float = 2.0,
                       hide_n: bool = False) -> float:
    """Crisp federated Davies–Bouldin index of ``centers`` (k, d) over all clients."""
    check_qpm(q, p)
    C = as_centres(centers)
    payload = {"q": float(q)}
    return crisp_db_from_stats(C, _sum_over_all(session, crisp_db_stats, payload, C, secure=hide_n), q, p)


def federated_variance(session: Session) -> np.ndarray:
    """Per-feature variance of the union (population variance), from per-client sums; shape (d,)."""
    t = _sum_over_all(session, column_moments, None, None)
    n = t["n"][0]
    mean = t["s"] / n
    return np.maximum(t["ss"] / n - mean ** 2, 0.0)


# --- knowledge gap -------------------------------------------------------------------
def match_centers(estimated: np.ndarray, reference: np.ndarray, variance: np.ndarray | None = None) -> np.ndarray:
    """Index of the estimated centre matched to each reference centre (Hungarian, variance-scaled distances)."""
    A = np.asarray(estimated, dtype=np.float64)
    B = np.asarray(reference, dtype=np.float64)
    w = np.ones(B.shape[1]) if variance is None else 1.0 / np.where(np.asarray(variance) > 0, variance, 1.0)
    cost = np.sqrt(np.sum((B[:, None, :] - A[None, :, :]) ** 2 * w, axis=-1))
    rows, cols = linear_sum_assignment(cost)
    out = np.full(B.shape[0], -1, dtype=np.int64)
    out[rows] = cols
    return out


def knowledge_gap(estimated: np.ndarray, reference: np.ndarray, variance: np.ndarray) -> float:
    """Knowledge gap, eq. (19): Σ_k sqrt(Σ_i (c̃_k[i] − c_k[i])² / Var(x[i])) over matched centres.

    Parameters
    ----------
    estimated : ndarray of shape (k, d)
    reference : ndarray of shape (k, d)
        Ground-truth (or central) centres.
    variance : ndarray of shape (d,)
        Per-feature variance of the data (zero variances count as 1).
    """
    A = np.asarray(estimated, dtype=np.float64)
    B = np.asarray(reference, dtype=np.float64)
    if A.shape != B.shape:
        raise DataError(f"knowledge gap: estimated centres {A.shape} and reference centres {B.shape} differ in shape")
    var = np.where(np.asarray(variance, dtype=np.float64) > 0, variance, 1.0)
    idx = match_centers(A, B, var)
    return float(np.sum(np.sqrt(np.sum((A[idx] - B) ** 2 / var, axis=1))))


def center_distances(estimated: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Euclidean distance from each reference centre to its matched estimated centre; shape (k_ref,)."""
    A = np.asarray(estimated, dtype=np.float64)
    B = np.asarray(reference, dtype=np.float64)
    idx = match_centers(A, B)
    d = np.full(B.shape[0], np.nan)
    ok = idx >= 0
    d[ok] = np.sqrt(np.sum((A[idx[ok]] - B[ok]) ** 2, axis=1))
    return d
