"""Released sums as one linear system over clients: what any combination of them can single out.

A sum over cohort S is the row ``1_S`` of an incidence matrix A (one column per client): the
server holds ``A x`` for each client's vector x of one quantity, and every linear combination
``y^T A x`` is a sum over the support of ``v = A^T y``. A group G of clients is given away when
some nonzero v in the row space of A is supported inside G.

:class:`System` keeps, incrementally,

* the **atoms**: the classes of clients that lie in exactly the same released cohorts. Every v in
  the row space is constant on each atom, so its support is a union of atoms; when every atom
  has at least ``min_cohort`` clients, no combination of the released sums, whatever its
  coefficients, is supported on fewer than ``min_cohort`` clients. This is the test the strict
  rule applies (sound for groups; it may refuse a sum that exposes only larger unions of small
  atoms). One label per client id, recoded to 0..atoms in O(n) per new cohort (no rank computation).
* the **isolated clients**: client i is isolated when e_i is in the row space, i.e. its leverage
  ``a_i^T (A A^T)^+ a_i`` (a_i: its column) is 1. Only a client alone in its atom can be
  isolated, so the leverage is computed for those only (reports and ``release_rule: count``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Exposure:
    """What the released sums of one system expose.

    Attributes
    ----------
    small_groups : int
        Atoms (clients in exactly the same released cohorts) of fewer than ``min_cohort`` clients.
    clients_in_small_groups : int
        Clients in those atoms.
    smallest : tuple of int
        The clients of a smallest atom (for messages; empty when none is small).
    """

    small_groups: int
    clients_in_small_groups: int
    smallest: tuple[int, ...]

    @property
    def safe(self) -> bool:
        return self.small_groups == 0


class System:
    """The distinct un-noised cohorts released for one quantity, their atoms and their row space."""

    def __init__(self, min_cohort: int) -> None:
        self.min_cohort = int(min_cohort)
        self.rows: list[np.ndarray] = []  # distinct cohorts (sorted client ids)
        self._keys: set[bytes] = set()
        self._label = np.zeros(0, dtype=np.int64)  # atom label per client id; 0: in no released cohort
        self._next = 1
        self._isolated: tuple[int, np.ndarray] | None = None

    @staticmethod
    def ids(clients: object) -> np.ndarray:
        return np.unique(np.fromiter((int(c) for c in clients), dtype=np.int64))  # type: ignore[attr-defined]

    def has(self, ids: np.ndarray) -> bool:
        return ids.tobytes() in self._keys

    def _with(self, ids: np.ndarray) -> np.ndarray:
        """The atom labels once the cohort ``ids`` is released too (not kept)."""
        n = max(self._label.size, int(ids[-1]) + 1 if ids.size else 0)
        lab = np.zeros(n, dtype=np.int64)
        lab[:self._label.size] = self._label
        lab[ids] += self._next  # (label, in the cohort) -> a label of its own
        return lab

    def exposure(self, ids: np.ndarray | None = None, min_cohort: int | None = None) -> Exposure:
        """The atoms' exposure now, or once the cohort ``ids`` is released too (atoms under ``min_cohort``,
        default the system's, are small)."""
        lab = self._label if ids is None or self.has(ids) else self._with(ids)
        sizes = np.bincount(lab, minlength=1)
        sizes[0] = 0  # clients in no released cohort: every combination is zero on them
        small = np.flatnonzero((sizes > 0) & (sizes < (self.min_cohort if min_cohort is None else min_cohort)))
        if small.size == 0:
            return Exposure(0, 0, ())
        first = small[np.argmin(sizes[small])]
        return Exposure(int(small.size), int(sizes[small].sum()), tuple(np.flatnonzero(lab == first).tolist()))

    def add(self, ids: np.ndarray) -> None:
        if ids.size == 0 or self.has(ids):
            return
        lab = self._with(ids)  # labels below 2 * self._next: recode them to 0 (no cohort), 1, 2, ...
        present = np.bincount(lab, minlength=1) > 0
        present[0] = True
        self._label = (np.cumsum(present) - 1)[lab]
        self._next = int(present.sum())
        self._keys.add(ids.tobytes())
        self.rows.append(ids)

    def isolated(self) -> np.ndarray:
        """Clients i with e_i in the row space of the released cohorts (their own value is a combination
        of the released sums); kept until the next cohort is added."""
        if self._isolated is None or self._isolated[0] != len(self.rows):
            self._isolated = (len(self.rows), self._leverage_ones())
        return self._isolated[1]

    def _leverage_ones(self) -> np.ndarray:
        if not self.rows:
            return np.zeros(0, dtype=np.int64)
        sizes = np.bincount(self._label, minlength=1)
        single = np.flatnonzero(sizes == 1)
        single = single[single > 0]
        if single.size == 0:
            return np.zeros(0, dtype=np.int64)
        who = np.flatnonzero(np.isin(self._label, single))
        from scipy import sparse

        n = self._label.size
        indptr = np.cumsum([0] + [r.size for r in self.rows])
        A = sparse.csr_matrix((np.ones(indptr[-1]), np.concatenate(self.rows), indptr), shape=(len(self.rows), n))
        G = (A @ A.T).toarray()
        Gp = np.linalg.pinv(G, rcond=1e-10, hermitian=True)
        A = A.tocsc()
        out = []
        for k in range(0, who.size, 65536):  # (rows, candidates) columns, a chunk at a time
            C = A[:, who[k:k + 65536]].toarray()
            out.append(who[k:k + 65536][np.einsum("rk,rk->k", C, Gp @ C) > 1.0 - 1e-6])
        return np.concatenate(out)
