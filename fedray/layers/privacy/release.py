"""The release rule: which unmasked sums a server may hold side by side.

Secure aggregation hides each client inside the sum of its cohort, but two sums of the same
statistics over cohorts that differ by a few clients give those clients away by subtraction
(an evaluation pass over every client minus the last training round over all but one; a
retried round over six clients minus its first attempt over five). The privacy layer keeps
the list of the sums it has released (:class:`ReleaseLog`) and applies, before it unmasks a
new sum over the survivors S:

* **conflict** — a released, un-noised sum over R of a statistic S also carries (same name
  and shape) with 0 < |S Δ R| < ``privacy.min_cohort``;
* **DP covers it** — if the new sum or the released one carries DP noise, the pair is
  released and counted (``dp_covered``);
* **narrowed** — otherwise, when a released cohort R ⊆ S, itself free of conflicts, has at
  least ``min_cohort`` clients, the sum is taken over the largest such R: the other
  survivors are treated as dropped (their pairwise masks are removed with their rebuilt
  keys; their self-masks are never revealed) and count as failed;
* **refused** — otherwise the masked vectors are discarded, never unmasked.

The rule is pairwise: it does not see combinations of three or more sums (the threat
model in docs/reliability.md says what that leaves).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedray.core.calls import Call


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


class ReleaseLog:
    """The sums released so far (kept for the layer's lifetime: what the server has learned stays
    learned, across the runs of a session)."""

    def __init__(self, min_difference: int) -> None:
        self.min_difference = int(min_difference)
        self.released: list[Release] = []
        self._seen: set[Release] = set()

    def conflicts(self, clients: frozenset[int], statistics: frozenset[str]) -> list[Release]:
        """Un-noised released sums whose difference from an un-noised sum over ``clients`` of
        ``statistics`` would be a sum over fewer than ``min_difference`` clients."""
        return [r for r in self.released if not r.noised and r.statistics & statistics
                and 0 < len(r.clients ^ clients) < self.min_difference]

    def narrowest_safe(self, clients: frozenset[int], statistics: frozenset[str]) -> frozenset[int] | None:
        """The largest released cohort inside ``clients`` over which a new sum conflicts with none
        (None when there is none)."""
        best: frozenset[int] | None = None
        for r in self.released:
            R = r.clients
            if (R <= clients and len(R) >= self.min_difference and (best is None or len(R) > len(best))
                    and not self.conflicts(R, statistics)):
                best = R
        return best

    def decide(self, clients: frozenset[int], statistics: frozenset[str], noised: bool
               ) -> tuple[str, frozenset[int] | None, list[Release]]:
        """``("release" | "dp_covered" | "narrowed" | "refused", cohort to unmask, the conflicts)``."""
        hits = [r for r in self.released if r.statistics & statistics
                and 0 < len(r.clients ^ clients) < self.min_difference]
        if not hits:
            return "release", clients, []
        if noised or all(r.noised for r in hits):
            return "dp_covered", clients, hits
        narrowed = self.narrowest_safe(clients, statistics)
        if narrowed is not None:
            return "narrowed", narrowed, hits
        return "refused", None, hits

    def add(self, release: Release) -> None:
        if release not in self._seen:  # the same release reported twice (a run's copy of the layer) counts once
            self._seen.add(release)
            self.released.append(release)


def conflict_message(clients: frozenset[int], hits: list[Release], min_difference: int) -> str:
    """Why a release was refused (one line)."""
    r = next(h for h in hits if not h.noised)
    diff = sorted(r.clients ^ clients)
    return (f"its cohort of {len(clients)} differs from the sum already "
            f"released in {r.kind} round {r.round} (attempt {r.attempt}) by {len(diff)} client(s) {diff[:10]}, "
            f"fewer than privacy.min_cohort={min_difference}: their difference would reveal those clients; use "
            f"federation.fraction=1, more clients, or privacy.dp")
