"""Two user layers on fedray's layer protocol (:class:`fedray.layers.base.Layer`; docs/extending.md).

A layer sits between the server and the clients and sees every call to clients: its client half,
``wrap_tasks``, gets what goes down; its server half, ``finish``, gets what comes up and returns what
the server (and the algorithm) see. Plug one in by reference in the configuration::

    layers:
      - name: examples.plugins.layers:DropClient
        params: {client_id: 0}

or as an object from Python: ``fedray.run(..., layers=[TrafficLog()])``.
"""
from __future__ import annotations

from typing import Any


class TrafficLog:
    """Sees each call's traffic: one row per call (kind, round, attempt, clients asked, clients that
    answered, bytes up), kept on the object (the local runtime) and in the run's report."""

    name = "traffic-log"

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def wrap_tasks(self, call: Any, tasks: dict[int, Any]) -> dict[int, Any]:
        return tasks  # nothing changes on the way down

    def finish(self, call: Any, tasks: dict[int, Any], result: Any) -> Any:
        self.rows.append({"kind": call.kind.value, "round": call.round, "attempt": call.attempt,
                          "asked": sorted(tasks), "answered": [r.client_id for r in result.replies],
                          "bytes_up": int(sum(r.nbytes for r in result.replies))})
        return result

    def report(self) -> list[dict[str, Any]]:
        return list(self.rows)

    def reset_records(self) -> None:
        self.rows = []


class DropClient:
    """Changes the traffic: the reply of client ``client_id`` to a training call never reaches the server;
    the round counts that client as failed (``clients_failed`` in the history, a row of ``failures``)."""

    name = "drop-client"

    def __init__(self, client_id: int = 0) -> None:
        if not isinstance(client_id, int) or client_id < 0:
            raise ValueError(f"client_id: must be a client id (an int >= 0); got {client_id!r}")
        self.client_id = client_id

    def wrap_tasks(self, call: Any, tasks: dict[int, Any]) -> dict[int, Any]:
        return tasks

    def finish(self, call: Any, tasks: dict[int, Any], result: Any) -> Any:
        if call.training and self.client_id in tasks:
            result.replies = [r for r in result.replies if r.client_id != self.client_id]
            if self.client_id not in result.failed:
                result.failed = sorted([*result.failed, self.client_id])
            result.errors[self.client_id] = f"dropped by the {self.name} layer"
        return result
