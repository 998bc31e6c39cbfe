"""Rules of FedCRef (federated clustering with cluster-wise refinement, Pisa / IIT-CNR 2025), in plain numpy.

Every decision FedCRef takes on the server or in a client's refinement step is
a small function of error matrices, here without torch:

* :func:`association_statistic` — eq. (2) and the threshold test of Phase 2:
  for the samples of cluster p of client a, d(x) = |e(M_a^p, x) - e(M_b^q, x)|
  (e = per-sample reconstruction MSE), min-max normalised over the cluster;
  the statistic is the P-th percentile of the normalised d and the test passes
  when it is <= tau (options: ``normalisation="errors"`` or ``"relative"``, which
  do not depend on the cluster's size the way the min-max over its samples does);
* :func:`link_clusters` — the association graph: a pair passes only if the test
  passes in *both* directions; each cluster is linked to the best qualifying
  cluster of each other client (``"best"``, default), to the first qualifying one
  as the authors' code does (``"first"``), or only when the choice is mutual
  (``"mutual-best"``);
* :func:`communities` — eq. (3): connected components with at least two members;
* :func:`refine_labels` — Algorithm 2 (cluster refinement on the n x M error
  matrix of the client's own models and every community model);
* :func:`align_labels`, :func:`stability` — Hungarian renumbering of refined
  labels to the old numbering, and the stability of eq. (6) between iterations;
* :func:`global_stop` — the global stopping rule (communities and isolated
  clusters change by at most 10% over three consecutive iterations);
* evaluation only (needs each cluster's majority true class):
  :func:`association_quality`.

**The paper's statistic depends on the cluster's size.** Under ``"cluster"`` it is
(P-th percentile - min) / (max - min) of the n differences d. The percentile settles
as n grows, but the largest of n draws keeps growing (about as log n for an
exponential tail, sqrt(2 log n) for a normal one), so the same error distribution
gives a smaller statistic on a larger cluster: for exponential differences the
expected statistic is about ln 4 / H_n (H_n the harmonic number), 0.31 at n = 50 and
0.20 at n = 500. With τ = 0.2–0.25 a pair that passes at the paper's 500 samples a
class fails at 50–150 (tests/algorithms/test_fedcref_authors.py holds this on
synthetic errors). The option ``"tail"`` divides by (median - min) + β H_{N/2}
instead, β the mean excess over the median of the upper half and N =
:data:`TAIL_REFERENCE` = 500: for an exponential tail the expected range of N
samples, whatever n is.

The nodes of the association graph are the local clusters of all clients,
numbered ``0..M-1``; ``owner[i]`` is the client of node ``i``.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from fedray.core.errors import ConfigError
from fedray.core.metrics import contingency

__all__ = ["LINK_MODES", "LinkMode", "NORMALISATIONS", "Normalisation", "TAIL_REFERENCE", "association_quality",
           "association_statistic", "align_labels", "communities", "global_stop", "link_clusters", "refine_labels",
           "stability"]

LinkMode = Literal["best", "first", "mutual-best", "first-scan"]
LINK_MODES = ("best", "first", "mutual-best", "first-scan")


def _check_p_tau(percentile: float, tau: float) -> None:
    if not 0 < percentile <= 100:
        raise ConfigError(f"percentile: must lie in (0, 100]; got {percentile!r}")
    if not 0 < tau <= 1:
        raise ConfigError(f"tau: must lie in (0, 1]; got {tau!r}")


NORMALISATIONS = ("cluster", "errors", "relative", "tail")
Normalisation = Literal["cluster", "errors", "relative", "tail"]
#: The cluster size the ``"tail"`` normalisation stands for: the paper's 500 samples a class.
TAIL_REFERENCE = 500


def association_statistic(e_own: np.ndarray, e_other: np.ndarray, percentile: float = 75.0,
                          normalisation: Normalisation = "cluster", equal: float = 0.0) -> float:
    """P-th percentile of the normalised error differences (eq. 2).

    Parameters
    ----------
    e_own : ndarray of shape (n,)
        Per-sample reconstruction errors of the cluster's own model on its samples.
    e_other : ndarray of shape (n,)
        Errors of the foreign model on the same samples.
    percentile : float in (0, 100]
    normalisation : {"cluster", "errors", "relative", "tail"}
        How d = |e_own - e_other| is brought to [0, 1]:
        ``"cluster"`` (the paper, as the authors' code does it) min-max normalises
        d over the cluster's samples, so the statistic measures the *shape* of
        d's distribution, not its size; ``"errors"`` divides d by the range of
        both models' errors on the cluster (the errors min-max normalised jointly,
        then differenced); ``"relative"`` takes d / (e_own + e_other) per sample;
        ``"tail"`` (beyond the paper) replaces the maximum of ``"cluster"`` by the
        maximum expected of :data:`TAIL_REFERENCE` samples, estimated from d's
        median and the mean excess of its upper half (an exponential tail), so that
        the statistic does not depend on n (see Notes).
    equal : float
        The statistic when every difference is equal (or n < 2) under ``"cluster"``
        and ``"tail"``, where min-max is undefined: 0.0 (the paper's text read as
        "no difference": the pair may link) or NaN (the authors' code, 0 / 0: no link).

    Returns
    -------
    float in [0, 1], or ``equal``

    See the module docstring: the ``"cluster"`` statistic falls as the cluster grows.
    """
    _check_p_tau(percentile, 1.0)
    a = np.asarray(e_own, dtype=np.float64)
    b = np.asarray(e_other, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"e_own and e_other must be vectors of one length; got {a.shape} and {b.shape}")
    d = np.abs(a - b)
    if normalisation in ("cluster", "tail"):
        if d.size < 2:
            return float(equal)
        lo = float(d.min())
        span = float(d.max()) - lo if normalisation == "cluster" else _tail_span(d, lo)
        if not span > 0:
            return float(equal)
        return float(min(1.0, (np.percentile(d, percentile) - lo) / span))
    if d.size == 0:
        return 0.0
    if normalisation == "errors":
        both = np.concatenate([a, b])
        span = float(both.max() - both.min())
        return float(np.percentile(d / span, percentile)) if span > 0 else 0.0
    if normalisation == "relative":
        tot = a + b
        r = np.divide(d, tot, out=np.zeros_like(d), where=tot > 0)
        return float(np.percentile(r, percentile))
    raise ConfigError(f"normalisation: must be one of {', '.join(NORMALISATIONS)}; got {normalisation!r}")


def _tail_span(d: np.ndarray, lo: float) -> float:
    """(median - min) + β H_{N/2}: the expected range of :data:`TAIL_REFERENCE` draws under an exponential
    tail above the median, β the mean excess of the samples above the median."""
    med = float(np.median(d))
    above = d[d > med]
    beta = float(np.mean(above - med)) if above.size else 0.0
    harmonic = float(np.sum(1.0 / np.arange(1, TAIL_REFERENCE // 2 + 1)))
    return (med - lo) + beta * harmonic


def link_clusters(S: np.ndarray, owner: np.ndarray, tau: float = 0.2,
                  mode: LinkMode = "best", ratio: float = 0.0, strict: bool = False) -> list[tuple[int, int]]:
    """Edges of the association graph.

    Parameters
    ----------
    S : ndarray of shape (M, M)
        ``S[i, j]`` = statistic of :func:`association_statistic` computed by the
        owner of node ``i`` on its cluster ``i`` against the model of node ``j``
        (NaN or ignored where ``owner[i] == owner[j]``).
    owner : ndarray of shape (M,)
        Client of each node.
    tau : float in (0, 1]
    mode : {"best", "first", "mutual-best", "first-scan"}
        ``"best"`` links each node to the qualifying node of each other client with
        the smallest ``max(S[i, j], S[j, i])``; ``"first"`` to the qualifying node
        with the smallest index; ``"mutual-best"`` keeps a best link only when it is
        also the best of the other end; ``"first-scan"`` as the authors' code: for clients
        a < b, each node of a links to b's first qualifying node (b's nodes do not choose).
    ratio : float in [0, 1)
        0 (the paper): only the τ test links. Above 0, a ratio test (an option
        beyond the paper) also links nodes ``i`` and ``j`` that fail the τ test
        when each is the other's best foreign node (smallest ``max(S[i, j],
        S[j, i])`` over the nodes of all other clients) and that score is at most
        ``ratio`` times the best score either of them reaches with a node of any
        third client. A class held by only two clients then links even where its
        errors are small, so that a fixed gap between two models is a large
        relative one, as long as no third client's cluster comes close.
    strict : bool
        ``S < tau`` (the authors' code) instead of ``S <= tau`` (the paper's text); NaN never passes.

    Returns
    -------
    list of (i, j) with i < j, sorted
    """
    _check_link(tau, mode, ratio)
    S = np.asarray(S, dtype=np.float64)
    owner = np.asarray(owner)
    M = S.shape[0]
    if S.shape != (M, M) or owner.shape != (M,):
        raise ValueError(f"S must be (M, M) and owner (M,); got {S.shape} and {owner.shape}")
    other = owner[:, None] != owner[None, :]
    Sf = np.where(np.isnan(S), np.inf, S)
    passes = Sf < tau if strict else Sf <= tau
    ok = other & passes & passes.T                    # the test passes in both directions
    score = np.maximum(Sf, Sf.T)
    edges = _scan_links(ok, owner) if mode == "first-scan" else _choice_links(ok, score, owner, mode)
    if ratio > 0:
        edges |= _ratio_links(score, owner, other, float(ratio))
    return sorted(edges)


def _choice_links(ok: np.ndarray, score: np.ndarray, owner: np.ndarray, mode: str) -> set[tuple[int, int]]:
    """Each node's choice among each other client's qualifying nodes ("best", "first", "mutual-best")."""
    choice: dict[tuple[int, int], int] = {}             # (node, other client) -> chosen node
    for i in range(ok.shape[0]):
        for b in np.unique(owner[ok[i]]):
            cand = np.flatnonzero(ok[i] & (owner == b))
            j = int(cand[0]) if mode == "first" else int(cand[np.argmin(score[i, cand])])
            choice[(i, int(b))] = j
    edges = set()
    for (i, _b), j in choice.items():
        if mode == "mutual-best" and choice.get((j, int(owner[i]))) != i:
            continue
        edges.add((min(i, j), max(i, j)))
    return edges


def _check_link(tau: float, mode: str, ratio: float) -> None:
    _check_p_tau(100.0, tau)
    if mode not in LINK_MODES:
        raise ConfigError(f"link: must be one of {', '.join(LINK_MODES)}; got {mode!r}")
    if not 0.0 <= float(ratio) < 1.0:
        raise ConfigError(f"ratio: must be in [0, 1); got {ratio!r}")


def _scan_links(ok: np.ndarray, owner: np.ndarray) -> set[tuple[int, int]]:
    """The authors' scan: for clients a < b (in order), each node of a links to b's first qualifying node."""
    edges: set[tuple[int, int]] = set()
    clients = np.unique(owner)
    for ia, a in enumerate(clients):
        for b in clients[ia + 1:]:
            nodes_b = np.flatnonzero(owner == b)
            for i in np.flatnonzero(owner == a):
                hit = nodes_b[ok[i, nodes_b]]
                if hit.size:
                    j = int(hit[0])
                    edges.add((min(i, j), max(i, j)))
    return edges


def _ratio_links(score: np.ndarray, owner: np.ndarray, other: np.ndarray, ratio: float) -> set[tuple[int, int]]:
    """Mutual best foreign pairs whose score is at most ``ratio`` times the best score
    either end reaches with a node of a third client (see :func:`link_clusters`)."""
    foreign = np.where(other, score, np.inf)
    best = np.argmin(foreign, axis=1)
    out: set[tuple[int, int]] = set()
    for i in range(score.shape[0]):
        j = int(best[i])
        if j <= i or int(best[j]) != i or not np.isfinite(foreign[i, j]):
            continue  # each mutual pair once, from its smaller node
        third = owner != owner[i]
        third &= owner != owner[j]
        rival = min(float(foreign[i, third].min(initial=np.inf)), float(foreign[j, third].min(initial=np.inf)))
        if np.isfinite(rival) and foreign[i, j] <= ratio * rival:  # no third client: nothing to compare with
            out.add((i, j))
    return out


def communities(n_nodes: int, edges: list[tuple[int, int]], min_size: int = 2) -> tuple[list[list[int]], np.ndarray]:
    """Connected components of the association graph with at least ``min_size`` nodes (eq. 3).

    Returns
    -------
    groups : list of list of int
        Node ids of each community (ascending), ordered by their smallest node.
    membership : ndarray of shape (n_nodes,)
        Community index of each node, -1 for isolated nodes (and small components).
    """
    membership = np.full(n_nodes, -1, dtype=np.int64)
    if n_nodes == 0:
        return [], membership
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    g = coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n_nodes, n_nodes))
    _, comp = connected_components(g, directed=False)
    groups = []
    for c in np.unique(comp):
        nodes = np.flatnonzero(comp == c)
        if nodes.size >= min_size:
            groups.append(nodes.tolist())
    groups.sort(key=lambda g_: g_[0])
    for k, nodes in enumerate(groups):
        membership[nodes] = k
    return groups, membership


def refine_labels(E: np.ndarray, k_local: int) -> tuple[np.ndarray, list[int]]:
    """Algorithm 2: greedy re-clustering of a client's samples with candidate models.

    Parameters
    ----------
    E : ndarray of shape (n, M)
        Reconstruction error of each sample under each candidate model (the
        client's own cluster models and every community model).
    k_local : int
        Number of clusters to form.

    Returns
    -------
    labels : ndarray of shape (n,)
        New cluster of each sample, ``0..len(selected)-1`` in order of selection.
    selected : list of int
        Column of ``E`` chosen for each new cluster. Fewer than ``k_local`` when
        every sample was assigned before ``k_local`` models were chosen.

    Notes
    -----
    Each step takes, among the models not yet chosen, the one that is the argmin
    for the most unassigned samples (ties: the smallest column), gives those
    samples the next label and removes model and samples. Samples left after
    ``k_local`` steps go to the chosen model with the lowest error.
    """
    E = np.asarray(E, dtype=np.float64)
    n, M = E.shape
    if k_local < 1:
        raise ValueError(f"k_local must be >= 1; got {k_local}")
    labels = np.full(n, -1, dtype=np.int64)
    free_models = np.ones(M, dtype=bool)
    selected: list[int] = []
    while len(selected) < min(k_local, M) and (labels < 0).any():
        rows = np.flatnonzero(labels < 0)
        cols = np.flatnonzero(free_models)
        best = cols[np.argmin(E[np.ix_(rows, cols)], axis=1)]
        counts = np.bincount(best, minlength=M)
        m = int(np.argmax(counts))
        labels[rows[best == m]] = len(selected)
        selected.append(m)
        free_models[m] = False
    rest = np.flatnonzero(labels < 0)
    if rest.size:
        labels[rest] = np.argmin(E[np.ix_(rest, selected)], axis=1)
    return labels, selected


def align_labels(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Renumber ``new`` to agree most with ``old`` (Hungarian); unmatched new clusters get fresh numbers.

    Parameters
    ----------
    new, old : ndarray of shape (n,)
        Non-negative integer labels.

    Returns
    -------
    ndarray of shape (n,)
    """
    new = np.asarray(new, dtype=np.int64)
    old = np.asarray(old, dtype=np.int64)
    kn, ko = int(new.max(initial=-1)) + 1, int(old.max(initial=-1)) + 1
    t = contingency(new, old, kn, ko)
    rows, cols = linear_sum_assignment(-t)
    mapping = np.full(kn, -1, dtype=np.int64)
    mapping[rows] = cols
    nxt = max(ko, 0)
    for r in range(kn):
        if mapping[r] < 0:
            mapping[r] = nxt
            nxt += 1
    return mapping[new]


def stability(new: np.ndarray, old: np.ndarray) -> float:
    """Agreement of two labelings under the best one-to-one matching (eq. 6 with the previous labels)."""
    new = np.asarray(new, dtype=np.int64)
    old = np.asarray(old, dtype=np.int64)
    if new.size == 0:
        return 1.0
    t = contingency(new, old, int(new.max()) + 1, int(old.max()) + 1)
    rows, cols = linear_sum_assignment(-t)
    return float(t[rows, cols].sum() / new.size)


def global_stop(n_communities: list[int], n_isolated: list[int], window: int = 3, tol: float = 0.1) -> bool:
    """True when both series changed by at most ``tol`` (relative) over the last ``window`` iterations.

    The change of a series over the window is ``max - min``, compared with
    ``tol * max(max, 1)``.
    """
    if len(n_communities) < window or len(n_isolated) < window:
        return False
    for series in (n_communities[-window:], n_isolated[-window:]):
        hi, lo = max(series), min(series)
        if hi - lo > tol * max(hi, 1):
            return False
    return True


def association_quality(edges: list[tuple[int, int]], groups: list[list[int]], node_class: np.ndarray,
                        n_nodes: int) -> dict[str, float]:
    """Evaluation of an association graph against each node's majority true class.

    Parameters
    ----------
    edges : list of (i, j)
    groups : list of list of int
        Communities (see :func:`communities`).
    node_class : ndarray of shape (M,)
        Majority true class of each local cluster (evaluation only).
    n_nodes : int

    Returns
    -------
    dict
        ``wrong_associations`` (% of edges joining different classes, 0 without
        edges), ``isolated_clusters`` (nodes without an edge), ``communities``,
        ``pure_communities`` (communities whose nodes share one class),
        ``classes_covered`` (distinct majority classes of the communities).
    """
    node_class = np.asarray(node_class)
    wrong = sum(1 for i, j in edges if node_class[i] != node_class[j])
    deg = np.zeros(n_nodes, dtype=np.int64)
    for i, j in edges:
        deg[i] += 1
        deg[j] += 1
    pure = 0
    covered = set()
    for g in groups:
        cls, cnt = np.unique(node_class[g], return_counts=True)
        pure += int(cls.size == 1)
        covered.add(int(cls[np.argmax(cnt)]))
    return {"wrong_associations": 100.0 * wrong / len(edges) if edges else 0.0,
            "isolated_clusters": float((deg == 0).sum()), "communities": float(len(groups)),
            "pure_communities": float(pure), "classes_covered": float(len(covered)),
            "edges": float(len(edges))}
