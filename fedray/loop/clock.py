"""The simulated clock of a deployment: data the round loop consults, never a loop of its own.

A :class:`Clock` holds each client's device (compute speed, up and down bandwidth), when it is
online (:class:`fedray.data.deployment.Availability`), and a round's deadline. The round loop
(:class:`fedray.loop.server.Server`) asks it three things:

1. who can be sampled at the current simulated time (only online clients; when nobody is online the
   clock waits until someone is);
2. each answering client's simulated time in a training call::

       t_c = n_c * epochs * flops_per_sample / speed_c + bytes_down_c / down_c + bytes_up_c / up_c

   where ``n_c`` is the client's samples, ``epochs`` the algorithm's local epochs (its ``epochs``
   parameter, else 1) and ``flops_per_sample`` the configured cost, else 6 times the values the client
   receives (a forward and backward pass over a model of that size); the bytes are the task's and the
   reply's as the message log counts them;
3. which clients are late: ``t_c`` past the deadline, or past the end of the client's online spell.
   They leave the round through the same path as injected stragglers (``clients_late``, one row each
   in ``failures.parquet``). The loop keeps them as arrays (:class:`LateSet`: ids and a code each into
   :meth:`Clock.reasons`), and the failures log takes them as columns, never one record per client.

A round lasts until its last kept client finished, or its deadline when someone was late (plus any
wait for a client to come online). Nothing here reads the real clock: the same seed gives the same
simulated times on any machine.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedray.core.contract import CohortTasks, Task, one_task
from fedray.core.replies import Replies
from fedray.core.seeding import SAMPLING_STREAM, n_sampled, sample_clients, server_rng
from fedray.core.sizes import nbytes_of
from fedray.data.deployment import Availability, Devices, every_client

#: FLOPs a sample costs per value of the model, when ``federation.devices.flops_per_sample`` is unset.
FLOPS_PER_VALUE = 6.0


@dataclass(frozen=True)
class Clock:
    """What the round loop consults to time a deployment (see the module docstring).

    Parameters
    ----------
    n_samples : ndarray (n_clients,)
    devices : Devices or None
        None: clients take no simulated time (availability and sampling only).
    availability : Availability or None
        None: every client is always online.
    deadline : float or None
        Simulated seconds a round waits for its clients.
    flops_per_sample : float or None
    epochs : int
    """

    n_samples: np.ndarray = field(compare=False)
    devices: Devices | None = field(default=None, compare=False)
    availability: Availability | None = field(default=None, compare=False)
    deadline: float | None = None
    flops_per_sample: float | None = None
    epochs: int = 1
    _memo: dict = field(default_factory=dict, compare=False, repr=False)  # see :meth:`times`

    # --- 1. sampling ------------------------------------------------------------------
    def sample(self, seed: int, round_: int, fraction: float, now: float) -> tuple[np.ndarray, float]:
        """The cohort of ``round_`` at simulated time ``now`` and the seconds waited for a client to be
        online: ``max(1, floor(fraction * n_clients))`` clients, at most the online ones, drawn from them
        with the server's sampling stream. Raises ValueError when no client is ever online again."""
        av = self.availability
        n = len(self.n_samples)
        if av is None or av.kind == "always":
            return sample_clients(seed, round_, n, fraction), 0.0
        start = av.next_online(now)
        if start is None:
            raise ValueError(f"no client is online at or after simulated time {now:g} s")
        ids = np.flatnonzero(av.online(start))
        m = min(n_sampled(fraction, n), len(ids))
        if m < len(ids):
            ids = np.sort(server_rng(seed, round_, SAMPLING_STREAM).choice(ids, size=m, replace=False))
        return ids, start - now

    def online_at(self, t: float) -> np.ndarray | None:
        """Bool (n_clients,): who is online at ``t``; None when everyone always is."""
        av = self.availability
        return None if av is None or av.kind == "always" else av.online(t)

    @staticmethod
    def only_online(tasks: Any, online: np.ndarray) -> Any:
        """``tasks`` less the training tasks of offline clients (an algorithm may give tasks beyond the cohort,
        e.g. a one-shot phase asking every client; evaluation tasks measure the model and are kept)."""
        one = one_task(tasks)
        if one is not None:
            ids = tasks.ids if isinstance(tasks, CohortTasks) else np.fromiter(tasks, dtype=np.int64)
            return tasks if one.evaluation or online[ids].all() else CohortTasks(ids[online[ids]], one)
        return {c: t for c, t in tasks.items() if t.evaluation or online[c]}

    # --- 2. and 3. timing ---------------------------------------------------------------
    def times(self, tasks: dict[int, Task], ids: np.ndarray, bytes_up: np.ndarray) -> np.ndarray:
        """Simulated seconds of clients ``ids`` (answered, in order) that sent ``bytes_up``."""
        if self.devices is None:
            return np.zeros(len(ids))
        d, n = self.devices, len(self.n_samples)
        up = np.asarray(bytes_up, dtype=np.float64)
        one = one_task(tasks)
        if one is not None and every_client(ids, n):
            # every client, in order (full participation), one task: each client's compute and download
            # seconds depend only on the task's bytes, the same from round to round; kept (the same bits)
            down1 = float(_task_bytes(one))
            cost = self.flops_per_sample if self.flops_per_sample is not None else FLOPS_PER_VALUE * down1 / 8.0
            memo = self._memo
            if memo.get("key") != (cost, down1):
                memo["key"] = (cost, down1)
                memo["base"] = self.n_samples * float(self.epochs) * cost / d.speed + down1 / d.down
            return memo["base"] + up / d.up
        down = _bytes_down_each(tasks, ids)
        cost = self.flops_per_sample if self.flops_per_sample is not None else FLOPS_PER_VALUE * down / 8.0
        work = self.n_samples[ids] * float(self.epochs) * cost
        return work / d.speed[ids] + down / d.down[ids] + up / d.up[ids]

    def reasons(self) -> tuple[str, str]:
        """Why a client is late, by code (:meth:`late`): 0 past the deadline, 1 gone offline."""
        deadline = f"{self.deadline:g}" if self.deadline is not None else "none"
        return (f"not finished by federation.deadline={deadline} s (simulated)",
                "went offline before it finished (federation.availability)")

    def late(self, ids: np.ndarray, t: np.ndarray, start: float) -> tuple[np.ndarray, np.ndarray]:
        """Which of clients ``ids`` with simulated times ``t`` (a round started at ``start``) are late (bool
        per client), and why: a code per late client into :meth:`reasons`."""
        late = np.zeros(len(ids), dtype=bool)
        why = np.zeros(len(ids), dtype=np.int32)
        if self.deadline is not None:
            late |= t > self.deadline  # code 0
        if self.availability is not None and self.availability.kind != "always" and len(ids):
            until = self.availability.online_until(ids, start)
            gone = ~late & (start + t > until)
            late |= gone
            why[gone] = 1
        return late, why[late]

    def round_seconds(self, kept: np.ndarray, any_late: bool) -> float:
        """A round's simulated duration (without waiting): its deadline when someone was late, else the
        slowest kept client's time."""
        if any_late and self.deadline is not None:
            return float(self.deadline)
        return float(kept.max()) if len(kept) else 0.0


class LateSet:
    """The clients the clock made late in the current round: their ids (sorted) and a code each into
    :meth:`Clock.reasons`. Kept as arrays: a deadline may make many thousands late a round."""

    __slots__ = ("ids", "codes")

    def __init__(self) -> None:
        self.ids = np.zeros(0, dtype=np.int64)
        self.codes = np.zeros(0, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: np.ndarray, codes: np.ndarray) -> None:
        """Clients ``ids`` are late for ``codes``; one late before in this round (a retry) takes its new code."""
        ids, codes = np.asarray(ids, dtype=np.int64), np.asarray(codes, dtype=np.int32)
        if not len(self.ids) and (ids.size < 2 or np.all(ids[1:] > ids[:-1])):  # the round's first, in order
            self.ids, self.codes = ids, codes
            return
        kept = ~np.isin(self.ids, ids)
        all_ids = np.concatenate([self.ids[kept], ids])
        order = np.argsort(all_ids, kind="stable")
        self.ids, self.codes = all_ids[order], np.concatenate([self.codes[kept], codes])[order]

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For clients ``ids``: whether the clock made each late, and its code (0 where it did not)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(self.ids):
            return np.zeros(len(ids), dtype=bool), np.zeros(len(ids), dtype=np.int32)
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        hit = self.ids[pos] == ids
        return hit, np.where(hit, self.codes[pos], 0).astype(np.int32)


def trained(tasks: dict[int, Task], ids: np.ndarray) -> np.ndarray:
    """Bool per client of ``ids``: whether its task trains (evaluation-only tasks measure the model and are
    not timed)."""
    one = one_task(tasks)
    if one is not None:
        return np.full(len(ids), not one.evaluation)
    return np.fromiter((not tasks[c].evaluation for c in np.asarray(ids).tolist()), dtype=bool, count=len(ids))


def _bytes_down_each(tasks: dict[int, Task], ids: np.ndarray) -> np.ndarray:
    """Bytes each of clients ``ids`` receives: its task's payload and shared part."""
    one = one_task(tasks)
    if one is not None:
        return np.full(len(ids), float(_task_bytes(one)))
    seen: dict[int, float] = {}
    out = np.empty(len(ids))
    for i, c in enumerate(np.asarray(ids).tolist()):
        t = tasks[c]
        b = seen.get(id(t))
        if b is None:
            b = seen[id(t)] = float(_task_bytes(t))
        out[i] = b
    return out


def _task_bytes(t: Task) -> int:
    return nbytes_of(t.payload) + (nbytes_of(t.shared) if t.shared is not None else 0)


def unsummed(tasks: Any) -> Any:
    """``tasks`` with ``summed`` off: a deadline drops late clients' replies one by one, which a sum the
    hosts already added could not give back."""
    one = one_task(tasks)
    if one is not None:
        ids = tasks.ids if isinstance(tasks, CohortTasks) else np.fromiter(tasks, dtype=np.int64)
        return tasks if not one.summed else CohortTasks(ids, dataclasses.replace(one, summed=False))
    return {c: (dataclasses.replace(t, summed=False) if t.summed else t) for c, t in tasks.items()}


def without_late(replies: Any, late: np.ndarray, timed: np.ndarray | None = None) -> Any:
    """A round's ``replies`` less the late ones: ``late`` flags the timed replies (``timed``: which of the
    replies were timed, as flags; None: all of them), in order; column-wise where the replies are columns."""
    if timed is None:
        keep = ~late
    else:  # flags over every reply: the untimed (evaluation) ones stay
        keep = np.ones(len(timed), dtype=bool)
        keep[np.flatnonzero(timed)[late]] = False
    if isinstance(replies, Replies):
        return replies.where(keep)
    return [r for r, k in zip(replies, keep.tolist()) if k]


class IdList(list):
    """Client ids as a list (``ExecResult.late``) that also keeps them as the array they came from
    (``.array``, read by the failures log: a deadline may make many thousands late a round)."""

    def __init__(self, ids: np.ndarray) -> None:
        super().__init__(ids.tolist())
        self.array = ids


def sorted_ids(ids: np.ndarray) -> np.ndarray:
    """``ids`` in increasing order (the replies' ids usually are already: no sort then)."""
    return ids if ids.size < 2 or bool(np.all(ids[1:] >= ids[:-1])) else np.sort(ids)
