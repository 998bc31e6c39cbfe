"""The run's client actors as a pool: who hosts which client, which actors are dead, which still run a
late task.

Shaped like Ray's ``ActorPool``: a small class that never knows what the actors' methods are (the
caller hands in ``fn(actor, value)``), with its private state commented. Unlike ``ActorPool`` it
keeps tasks that missed their deadline tracked across rounds (Ray cannot stop a running actor task,
so an actor stays busy with one after its round has moved on): lateness they cause in later rounds
is counted as spill-over, not as new stragglers.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from fedray.core.contract import CohortTasks, Task, one_task
from fedray.runtime.tasks import UniformTasks


class ClientPool:
    """Client actors and the clients each hosts.

    Parameters
    ----------
    actors : list of actor handles
    owner : ndarray of int
        Client id -> index of the actor that hosts it (-1: none). Actors host consecutive client ids.
    """

    def __init__(self, actors: list[Any], owner: np.ndarray) -> None:
        self.actors = actors
        self.owner = owner
        self.dead: set[int] = set()  # actors Ray will not restart again (runtime.max_restarts exhausted)
        # actor index -> (stream round, object ref) of a task that missed its deadline and may still run
        self.late: dict[int, tuple[int, Any]] = {}

    def __len__(self) -> int:
        return len(self.actors)

    def alive(self) -> list[int]:
        """Indices of the actors that are not dead."""
        return [i for i in range(len(self.actors)) if i not in self.dead]

    # --- placing a call's tasks -------------------------------------------------------------
    def split(self, tasks: dict[int, Task], which: dict[int, int]) -> dict[int, Any]:
        """Each actor's items (client-id order): one :class:`~fedray.runtime.tasks.UniformTasks` where all
        of them run one task, else a list of (client id, task, shared index)."""
        first = one_task(tasks)
        if first is not None and len(tasks) > 1:
            arr = tasks.ids if isinstance(tasks, CohortTasks) else np.asarray(sorted(tasks), dtype=np.int64)
            owners = self.owner[arr]
            cuts = np.flatnonzero(np.diff(owners)) + 1 if np.all(np.diff(owners) >= 0) else None
            if cuts is not None:  # actors own consecutive client ids: one slice each
                sidx = which[int(arr[0])]
                return {int(owners[part[0]]): UniformTasks(arr[part], first, sidx)
                        for part in np.split(np.arange(len(arr)), cuts)}
        per_actor: dict[int, Any] = defaultdict(list)
        owner = self.owner
        for cid in sorted(tasks):
            per_actor[int(owner[cid])].append((cid, tasks[cid], which[cid]))
        return per_actor

    def by_actor(self, client_ids: Any) -> dict[int, list[int]]:
        """``client_ids`` grouped by the actor hosting them."""
        out: dict[int, list[int]] = defaultdict(list)
        for cid in client_ids:
            out[int(self.owner[cid])].append(cid)
        return out

    # --- submitting ---------------------------------------------------------------------------
    def submit(self, fn: Callable[[Any, Any], Any], values: dict[int, Any]) -> dict[Any, int]:
        """``fn(actor, value)`` for each actor index -> value; returns each returned reference -> actor index."""
        return {fn(self.actors[a], v): a for a, v in values.items()}

    # --- late tasks ---------------------------------------------------------------------------
    def forget_finished(self) -> None:
        """Forget late tasks that have finished meanwhile."""
        if not self.late:
            return
        import ray

        done, _ = ray.wait([r for _, r in self.late.values()], num_returns=len(self.late), timeout=0)
        done_ids = {id(r) for r in done}
        self.late = {a: v for a, v in self.late.items() if id(v[1]) not in done_ids}

    def mark_late(self, actor: int, round_: int, ref: Any) -> None:
        """Actor ``actor`` is still running ``ref`` (of stream round ``round_``) past its deadline."""
        self.late[actor] = (round_, ref)

    def clear(self) -> None:
        self.actors, self.late, self.dead = [], {}, set()
