"""Merge rules of FLACC (Mehta & Shao 2023), in plain numpy.

The server of FLACC keeps an ``m x m`` matrix of cosine similarities between the
weight updates of clients that were sampled together (eq. 8, computed on weight
updates as in eq. 19), the round each pair was last seen together (tau), and a
partition of the clients into *entities* (single clients or subservers). After
each round of the merging phase it greedily merges up to ``n_merge`` pairs of
entities:

* (9)-(10): among all pairs of entities, take the one whose *minimum*
  cross-entity similarity is largest and merge it;
* (15)-(17): merge only if that minimum, alpha_min_cross, is above alpha_0
  (paper: alpha_0 = 0, the "more-similar half-plane");
* (11)-(14): when both entities are subservers, merge only if the combination
  potential Phi = alpha_max_cross - alpha_min_within is positive;
* (18): a pair that has not been sampled together within the last ``memory``
  (T) rounds reverts to -1 and is ignored in (9), (11), (12) and (15).

Choices where the paper is silent (documented in ``docs/reproductions.md``):

* a pair of entities with no remembered pair of clients is not a candidate;
  an entity without a remembered pair inside it contributes nothing to (12);
  two subservers with no remembered inside pair at all are not merged (Phi
  cannot be computed);
* when the best pair fails (14) the next best pair is tried (``scan=True``,
  the reading of Fig. 2: the conditions decide which pairs may merge);
  ``scan=False`` follows Algorithm 1 line by line and stops at the first
  failing pair;
* ties are broken by the smallest client ids, so runs are deterministic.

An entity is named by the tuple of its client ids (ascending); the partition is
a label vector giving each client the smallest client id of its entity.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["MergeEvent", "SimilarityMemory", "best_cross_similarity", "block_stats", "cosine_similarities", "entities",
           "find_merge", "merge_round", "random_groups"]


@dataclass(frozen=True)
class MergeEvent:
    """One merge of two entities.

    Attributes
    ----------
    round : int
        Server round in which the merge happened.
    first, second : tuple of int
        Client ids of the two merged entities (``first`` holds the smaller id).
    similarity : float
        alpha_min_cross of the pair (eq. 15), the value that solved (9).
    phi : float or None
        Combination potential (eq. 13); None unless both were subservers.
    kind : str
        ``"client+client"``, ``"client+subserver"`` or ``"subserver+subserver"``.
    """

    round: int
    first: tuple[int, ...]
    second: tuple[int, ...]
    similarity: float
    phi: float | None
    kind: str

    @property
    def merged(self) -> tuple[int, ...]:
        return tuple(sorted(self.first + self.second))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cosine_similarities(updates: np.ndarray) -> np.ndarray:
    """Cosine similarity between rows (eq. 19).

    Parameters
    ----------
    updates : ndarray of shape (k, p)
        Weight updates, one row a client.

    Returns
    -------
    ndarray of shape (k, k)
        Values in [-1, 1]; a zero update has similarity 0 with every other update.
    """
    U = np.asarray(updates, dtype=np.float64)
    norms = np.linalg.norm(U, axis=1)
    safe = np.where(norms > 0, norms, 1.0)
    V = U / safe[:, None]
    S = np.clip(V @ V.T, -1.0, 1.0)
    np.fill_diagonal(S, np.where(norms > 0, 1.0, 0.0))
    return S


class SimilarityMemory:
    """Similarity matrix alpha with the round tau each pair was last seen together.

    Parameters
    ----------
    n_clients : int
    memory : int or None
        System memory T (eq. 18); None means infinite memory.
    """

    def __init__(self, n_clients: int, memory: int | None = 10) -> None:
        self.n = int(n_clients)
        self.memory = memory
        self.alpha = -np.ones((self.n, self.n))
        self.tau = np.full((self.n, self.n), -1, dtype=np.int64)  # -1: never seen together

    def __setstate__(self, state: dict[str, Any]) -> None:
        # arrays unpickled from Ray's object store are read-only; this object updates them in place
        self.__dict__.update({k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in state.items()})

    def record(self, round_: int, clients: np.ndarray | list[int], similarities: np.ndarray) -> None:
        """Store the similarities of clients sampled together in ``round_`` (eq. 8).

        Parameters
        ----------
        round_ : int
        clients : array of shape (k,)
            Client ids, in the order of the rows of ``similarities``.
        similarities : ndarray of shape (k, k)
        """
        idx = np.asarray(clients, dtype=np.int64)
        S = np.asarray(similarities, dtype=np.float64)
        if S.shape != (idx.size, idx.size):
            raise ValueError(f"similarities: expected shape {(idx.size, idx.size)}, got {S.shape}")
        ix = np.ix_(idx, idx)
        self.alpha[ix] = S
        self.tau[ix] = int(round_)

    def observe(self, round_: int, clients: np.ndarray | list[int], updates: np.ndarray) -> np.ndarray:
        """Cosine similarities of ``updates`` (k, p) recorded for ``clients``; returns them (k, k)."""
        S = cosine_similarities(updates)
        self.record(round_, clients, S)
        return S

    def known(self, round_: int) -> np.ndarray:
        """Boolean (m, m): pairs remembered at ``round_`` (seen together, ``round_ - tau <= T``), no diagonal."""
        seen = self.tau >= 0
        if self.memory is not None:
            seen &= (int(round_) - self.tau) <= int(self.memory)
        np.fill_diagonal(seen, False)
        return seen

    def current(self, round_: int) -> np.ndarray:
        """alpha at ``round_`` (eq. 18): forgotten and unseen pairs read -1."""
        return np.where(self.known(round_), self.alpha, -1.0)

    def forget(self, round_: int) -> None:
        """Set forgotten pairs to -1 in place (Algorithm 1, line 19)."""
        if self.memory is None:
            return
        old = (self.tau >= 0) & ((int(round_) - self.tau) > int(self.memory))
        self.alpha[old] = -1.0
        self.tau[old] = -1


def _entity_order(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clients sorted by entity; entity names (smallest id) and start offsets."""
    order = np.lexsort((np.arange(labels.size), labels))
    names, starts = np.unique(labels[order], return_index=True)
    return order, names, starts


def block_stats(alpha: np.ndarray, known: np.ndarray, labels: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Minimum, maximum and count of remembered similarities between and within entities.

    Parameters
    ----------
    alpha : ndarray of shape (m, m)
    known : bool ndarray of shape (m, m)
        Pairs to use (others are ignored); the diagonal is ignored.
    labels : int ndarray of shape (m,)
        Entity of each client.

    Returns
    -------
    names : ndarray of shape (E,)
        Entity names (sorted).
    bmin, bmax : ndarray of shape (E, E)
        Block minimum / maximum over remembered pairs (+inf / -inf where none).
    count : ndarray of shape (E, E)
        Number of remembered pairs in each block.
    """
    labels = np.asarray(labels)
    alpha = np.asarray(alpha, dtype=np.float64)
    k = np.array(known, dtype=bool)
    np.fill_diagonal(k, False)
    order, names, starts = _entity_order(labels)
    A = alpha[np.ix_(order, order)]
    K = k[np.ix_(order, order)]
    lo = np.where(K, A, np.inf)
    hi = np.where(K, A, -np.inf)
    bmin = np.minimum.reduceat(np.minimum.reduceat(lo, starts, axis=0), starts, axis=1)
    bmax = np.maximum.reduceat(np.maximum.reduceat(hi, starts, axis=0), starts, axis=1)
    count = np.add.reduceat(np.add.reduceat(K.astype(np.int64), starts, axis=0), starts, axis=1)
    return names, bmin, bmax, count


def best_cross_similarity(alpha: np.ndarray, known: np.ndarray, labels: np.ndarray) -> float:
    """The value of alpha_min_cross that solves (9): the largest, over pairs of entities with a
    remembered cross pair, of their smallest remembered cross similarity (eq. 15), before (14)
    and (16) are checked; NaN when no pair of entities has a remembered cross pair.

    Parameters
    ----------
    alpha, known, labels
        As in :func:`block_stats`.
    """
    names, bmin, _, count = block_stats(alpha, known, labels)
    iu, ju = np.triu_indices(names.size, k=1)
    ok = count[iu, ju] > 0
    return float(bmin[iu, ju][ok].max()) if ok.any() else float("nan")


def find_merge(alpha: np.ndarray, known: np.ndarray, labels: np.ndarray, *, alpha_0: float = 0.0,
               scan: bool = True) -> tuple[int, int, float, float | None] | None:
    """The pair of entities to merge next, or None (eq. 9, 13-17).

    Parameters
    ----------
    alpha, known, labels
        As in :func:`block_stats`.
    alpha_0 : float
        Minimum allowed cross-entity similarity (eq. 16).
    scan : bool
        If the best pair fails (14), try the next best (True) or stop (False).

    Returns
    -------
    (a, b, alpha_min_cross, phi) or None
        ``a < b`` are entity names; ``phi`` is None unless both are subservers.
    """
    names, bmin, bmax, count = block_stats(alpha, known, labels)
    E = names.size
    if E < 2:
        return None
    sizes = np.bincount(np.searchsorted(names, labels), minlength=E)
    within = np.diagonal(bmin).copy()  # +inf where no remembered pair inside
    iu, ju = np.triu_indices(E, k=1)
    score = bmin[iu, ju]
    ok = (count[iu, ju] > 0) & (score > alpha_0)
    if not ok.any():
        return None
    cand = np.flatnonzero(ok)
    # best score first; ties by the smaller entity names (stable sort on a lexicographic key)
    cand = cand[np.lexsort((ju[cand], iu[cand], -score[cand]))]
    for c in cand:
        a, b = int(iu[c]), int(ju[c])
        phi: float | None = None
        if sizes[a] > 1 and sizes[b] > 1:
            w = min(within[a], within[b])
            phi = float(bmax[a, b] - w) if np.isfinite(w) else float("-inf")
            if not phi > 0.0:  # (14)
                if scan:
                    continue
                return None
        return int(names[a]), int(names[b]), float(score[c]), phi
    return None


def merge_round(memory: SimilarityMemory, labels: np.ndarray, round_: int, *, alpha_0: float = 0.0,
                n_merge: int = 2, scan: bool = True) -> tuple[np.ndarray, list[MergeEvent]]:
    """Up to ``n_merge`` greedy merges at ``round_`` (Algorithm 1, lines 13-18).

    Parameters
    ----------
    memory : SimilarityMemory
    labels : int ndarray of shape (m,)
        Current partition (entity name of each client).
    round_ : int
    alpha_0 : float
    n_merge : int
    scan : bool

    Returns
    -------
    labels : int ndarray of shape (m,)
        New partition (a copy).
    events : list of MergeEvent
    """
    labels = np.asarray(labels, dtype=np.int64).copy()
    alpha = memory.alpha
    known = memory.known(round_)
    events: list[MergeEvent] = []
    for _ in range(int(n_merge)):
        pick = find_merge(alpha, known, labels, alpha_0=alpha_0, scan=scan)
        if pick is None:
            break
        a, b, sim, phi = pick
        first = tuple(int(i) for i in np.flatnonzero(labels == a))
        second = tuple(int(i) for i in np.flatnonzero(labels == b))
        kinds = sorted("client" if len(e) == 1 else "subserver" for e in (first, second))
        labels[labels == b] = a  # a < b: the entity keeps its smallest client id as name
        events.append(MergeEvent(int(round_), first, second, sim, phi, "+".join(kinds)))
    return labels, events


def entities(labels: np.ndarray) -> list[tuple[int, ...]]:
    """The partition as a list of client-id tuples, ordered by smallest id."""
    labels = np.asarray(labels)
    return [tuple(int(i) for i in np.flatnonzero(labels == e)) for e in np.unique(labels)]


def random_groups(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random groups of the same sizes as the entities of ``labels`` (the control arm).

    The clients are shuffled by ``rng`` and cut into blocks of the entities' sizes (in
    the entities' order); each block is labelled by its smallest client id, as entities are.
    """
    labels = np.asarray(labels)
    sizes = [len(e) for e in entities(labels)]
    order = rng.permutation(labels.shape[0])
    out = np.empty(labels.shape[0], dtype=np.int64)
    start = 0
    for size in sizes:
        block = order[start:start + size]
        out[block] = int(block.min())
        start += size
    return out
