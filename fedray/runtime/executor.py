"""Runtimes: where clients live and how a round's tasks reach them.

* :class:`LocalExecutor` — every client in this process (the reference for
  correctness and speed);
* :class:`RayExecutor` — clients packed into Ray actors
  (:class:`fedray.actors.client_actor.ClientActor`), created in batches with the configured
  resources and placement; each round's shared input is one object in the
  object store, replies are collected with a deadline.

Both return the same :class:`ExecResult`; the round loop does not know which
one it talks to.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.core.contract import Reply, Task

log = logging.getLogger(__name__)


@dataclass
class ExecResult:
    """Replies of one round (sorted by client id) and who did not answer."""

    replies: list[Reply]
    failed: list[int] = field(default_factory=list)
    late: list[int] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)
    user_errors: dict[int, str] = field(default_factory=dict)
    #: late clients whose actor was still busy with an earlier round's late task
    spillover: list[int] = field(default_factory=list)

    def add_parts(self, parts: list[Any]) -> None:
        """Add a host's reply parts (:class:`~fedray.runtime.clients.Outcome` or
        :class:`~fedray.runtime.clients.PackedOutcomes`, see :func:`~fedray.runtime.clients.pack_parts`):
        the column-wise replies first, then the per-client outcomes in order."""
        rest = [o for p in parts for o in p.columns(self)]
        for o in rest:
            o.record(self)

    def sort_replies(self) -> None:
        """Put a runtime's replies (a :class:`~fedray.core.replies.Replies`) in client-id order."""
        self.replies.sort_by_client()


class Executor:
    """Interface of a runtime."""

    backend = "base"
    n_actors = 0
    #: True when a call's replies are released only as one sum over its cohort (secure
    #: aggregation): clients that failed are then asked again with the whole original cohort,
    #: in a new protocol instance, never alone (see :meth:`fedray.loop.server.Server.gather`).
    whole_cohort_retries = False
    #: True when no layer wraps this executor, so that hosts may add the replies of a
    #: ``Task(summed=True)`` call themselves (set by :func:`fedray.layers.stack.build_stack`).
    sums_in_hosts = False

    @property
    def base(self) -> Executor:
        """The executor at the bottom of the stack (where the clients live): this one, unless a layer."""
        return self

    def describe(self, private: bool = False) -> list[dict[str, Any]]:  # pragma: no cover - interface
        """Per-client facts; ``private`` leaves out per-client sums and extremes (see ClientHost.describe)."""
        raise NotImplementedError

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> None:  # pragma: no cover
        raise NotImplementedError

    def execute(
        self, call: Call, tasks: dict[int, Task], timeout: float | None = None
    ) -> ExecResult:  # pragma: no cover
        raise NotImplementedError

    def gather_data(self, labels: bool = True, rows: dict[int, np.ndarray] | None = None
                    ) -> list[tuple[int, np.ndarray, np.ndarray | None]]:  # pragma: no cover
        """(client id, rows, labels) of every client (``rows``: of these clients, these rows only)."""
        raise NotImplementedError

    def shutdown(self) -> None:
        pass

    def accounting(self) -> dict[str, int]:
        """Bytes the client hosts hold, by kind, summed over hosts (:meth:`ClientHost.accounting`)."""
        return {}

    def preload(self, packages: tuple[str, ...]) -> None:
        """Import ``packages`` in the background where the clients run (:func:`fedray.core.extras.preload`);
        runtimes whose clients run in this process import them at first use."""

    # Records kept by wrapping layers (message log, privacy account); saved in checkpoints.
    def report(self) -> dict[str, Any]:
        return {}

    def restore(self, report: dict[str, Any]) -> None:
        pass

    def reset_records(self) -> None:
        """Forget what the layers recorded (a new run starts); the clients are untouched."""


class ExecutorWrapper(Executor):
    """Base of the optional layers around an executor (fault injection, message log, privacy).

    A layer overrides :meth:`execute` (and :meth:`report` / :meth:`restore` for what it
    records); everything else goes to ``inner``. Nothing is wrapped unless the
    configuration asks for it, so the default round costs nothing extra.
    """

    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    @property
    def backend(self) -> str:  # type: ignore[override]
        return self.inner.backend

    @property
    def n_actors(self) -> int:  # type: ignore[override]
        return self.inner.n_actors

    @property
    def whole_cohort_retries(self) -> bool:  # type: ignore[override]
        return self.inner.whole_cohort_retries

    @property
    def base(self) -> Executor:
        """The executor at the bottom of the stack (where the clients live)."""
        return self.inner.base

    def describe(self, private: bool = False) -> list[dict[str, Any]]:
        return self.inner.describe(private)

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> None:
        self.inner.apply_scaler(shift, scale)

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        return self.inner.execute(call, tasks, timeout)

    def gather_data(self, labels: bool = True, rows: dict[int, np.ndarray] | None = None):
        return self.inner.gather_data(labels, rows)

    def get_state(self, client_ids: list[int]) -> dict[int, dict[str, Any]]:
        return self.inner.get_state(client_ids)

    def set_state(self, states: dict[int, dict[str, Any]]) -> None:
        self.inner.set_state(states)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def accounting(self) -> dict[str, int]:
        return self.inner.accounting()

    def report(self) -> dict[str, Any]:
        return self.inner.report()

    def restore(self, report: dict[str, Any]) -> None:
        self.inner.restore(report)

    def reset_records(self) -> None:
        self.inner.reset_records()


