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

from fedray.core.contract import Task
from fedray.runtime.tasks import split_tasks


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
        self._dead: set[int] = set()  # actors Ray will not restart again (runtime.max_restarts exhausted)
        # actor index -> (stream round, object ref) of a task that missed its deadline and may still run
        self._late: dict[int, tuple[int, Any]] = {}

    def __len__(self) -> int:
        return len(self.actors)

    def alive(self) -> list[int]:
        """Indices of the actors that are not dead."""
        return [i for i in range(len(self.actors)) if i not in self._dead]

    def quiet(self) -> bool:
        """No actor is dead and none may still run a late task (a chain over every host may start)."""
        return not self._dead and not self._late

    # --- placing a call's tasks -------------------------------------------------------------
    def split(self, tasks: dict[int, Task], which: dict[int, int]) -> tuple[dict[int, Any], bool]:
        """Each actor's items (client-id order) and whether they are all one
        :class:`~fedray.runtime.tasks.UniformTasks` in client order (:func:`~fedray.runtime.tasks.split_tasks`)."""
        return split_tasks(tasks, which, self.owner)

    def by_actor(self, client_ids: Any) -> dict[int, list[int]]:
        """``client_ids`` grouped by the actor hosting them."""
        out: dict[int, list[int]] = defaultdict(list)
        for cid in client_ids:
            out[int(self.owner[cid])].append(cid)
        return out

    # --- dead actors ----------------------------------------------------------------------------
    def take_dead(self, per_actor: dict[int, Any]) -> dict[int, Any]:
        """Take the dead actors' items out of ``per_actor`` (actor index -> items) and return them."""
        return {a: per_actor.pop(a) for a in self._dead.intersection(per_actor)} if self._dead else {}

    def mark_dead(self, actors: set[int]) -> None:
        """Actors ``actors`` are dead for good: their clients fail from now on."""
        self._dead |= set(actors)

    # --- submitting ---------------------------------------------------------------------------
    def submit(self, fn: Callable[[Any, Any], Any], values: dict[int, Any]) -> dict[Any, int]:
        """``fn(actor, value)`` for each actor index -> value; returns each returned reference -> actor index."""
        return {fn(self.actors[a], v): a for a, v in values.items()}

    # --- late tasks ---------------------------------------------------------------------------
    def busy(self) -> set[int]:
        """The actors still running a late task of an earlier round (finished ones are forgotten first)."""
        self._forget_finished()
        return set(self._late)

    def _forget_finished(self) -> None:
        if not self._late:
            return
        import ray

        done, _ = ray.wait([r for _, r in self._late.values()], num_returns=len(self._late), timeout=0)
        done_ids = {id(r) for r in done}
        self._late = {a: v for a, v in self._late.items() if id(v[1]) not in done_ids}

    def mark_late(self, actor: int, round_: int, ref: Any) -> None:
        """Actor ``actor`` is still running ``ref`` (of stream round ``round_``) past its deadline."""
        self._late[actor] = (round_, ref)

    def clear(self) -> None:
        self.actors, self._late, self._dead = [], {}, set()
