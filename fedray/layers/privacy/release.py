"""The release rule: which unmasked sums a server may hold side by side.

Secure aggregation hides each client inside the sum of its cohort, but the server keeps every
sum it unmasks and may combine any number of them (least squares over the cohorts): two sums
a client apart give that client away, and so do three or more sums of random cohorts, or the
set-up column sums minus a round's per-cluster sums. The privacy layer keeps the sums it has
released (:class:`ReleaseLog`) as one linear system per quantity
(:class:`~fedray.layers.privacy.span.System`; names that encode the same quantity share a
system, :data:`QUANTITIES`) and applies, before it unmasks a new sum over the survivors S:

* **release** — with S added, every atom (clients in exactly the same released cohorts) of the
  systems of the sum's quantities holds at least ``privacy.min_cohort`` clients: then every
  vector in the row space, i.e. every combination of the released sums whatever its
  coefficients, is a sum over at least ``min_cohort`` clients;
* **DP covers it** — the new sum carries DP noise: it enters no system, and is released and
  counted (``dp_covered``) when it would not pass un-noised;
* **narrowed** — otherwise the sum is taken over the largest cohort R ⊆ S that passes, among
  the whole fixed blocks S holds (``privacy.cohorts: blocks``) and the cohorts released
  before, with at least ``min_cohort`` clients: the other survivors are treated as dropped
  (their pairwise masks are removed with their rebuilt keys; their self-masks are never
  revealed) and count as failed;
* **refused** — otherwise the masked vectors are discarded, never unmasked.

``privacy.release_rule: count`` releases instead of narrowing or refusing, and counts the
clients the sums then single out (``disclosures.differencing``); the summary reports, in both
modes, the clients whose own value the released sums give exactly (``isolated_clients``) and
the atoms under ``min_cohort`` (``small_groups``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.layers.privacy.span import Exposure, System


@dataclass(frozen=True)
class Release:
    """One sum the server unmasked (or one call's per-client statistics without secure aggregation).

    Attributes
    ----------
    kind : str
        The call's kind (``train``, ``evaluate``, ``setup``, ``adhoc``).
    round, attempt : int
        The call's stream round and attempt (as in ``messages.parquet``).
    clients : frozenset of int
        The cohort the sum covers.
    statistics : frozenset of str
        ``name:shape`` of each statistic in the sum (its public layout).
    noised : bool
        DP noise was added to it.
    """

    kind: str
    round: int
    attempt: int
    clients: frozenset[int]
    statistics: frozenset[str]
    noised: bool

    def row(self) -> dict[str, Any]:
        """A plain-data row (for the account, checkpoints and ``summary.json``)."""
        return {"kind": self.kind, "round": self.round, "attempt": self.attempt, "clients": sorted(self.clients),
                "statistics": sorted(self.statistics), "noised": self.noised}

    @staticmethod
    def of_row(row: dict[str, Any]) -> Release:
        return Release(row["kind"], int(row["round"]), int(row["attempt"]), frozenset(row["clients"]),
                       frozenset(row["statistics"]), bool(row["noised"]))


def statistics_of(layout: str) -> frozenset[str]:
    """The ``name:shape`` parts of a public layout (:func:`~fedray.layers.privacy.codec.layout_of`)."""
    return frozenset(p for p in layout.split(";") if p)


def release_of(call: Call, clients: Any, layout: str, noised: bool) -> Release:
    return Release(call.kind.value, call.stream_round, call.attempt, frozenset(int(c) for c in clients),
                   statistics_of(layout), bool(noised))


#: Statistics names that encode one quantity of a client's rows (its sample count and moments):
#: per-cluster ``sums`` add up to the column sums ``s``, ``counts`` to the sample count ``n``, the
#: SSE is ``ss`` minus terms in ``sums`` and ``counts``. Their sums form one linear system; any
#: other name is a system of its own. :func:`link_statistics` adds a plug-in's names.
QUANTITIES: dict[str, str] = {name: "moments" for name in (
    "n", "s", "ss", "sum", "outer", "sums", "counts", "sse", "weighted", "h", "table")}


def link_statistics(*names: str, quantity: str = "moments") -> None:
    """Declare that statistics ``names`` encode ``quantity`` (default: the moments of the rows), so
    the release rule reasons over their sums together with the others of that quantity."""
    for name in names:
        QUANTITIES[str(name)] = str(quantity)


def quantities_of(statistics: frozenset[str]) -> frozenset[str]:
    """The quantities a sum of ``statistics`` (``name:shape`` parts) releases."""
    return frozenset(QUANTITIES.get(n, n) for n in (s.split(":", 1)[0] for s in statistics))


class ReleaseLog:
    """The sums released so far (kept for the layer's lifetime: what the server has learned stays
    learned, across the runs of a session), as one linear :class:`~fedray.layers.privacy.span.System`
    per quantity.

    ``blocks`` (set by the session when ``privacy.cohorts`` is ``blocks``): each client's fixed
    block; a cohort that does not pass is narrowed to the whole blocks it holds.
    """

    def __init__(self, min_difference: int) -> None:
        self.min_difference = int(min_difference)
        self.released: list[Release] = []
        self._seen: set[Release] = set()
        self.systems: dict[str, System] = {}
        self.blocks: np.ndarray | None = None

    def _system(self, quantity: str) -> System:
        if quantity not in self.systems:
            self.systems[quantity] = System(self.min_difference)
        return self.systems[quantity]

    def exposure(self, clients: frozenset[int] | None, statistics: frozenset[str]) -> Exposure:
        """The worst exposure over the quantities of ``statistics`` once a sum over ``clients`` is
        released (None: as things stand)."""
        ids = None if clients is None else System.ids(clients)
        worst = Exposure(0, 0, ())
        for q in sorted(quantities_of(statistics)):
            e = self._system(q).exposure(ids)
            if (e.small_groups, e.clients_in_small_groups) > (worst.small_groups, worst.clients_in_small_groups):
                worst = e
        return worst

    def _candidates(self, clients: frozenset[int]) -> list[frozenset[int]]:
        """Cohorts inside ``clients`` a sum may be narrowed to, largest first: the whole fixed blocks it
        holds, and the cohorts released before."""
        out: set[frozenset[int]] = {r.clients for r in self.released if not r.noised and r.clients <= clients}
        if self.blocks is not None:
            ids = System.ids(clients)
            ids = ids[ids < self.blocks.size]
            b = self.blocks[ids]
            whole = np.bincount(b, minlength=int(self.blocks.max()) + 1) == np.bincount(self.blocks)
            out.add(frozenset(ids[whole[b]].tolist()))
        return sorted((c for c in out if len(c) >= self.min_difference and c != clients), key=len, reverse=True)

    def decide(self, clients: frozenset[int], statistics: frozenset[str], noised: bool
               ) -> tuple[str, frozenset[int] | None, Exposure]:
        """``("release" | "dp_covered" | "narrowed" | "refused", cohort to unmask, the exposure)``.

        An un-noised sum is released when, with it, every atom of each of its quantities' systems
        holds at least ``min_difference`` clients (so no combination of the released sums is
        supported on fewer); a noised one enters no system (``dp_covered`` when it would not pass).
        """
        exposure = self.exposure(clients, statistics)
        if exposure.safe:
            return "release", clients, exposure
        if noised:
            return "dp_covered", clients, exposure
        for cohort in self._candidates(clients):
            if self.exposure(cohort, statistics).safe:
                return "narrowed", cohort, exposure
        return "refused", None, exposure

    def add(self, release: Release) -> None:
        if release not in self._seen:  # the same release reported twice (a run's copy of the layer) counts once
            self._seen.add(release)
            self.released.append(release)
            if not release.noised:
                ids = System.ids(release.clients)
                for q in quantities_of(release.statistics):
                    self._system(q).add(ids)

    def isolation(self) -> dict[str, int]:
        """How many clients the released sums isolate (their own value is a combination of the sums,
        in some quantity), and how many atoms of fewer than ``min_difference`` clients they leave."""
        isolated: set[int] = set()
        small = 0
        for sys in self.systems.values():
            isolated.update(sys.isolated().tolist())
            small += sys.exposure().small_groups
        return {"isolated_clients": len(isolated), "small_groups": small}


def conflict_message(clients: frozenset[int], exposure: Exposure, released: list[Release], min_difference: int
                     ) -> str:
    """Why a release was refused (one line)."""
    last = next((r for r in reversed(released) if not r.noised), None)
    where = "" if last is None else f" in {last.kind} round {last.round} (attempt {last.attempt})"
    group = list(exposure.smallest)
    return (f"its cohort of {len(clients)} differs from the sum already released{where} and the others so that a "
            f"combination of them would single out {len(group)} client(s) {group[:10]}, fewer than "
            f"privacy.min_cohort={min_difference}; use privacy.dp (noised sums), privacy.cohorts='blocks' (cohorts "
            f"made of fixed blocks of min_cohort clients), federation.fraction=1, or privacy.release_rule='count' "
            f"(release and count the clients exposed)")
