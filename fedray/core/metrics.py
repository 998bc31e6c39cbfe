"""Evaluation metrics, computed from summed per-client tables.

ARI, NMI and Hungarian-matched accuracy need only the contingency table of
(predicted cluster, true label), which is a sum over clients; the crisp
Davies–Bouldin index needs per-cluster sums, counts and mean distances. So the
evaluation of a federated run moves no rows either.
"""
from __future__ import annotations

import numpy as np

# scipy is imported where it is used (the server's evaluation), not by every process that imports this module.


def contingency(pred: np.ndarray, true: np.ndarray, n_pred: int, n_true: int) -> np.ndarray:
    """Counts table of shape (n_pred, n_true)."""
    table = np.zeros((n_pred, n_true), dtype=np.float64)
    np.add.at(table, (np.asarray(pred, dtype=np.int64), np.asarray(true, dtype=np.int64)), 1.0)
    return table


def ari_from_table(t: np.ndarray) -> float:
    from scipy.special import comb

    n = t.sum()
    if n < 2:
        return 1.0
    sum_comb = comb(t, 2).sum()
    a = comb(t.sum(axis=1), 2).sum()
    b = comb(t.sum(axis=0), 2).sum()
    expected = a * b / comb(n, 2)
    maximum = 0.5 * (a + b)
    if maximum == expected:
        return 1.0
    return float((sum_comb - expected) / (maximum - expected))


def nmi_from_table(t: np.ndarray) -> float:
    """Normalised mutual information (arithmetic mean normalisation, as scikit-learn)."""
    n = t.sum()
    if n == 0:
        return 0.0
    p = t / n
    pi, pj = p.sum(axis=1), p.sum(axis=0)
    nz = p > 0
    mi = float(np.sum(p[nz] * np.log(p[nz] / np.outer(pi, pj)[nz])))
    hi = -float(np.sum(pi[pi > 0] * np.log(pi[pi > 0])))
    hj = -float(np.sum(pj[pj > 0] * np.log(pj[pj > 0])))
    if hi == 0 and hj == 0:
        return 1.0
    denom = 0.5 * (hi + hj)
    return float(mi / denom) if denom > 0 else 0.0


def acc_from_table(t: np.ndarray) -> float:
    """Accuracy under the best one-to-one matching of clusters to labels (Hungarian)."""
    from scipy.optimize import linear_sum_assignment

    n = t.sum()
    if n == 0:
        return 0.0
    rows, cols = linear_sum_assignment(-t)
    return float(t[rows, cols].sum() / n)


def hungarian_accuracy(pred: np.ndarray, true: np.ndarray) -> float:
    _, p = np.unique(pred, return_inverse=True)
    _, q = np.unique(true, return_inverse=True)
    return acc_from_table(contingency(p, q, p.max() + 1, q.max() + 1))


def davies_bouldin_from_stats(centroids: np.ndarray, mean_dist: np.ndarray, counts: np.ndarray) -> float:
    """Crisp Davies–Bouldin index from cluster centroids and mean distances to them.

    Clusters with no points are ignored (as scikit-learn does with missing labels).
    """
    keep = counts > 0
    c, s = centroids[keep], mean_dist[keep]
    if c.shape[0] < 2:
        return float("nan")
    d = np.sqrt(((c[:, None, :] - c[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    r = (s[:, None] + s[None, :]) / d
    return float(np.mean(np.max(r, axis=1)))


def best_permutation_distance(A: np.ndarray, B: np.ndarray) -> float:
    """min over permutations P of ||A - P B||_F (centres matched by the Hungarian method)."""
    from scipy.optimize import linear_sum_assignment

    cost = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    return float(np.sqrt(cost[rows, cols].sum()))


def cluster_metrics(assignment: np.ndarray, true_groups: np.ndarray | None) -> dict[str, float]:
    """Number of clusters among clients with a label >= 0, and ARI against ``true_groups``."""
    a = np.asarray(assignment)
    known = a >= 0
    out = {"n_clusters": float(len(np.unique(a[known])))}
    if true_groups is not None and known.sum() >= 2:
        _, p = np.unique(a[known], return_inverse=True)
        _, q = np.unique(np.asarray(true_groups)[known], return_inverse=True)
        out["ari"] = ari_from_table(contingency(p, q, p.max() + 1, q.max() + 1))
    return out
