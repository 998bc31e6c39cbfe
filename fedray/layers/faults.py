"""Injected client faults: crashes and stragglers, reproducible from the seed.

The ``faults`` section of the configuration turns this layer on (see
``docs/reliability.md``). Each round, a plan drawn from the server's stream
``(seed, round, 11, attempt)`` decides which sampled clients crash and which are
delayed; the draw for client ``c`` is row ``c`` of one array, so it does not
depend on which other clients were sampled. Explicit ``(round, client)``
crashes are added to the first attempt of their round.

What a crash does depends on ``faults.crash_scope``:

* ``"client"`` (default, both runtimes): the client loses its state (its shard
  is unchanged: rebuilding it from its recipe would give the same rows) and its
  task fails; the other clients of its actor answer normally. This is the
  per-client simulation used by the tests.
* ``"actor"`` (Ray only): the client's actor process exits. Every client hosted
  by that actor fails the round; Ray restarts the actor (``runtime.max_restarts``),
  its constructor rebuilds the shards from their recipes, and the executor applies
  the scaler again before the next round. The same happens when an actor is
  killed from outside (``ray.kill(actor, no_restart=False)``, a lost node).

A delayed client answers ``delay_seconds`` late. With ``delay_mode="virtual"``
(default) the delay is simulated: the client computes, and its reply is dropped
as late when ``delay_seconds > runtime.round_timeout``; this is exact and costs
no time. With ``delay_mode="sleep"`` (Ray only) the client really sleeps and
Ray's deadline (``ray.wait``) decides; all clients of its actor wait with it.

Failed and late clients are dropped from the round and counted
(``clients_failed``, ``clients_late`` in the history; one row each in
``failures.parquet``). The round goes on if at least ``federation.min_clients``
answered, else it is retried up to ``federation.round_retries`` times (with a
fresh fault plan) and then fails with :class:`~fedray.core.errors.RoundFailedError`.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any

from fedray.core.calls import Call
from fedray.core.contract import Task
from fedray.core.seeding import FAULT_STREAM, server_rng
from fedray.layers.failure_log import FailureLog
from fedray.layers.settings import FaultSettings
from fedray.runtime.executor import ExecResult, Executor, ExecutorWrapper

log = logging.getLogger(__name__)



class InjectedCrash(RuntimeError):
    """Raised inside a client whose crash the fault plan asked for (not a FedrayError: the round goes on)."""


# --- client functions (run where the client lives) --------------------------------
def crash_client(payload: Any, shared: Any, client: Any) -> None:
    """Simulated crash of one client: its state is lost and its task fails."""
    client.state.clear()
    raise InjectedCrash(f"client {client.id} crashed in round {client.round} (injected fault)")


def crash_process(payload: Any, shared: Any, client: Any) -> None:  # pragma: no cover - kills the process
    """Crash of the whole actor process hosting the client (Ray restarts it)."""
    log.warning("client %d: exiting its actor process (injected fault)", client.id)
    os._exit(17)


def delayed(payload: dict[str, Any], shared: Any, client: Any) -> Any:
    """Sleep, then run the wrapped client function."""
    time.sleep(payload["delay"])
    return payload["fn"](payload["payload"], shared, client)


# --- the plan -------------------------------------------------------------------------
def fault_plan(faults: FaultSettings, seed: int, round_: int, attempt: int,
               client_ids: list[int]) -> tuple[set[int], dict[int, float]]:
    """Clients that crash and clients that are delayed (with their delay) in one attempt of a round.

    Parameters
    ----------
    faults : FaultSettings
        Built from ``faults`` by :func:`fedray.api.settings.fault_settings`.
    seed, round_, attempt : int
    client_ids : list of int
        The clients that received a task.

    Returns
    -------
    crash : set of int
    delay : dict of int to float (seconds)
    """
    crash: set[int] = set()
    delay: dict[int, float] = {}
    if round_ < 0 or not client_ids:
        return crash, delay
    if faults.crash_probability or faults.delay_probability:
        u = server_rng(seed, round_, FAULT_STREAM, attempt).random((max(client_ids) + 1, 2))
        for c in client_ids:
            if u[c, 0] < faults.crash_probability:
                crash.add(c)
            elif u[c, 1] < faults.delay_probability and faults.delay_seconds > 0:
                delay[c] = float(faults.delay_seconds)
    if attempt == 0:
        ids = set(client_ids)
        crash.update(c for r, c in faults.crashes if r == round_ and c in ids)
    for c in crash:
        delay.pop(c, None)
    return crash, delay


class FaultInjector(ExecutorWrapper):
    """Executor layer that injects the planned faults into each round.

    Parameters
    ----------
    inner : Executor
    faults : FaultSettings
        Built from ``faults`` by :func:`fedray.api.settings.fault_settings`.
    seed : int
    """

    def __init__(self, inner: Executor, faults: FaultSettings, seed: int) -> None:
        super().__init__(inner)
        self.faults = faults
        self.seed = int(seed)
        self.events: list[dict[str, Any]] = []  # one row a planned fault

    def reset_records(self) -> None:
        self.events = []
        self.inner.reset_records()

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        if not call.training:  # evaluation, set-up and ad-hoc calls are not part of the protocol being tested
            return self.inner.execute(call, tasks, timeout)
        round_, attempt = call.round, call.attempt
        crash, delay = fault_plan(self.faults, self.seed, round_, attempt, sorted(tasks))
        if not crash and not delay:
            return self.inner.execute(call, tasks, timeout)
        f = self.faults
        crash_fn = crash_process if f.crash_scope == "actor" else crash_client
        sent = dict(tasks)
        for c in sorted(crash):
            sent[c] = Task(crash_fn, None, None, evaluation=tasks[c].evaluation)
            self.events.append({"round": round_, "attempt": attempt, "client_id": c, "fault": "crash",
                                "seconds": 0.0})
        for c, d in sorted(delay.items()):
            self.events.append({"round": round_, "attempt": attempt, "client_id": c, "fault": "delay",
                                "seconds": d})
            if f.delay_mode == "sleep":
                t = tasks[c]
                sent[c] = Task(delayed, {"delay": d, "fn": t.fn, "payload": t.payload}, t.shared, t.evaluation)
        res = self.inner.execute(call, sent, timeout)
        if f.delay_mode == "virtual" and timeout is not None:
            late = {c for c, d in delay.items() if d > timeout}
            if late:
                res.replies = [r for r in res.replies if r.client_id not in late]
                res.late = sorted(set(res.late) | (late - set(res.failed)))
        return res

    def report(self) -> dict[str, Any]:
        return {**self.inner.report(), "faults": list(self.events)}

    def restore(self, report: dict[str, Any]) -> None:
        self.inner.restore(report)
        self.events = list(report.get("faults", []))


def failures_table(failures: Any, events: list[dict[str, Any]]) -> Any:
    """The ``failures`` table: one row per client that failed or was late in an attempt of a round.

    ``failures``: a :class:`~fedray.layers.failure_log.FailureLog`, or its rows as dictionaries.
    Columns: round, attempt, client_id, kind (``failed`` / ``late``), injected (bool), error.
    """
    return FailureLog.of(failures).table(events)
