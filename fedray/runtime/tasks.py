"""What a host is asked to run, how a call's tasks are planned for the hosts, and the batches a host
makes of them.

A call's tasks (``{client id: Task}``) reach the hosts planned by :func:`plan_shared` (the distinct
shared objects, sent once each, and each client's index into them) and :func:`split_tasks` (each
host's items). A host's tasks come in one of two forms: a list of ``(client_id, task, shared_index)`` items,
or :class:`UniformTasks` (one task and one shared object for many clients, with nothing per
client). :func:`task_batches` turns either into the clients that run their plain function one
by one and the :class:`Batch` es that run a batched form
(:func:`fedray.core.contract.batched`) in one call each, so that the host handles both forms
alike. A batch names its shared object by :class:`OneShared` (one object for all its clients)
or :class:`EachShared` (each client's own, for a form declared with ``shared="each"``).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from fedray.core.contract import CohortTasks, Task, batched_form, batched_shared, one_task

Item = tuple[int, Task, int]


class UniformTasks:
    """One task (and one shared object) for many clients of a host: the compact form of
    ``[(client_id, task, shared_index), ...]`` when every item has the same task, so that
    neither the server nor the host handles one tuple per client.

    Iterating gives the ``(client_id, task, shared_index)`` items (client-id order).
    """

    __slots__ = ("ids", "task", "shared_index")

    def __init__(self, ids: np.ndarray, task: Task, shared_index: int) -> None:
        self.ids, self.task, self.shared_index = np.asarray(ids, dtype=np.int64), task, int(shared_index)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[Item]:
        task, sidx = self.task, self.shared_index
        return ((cid, task, sidx) for cid in self.ids.tolist())

    def __getitem__(self, part: slice) -> UniformTasks:
        """The items of ``part`` (a slice), as a list of items would give them."""
        return UniformTasks(self.ids[part], self.task, self.shared_index)

    def client_ids(self) -> list[int]:
        return self.ids.tolist()

    def batches(self) -> tuple[list[Item], list[Batch]]:
        """:func:`task_batches` of this form: one batch of every client (nothing per client), or every
        item alone when the task's function has no batched form."""
        fn = self.task.fn
        if not len(self) or batched_form(fn) is None:
            return list(self), []
        n, sidx = len(self), self.shared_index
        which: OneShared | EachShared = EachShared([sidx] * n) if batched_shared(fn) == "each" else OneShared(sidx)
        return [], [Batch(fn, self.ids, [self.task.payload] * n, which, self.task.evaluation, self)]


def plan_shared(tasks: Mapping[int, Task]) -> tuple[list[Any], dict[int, int]]:
    """Distinct shared objects (by identity) and, per client, the index of its one (-1: none)."""
    shared: list[Any] = []
    index_of: dict[int, int] = {}
    which: dict[int, int] = {}
    first = one_task(tasks)
    if first is not None:  # one task for every client: one index for all (no entry per client)
        if first.shared is None:
            return shared, _Everyone(-1)
        return [first.shared], _Everyone(0)
    for cid, task in tasks.items():
        if task.shared is None:
            which[cid] = -1
            continue
        key = id(task.shared)
        if key not in index_of:
            index_of[key] = len(shared)
            shared.append(task.shared)
        which[cid] = index_of[key]
    return shared, which


class _Everyone(dict):
    """``which`` of :func:`plan_shared` when every client has the same shared index."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def __missing__(self, cid: int) -> int:
        return self.index


def split_tasks(tasks: Mapping[int, Task], which: dict[int, int], owner: np.ndarray | None = None
                ) -> tuple[dict[int, Any], bool]:
    """Each host's items, in client-id order, and whether they are all :class:`UniformTasks`.

    Where every client runs one task and the hosts own consecutive client ids, a host's items are one
    :class:`UniformTasks` (nothing per client) and host order is client order (what a chain of hosts
    adding a summed call's replies needs); otherwise a list of ``(client id, task, shared index)``.

    Parameters
    ----------
    tasks : mapping client id -> Task
    which : mapping client id -> shared index (:func:`plan_shared`)
    owner : ndarray of int, optional
        Client id -> index of the host that holds it; None: one host, index 0.
    """
    first = one_task(tasks)
    if first is not None and len(tasks) > 1:
        # a CohortTasks holds its ids as an array already, in order (no sort of a million Python ints)
        ids = tasks.ids if isinstance(tasks, CohortTasks) else np.asarray(sorted(tasks), dtype=np.int64)
        sidx = which[int(ids[0])]
        if owner is None:
            return {0: UniformTasks(ids, first, sidx)}, True
        owners = owner[ids]
        steps = np.diff(owners)
        if np.all(steps >= 0):  # hosts own consecutive client ids: one slice each
            cuts = np.flatnonzero(steps) + 1
            return {int(owners[part[0]]): UniformTasks(ids[part], first, sidx)
                    for part in np.split(np.arange(len(ids)), cuts)}, True
    per_host: dict[int, Any] = defaultdict(list)
    for cid in sorted(tasks):
        per_host[0 if owner is None else int(owner[cid])].append((cid, tasks[cid], which[cid]))
    return per_host, False


def task_items(tasks: Any) -> list[Item]:
    """``[(client_id, task, shared_index)]`` from a list of them or :class:`UniformTasks`."""
    return list(tasks)


class OneShared:
    """The shared object of every client of a batch: ``shared[index]`` (None for index -1)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def part(self, part: slice) -> OneShared:
        return self

    def pick(self, shared: tuple[Any, ...]) -> Any:
        return shared[self.index] if self.index >= 0 else None


class EachShared:
    """Each client's own shared object (a batched form declared with ``shared="each"`` receives the
    list): ``shared[i]`` for each of ``indices`` (None for -1)."""

    __slots__ = ("indices",)

    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def part(self, part: slice) -> EachShared:
        return EachShared(self.indices[part])

    def pick(self, shared: tuple[Any, ...]) -> list[Any]:
        return [shared[i] if i >= 0 else None for i in self.indices]


class Batch:
    """Clients of one host that run one batched form in one call (client-id order).

    Attributes
    ----------
    fn : callable
        The plain client function (its batched form runs; it runs client by client if that fails).
    ids : ndarray of int, shape (n_clients,)
    payloads : list, one per client
    shared : OneShared or EachShared
    evaluation : bool
    items : list of items or UniformTasks
        The batch's tasks in the form they came in, for running them one by one.
    """

    __slots__ = ("fn", "ids", "payloads", "shared", "evaluation", "items")

    def __init__(self, fn: Any, ids: np.ndarray, payloads: list[Any], shared: OneShared | EachShared,
                 evaluation: bool, items: Any) -> None:
        self.fn, self.ids, self.payloads, self.shared, self.evaluation, self.items = (fn, ids, payloads, shared,
                                                                                      evaluation, items)

    def __len__(self) -> int:
        return len(self.ids)

    def part(self, part: slice) -> Batch:
        """The clients of ``part`` (a slice) as a batch of their own."""
        return Batch(self.fn, self.ids[part], self.payloads[part], self.shared.part(part), self.evaluation,
                     self.items[part])


def _group(tasks: list[Item]) -> tuple[list[Item], list[Batch]]:
    """:func:`task_batches` of a list of items: one batch per (function, shared object, evaluation)."""
    groups: dict[tuple[Any, int, bool], list[Item]] = {}
    single: list[Item] = []
    forms: dict[Any, Any] = {}  # function -> its batched form (looked up once per function)
    each: set[Any] = set()  # functions whose batched form takes each client's shared object
    for item in tasks:
        fn = item[1].fn
        if fn not in forms:
            forms[fn] = batched_form(fn)
            if batched_shared(fn) == "each":
                each.add(fn)
        if forms[fn] is None:
            single.append(item)
        else:
            # shared="each": one call for every shared object (the key's -1 is never an index)
            groups.setdefault((fn, -1 if fn in each else item[2], item[1].evaluation), []).append(item)
    batches = []
    for (fn, sidx, evaluation), items in groups.items():
        # A group of one is a batch too: which clients share a host differs between runtimes, and a
        # client must run the same code (the same float rounding) in all of them.
        which = EachShared([item[2] for item in items]) if fn in each else OneShared(sidx)
        batches.append(Batch(fn, np.array([item[0] for item in items], dtype=np.int64),
                             [item[1].payload for item in items], which, evaluation, items))
    return single, batches


def task_batches(tasks: Any) -> tuple[list[Item], list[Batch]]:
    """The items of ``tasks`` (a list of items or :class:`UniformTasks`) whose function has no batched
    form, to run one by one, and the :class:`Batch` es of the others."""
    if isinstance(tasks, UniformTasks):
        return tasks.batches()
    return _group(task_items(tasks))
