"""What the Ray executor and its client actors say to each other: one task type, one reply type,
one failure type.

* :class:`HostTask` — run these clients' tasks for one call (``keep``: the first half of a summed
  call, the replies stay in the host). The call's shared objects travel beside it as the actor
  method's other arguments, so that Ray resolves them from the object store.
* :class:`HostReply` — the clients' replies (``parts``), or, for a summed call whose replies the host
  kept, their one-value statistics as columns (``kept``, a :class:`KeptSum`).
* :class:`HostFailure` — the host ran nothing: a restarted incarnation not set up again, or (made by
  the executor) an actor that Ray reports failed. Every client of the task fails with its ``reason``.

An answer says which of the two it is by ``ok`` (True for a reply), so that a reader branches on it
rather than on the type.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np


@dataclass(frozen=True)
class HostTask:
    """One call's work for one client actor.

    Parameters
    ----------
    round : int
        The integer the clients key their random streams by (:attr:`fedray.core.calls.Call.stream_round`).
    items : UniformTasks or list of (client id, Task, shared index)
        The actor's clients and their tasks, in client-id order (:mod:`fedray.runtime.clients`).
    keep : bool
        A summed call's first half: keep the replies for :meth:`~fedray.runtime.host.ClientHost.fold_kept`.
    """

    round: int
    items: Any
    keep: bool = False

    def client_ids(self) -> list[int]:
        """The task's clients, in order."""
        return [int(cid) for cid, _, _ in self.items]


class KeptSum(NamedTuple):
    """A summed call's replies that a host keeps: who answered and, as columns (one row per client),
    the statistics of one value a client; ``names`` are every statistic's names in order (those of
    two or more values a client are added up by the hosts' chain of ``fold_kept`` calls)."""

    client_ids: np.ndarray
    seconds: np.ndarray
    nbytes: np.ndarray
    columns: dict[str, np.ndarray]
    names: list[str]


@dataclass(frozen=True)
class HostReply:
    """A host's answer to a :class:`HostTask`.

    ``parts``: the replies, per client (:class:`~fedray.runtime.clients.Outcome`) or column-wise
    (:class:`~fedray.runtime.clients.PackedOutcomes`), some maybe stored in the object store as they
    were computed (references the executor fetches). ``kept``: set instead when the host kept a summed
    call's replies (``parts`` is then empty).
    """

    parts: list[Any] = field(default_factory=list)
    kept: KeptSum | None = None
    ok: ClassVar[bool] = True


@dataclass(frozen=True)
class HostFailure:
    """A host that did not run a task, and why (one line, given to each of its clients as their error).

    ``restarted``: Ray restarted the actor and the executor has not set it up again yet (its shards
    are rebuilt from their recipes, its clients' state is lost); the executor sets it up and the next
    call reaches it again.
    """

    reason: str
    restarted: bool = False
    ok: ClassVar[bool] = False
