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

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.layers.privacy.journal import Journal
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
        DP noise strong enough to count was added to it (see :func:`~fedray.layers.privacy.dp.weak_noise`).
    run : str
        The run that released it ("" outside runs): a resumed run keeps its first run's name.
    """

    kind: str
    round: int
    attempt: int
    clients: frozenset[int]
    statistics: frozenset[str]
    noised: bool
    run: str = ""

    def row(self) -> dict[str, Any]:
        """A plain-data row (for the account, checkpoints, ``summary.json`` and the journal)."""
        return {"kind": self.kind, "round": self.round, "attempt": self.attempt, "clients": sorted(self.clients),
                "statistics": sorted(self.statistics), "noised": self.noised, "run": self.run}

    @staticmethod
    def of_row(row: dict[str, Any]) -> Release:
        return Release(str(row["kind"]), int(row["round"]), int(row["attempt"]),
                       frozenset(int(c) for c in row["clients"]), frozenset(row["statistics"]), bool(row["noised"]),
                       str(row.get("run") or ""))


def statistics_of(layout: str) -> frozenset[str]:
    """The ``name:shape`` parts of a public layout (:func:`~fedray.layers.privacy.codec.layout_of`)."""
    return frozenset(p for p in layout.split(";") if p)


def release_of(call: Call, clients: Any, layout: str, noised: bool, run: str = "") -> Release:
    return Release(call.kind.value, call.stream_round, call.attempt, frozenset(int(c) for c in clients),
                   statistics_of(layout), bool(noised), run)


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
    """The sums released so far, as one linear :class:`~fedray.layers.privacy.span.System` per quantity.

    One log serves a federation for the life of the process (:func:`shared_log`:
    every session, run, sweep and K selection over the same clients), and a run that has a release-log folder
    keeps it on disk too (:attr:`journal`, see :mod:`fedray.layers.privacy.journal`): what a server has
    learned stays learned.

    ``blocks``: each client's fixed block (``privacy.cohorts: blocks``), the default of :meth:`decide`'s.
    ``first``: the first cohort released for each (run, kind, round, attempt) of a run with a name, so that
    a resumed run releases a round again only over the cohort it had the first time.
    """

    def __init__(self, min_difference: int) -> None:
        self.min_difference = int(min_difference)
        self.released: list[Release] = []
        self._seen: set[Release] = set()
        self.systems: dict[str, System] = {}
        self.blocks: np.ndarray | None = None
        self.first: dict[tuple[str, str, int, int], frozenset[int]] = {}
        self.journal: Journal | None = None
        self._fd: int | None = None  # the journal, open and locked, inside held()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fd": None}

    def _system(self, quantity: str) -> System:
        if quantity not in self.systems:
            self.systems[quantity] = System(self.min_difference)
        return self.systems[quantity]

    # --- the journal on disk ------------------------------------------------------------
    def attach(self, journal: Journal | None) -> int:
        """Keep this log in ``journal`` from now on (None: in this process only): read what it holds, and
        write into it the releases this process knew that it lacks. Returns how many were read."""
        self.journal = journal
        if journal is None:
            return 0
        journal.offset = 0
        with journal.locked() as fd:
            rows = journal.read_new(fd)
            on_disk = {Release.of_row(r) for r in rows}
            for r in on_disk:
                self._add(r)
            journal.append(fd, [r.row() for r in self.released if r not in on_disk])
        return len(on_disk)

    @contextmanager
    def held(self) -> Iterator[None]:
        """The journal (if any) locked, and what other processes appended to it read in, until the block
        ends: a decision and the record of its release are one step for every process sharing it."""
        if self.journal is None or self._fd is not None:
            yield
            return
        with self.journal.locked() as fd:
            self._fd = fd
            try:
                for row in self.journal.read_new(fd):
                    self._add(Release.of_row(row))
                yield
            finally:
                self._fd = None

    # --- the rule -------------------------------------------------------------------------
    def exposure(self, clients: frozenset[int] | None, statistics: frozenset[str], min_cohort: int | None = None
                 ) -> Exposure:
        """The worst exposure over the quantities of ``statistics`` once a sum over ``clients`` is
        released (None: as things stand), against groups of ``min_cohort`` (default: the log's)."""
        ids = None if clients is None else System.ids(clients)
        worst = Exposure(0, 0, ())
        for q in sorted(quantities_of(statistics)):
            e = self._system(q).exposure(ids, min_cohort)
            if (e.small_groups, e.clients_in_small_groups) > (worst.small_groups, worst.clients_in_small_groups):
                worst = e
        return worst

    def _candidates(self, clients: frozenset[int], k: int) -> list[frozenset[int]]:
        """Cohorts inside ``clients`` a sum may be narrowed to, largest first: the cohorts released before."""
        out = {r.clients for r in self.released if not r.noised and r.clients <= clients}
        return sorted((c for c in out if len(c) >= k and c != clients), key=len, reverse=True)

    @staticmethod
    def whole_blocks(clients: frozenset[int], blocks: np.ndarray) -> frozenset[int]:
        """The clients of ``clients`` whose whole block is in ``clients``."""
        ids = System.ids(clients)
        inside = ids[ids < blocks.size]
        b = blocks[inside]
        whole = np.bincount(b, minlength=int(blocks.max()) + 1) == np.bincount(blocks)
        return frozenset(inside[whole[b]].tolist()) | frozenset(ids[ids >= blocks.size].tolist())

    def decide(self, clients: frozenset[int], statistics: frozenset[str], noised: bool, *,
               blocks: np.ndarray | None = None, min_cohort: int | None = None,
               key: tuple[str, str, int, int] | None = None) -> tuple[str, frozenset[int] | None, Exposure]:
        """``("release" | "dp_covered" | "narrowed" | "refused", cohort to unmask, the exposure)``.

        * a call released before (``key``: run, kind, round, attempt) is released again only over its
          first cohort, when every client of it answered;
        * under fixed ``blocks`` an un-noised sum is always narrowed to the whole blocks that answered;
        * an un-noised sum is released when, with it, every atom of each of its quantities' systems holds
          at least ``min_cohort`` clients (so no combination of the released sums is supported on fewer);
          a noised one enters no system (``dp_covered`` when it would not pass);
        * otherwise it is narrowed to the largest cohort released before that it holds and that passes,
          or refused.
        """
        k = self.min_difference if min_cohort is None else int(min_cohort)
        blocks = self.blocks if blocks is None else blocks
        exposure = self.exposure(clients, statistics, k)
        first = self.first.get(key) if key is not None and not noised else None
        if first is not None and first <= clients:
            return ("release" if first == clients else "narrowed"), first, exposure
        if blocks is not None and not noised:
            whole = self.whole_blocks(clients, blocks)
            if whole != clients:
                if len(whole) < k:  # a sum over the whole blocks that answered would be a sum over too few
                    return "refused", None, Exposure(1, len(whole), tuple(sorted(whole)))
                narrowed = self.exposure(whole, statistics, k)
                return ("narrowed", whole, exposure) if narrowed.safe else ("refused", None, narrowed)
        if exposure.safe:
            return "release", clients, exposure
        if noised:
            return "dp_covered", clients, exposure
        for cohort in self._candidates(clients, k):
            if self.exposure(cohort, statistics, k).safe:
                return "narrowed", cohort, exposure
        return "refused", None, exposure

    def _add(self, release: Release) -> bool:
        if release in self._seen:  # the same release reported twice (a run's copy of the layer) counts once
            return False
        self._seen.add(release)
        self.released.append(release)
        if release.run:
            self.first.setdefault((release.run, release.kind, release.round, release.attempt), release.clients)
        if not release.noised:
            ids = System.ids(release.clients)
            for q in quantities_of(release.statistics):
                self._system(q).add(ids)
        return True

    def add(self, release: Release) -> None:
        """Record ``release`` and append it to the journal, if any (once: a release the journal holds
        already, e.g. appended by a server actor's copy of this log, is not written again)."""
        if self.journal is None or self._fd is not None:
            if self._add(release) and self.journal is not None and self._fd is not None:
                self.journal.append(self._fd, [release.row()])
            return
        with self.held():
            self.add(release)

    def isolation(self) -> dict[str, int]:
        """How many clients the released sums isolate (their own value is a combination of the sums,
        in some quantity), and how many atoms of fewer than ``min_difference`` clients they leave."""
        isolated: set[int] = set()
        small = 0
        for sys in self.systems.values():
            isolated.update(sys.isolated().tolist())
            small += sys.exposure().small_groups
        return {"isolated_clients": len(isolated), "small_groups": small}


#: Release logs of this process, by federation fingerprint (see :func:`shared_log`).
_LOGS: dict[str, ReleaseLog] = {}


def shared_log(fingerprint: str, min_cohort: int) -> ReleaseLog:
    """The release log of federation ``fingerprint`` in this process (made on first use)."""
    if fingerprint not in _LOGS:
        _LOGS[fingerprint] = ReleaseLog(min_cohort)
    return _LOGS[fingerprint]


def forget_releases() -> None:
    """Drop every release log of this process (the on-disk journals stay). For tests that need a
    server that has seen nothing; a real deployment never calls it."""
    _LOGS.clear()


def conflict_message(clients: frozenset[int], exposure: Exposure, released: list[Release], min_difference: int
                     ) -> str:
    """Why a release was refused (one clause: what the sum would single out)."""
    last = next((r for r in reversed(released) if not r.noised), None)
    where = "" if last is None else f" (the last in {last.kind} round {last.round}, attempt {last.attempt})"
    group = list(exposure.smallest)
    return (f"with it, a combination of the sums released so far{where} would single out "
            f"{exposure.clients_in_small_groups} client(s) (e.g. {group[:10]}) in groups of fewer than "
            f"privacy.min_cohort={min_difference}")


def refusal_fixes(blocks: bool) -> str:
    """The settings that let such a run go on (one clause); ``blocks``: cohorts are whole blocks already."""
    fixes = [] if blocks else [
        "privacy.cohorts='blocks' (rounds sample whole fixed blocks of clients)"]
    fixes += ["privacy.dp (noised sums)", "federation.fraction=1",
              "privacy.release_rule='count' (release, and count the clients exposed)"]
    return "fixes: " + ", ".join(fixes[:-1]) + " or " + fixes[-1]
