"""The layer protocol: one mechanism between the server and the clients, with a client half and a server half.

A :class:`Layer` sees every call to clients that passes through the stack (training rounds,
evaluation passes, set-up sums, K selection, validation, the plots' statistics), each with its
:class:`~fedray.core.calls.Call` (kind, round, attempt, purpose):

- :meth:`Layer.wrap_tasks` is the client half: what goes down. It gets the call's tasks
  (client id -> :class:`~fedray.core.contract.Task`) and returns the tasks to send instead; it may
  wrap a task's function and payload (an :class:`~fedray.layers.messages.Envelope`), replace a
  task, or leave them all as they are.
- :meth:`Layer.finish` is the server half: what comes up. It gets the tasks sent and the
  :class:`~fedray.runtime.executor.ExecResult` of the layers below and returns the result the layers
  above (and the algorithm) see: it may change replies, drop them (mark the client late or failed)
  or count them.

A layer may also keep records, with three optional methods: ``report()`` (what it recorded in the run:
the run's :class:`~fedray.api.results.Result` has it in ``extras["layers"][name]``), ``reset_records()``
(a new run starts) and ``restore(recorded)`` (a run resumed from a checkpoint). :class:`LayerExecutor`
runs a layer on the executor below it; :func:`fedray.layers.stack.build_stack` stacks a list of them.

The built-in layers are executors of their own (they subclass
:class:`~fedray.runtime.executor.ExecutorWrapper`) that keep the same two halves where one call is one
exchange: the message log is ``wrap_tasks`` (the ``down`` rows) and ``finish`` (the ``up`` rows); the
fault injector's client half swaps the planned crashes and delays into the tasks, and its server half
drops virtually delayed replies past the deadline. The privacy layer (:mod:`fedray.layers.privacy`)
owns ``execute`` whole, because its server half is a protocol of several exchanges per call; its
mechanisms are its documented parts: the guards and DP noise are its client half (the
:class:`~fedray.layers.messages.Envelope` each task is wrapped in says what the client applies),
secure aggregation spans both halves (key sharing before the call, masking in the client, unmasking
and dropout recovery after it), and the release rule is its server half's last word on each sum
(:mod:`fedray.layers.privacy.release`). A user's
own layer needs only the two halves; it plugs in through the ``layers`` key of the configuration
(``package.module:ClassName`` with its ``params``) or ``fedray.run(..., layers=[obj])``, like a user's
algorithm, and sits above the message log and below privacy (under privacy it sees the clients'
masked vectors, never a client's own statistics). On Ray the stack travels to the server actor, so a
layer must pickle (plain attributes) and its module must be importable there.

Example (``examples/plugins/layers.py``, which also has a layer that drops a client's replies)::

    class TrafficLog:
        name = "traffic-log"

        def __init__(self):
            self.rows = []

        def wrap_tasks(self, call, tasks):
            return tasks  # nothing changes on the way down

        def finish(self, call, tasks, result):
            self.rows.append({"kind": call.kind.value, "round": call.round, "answered": len(result.replies)})
            return result

        def report(self):
            return list(self.rows)
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from fedray.core.calls import Call
from fedray.core.contract import Task
from fedray.core.errors import ConfigError
from fedray.runtime.executor import ExecResult, Executor, ExecutorWrapper


@runtime_checkable
class Layer(Protocol):
    """One mechanism of the stack (see the module doc)."""

    name: str

    def wrap_tasks(self, call: Call, tasks: dict[int, Task]) -> dict[int, Task]:
        """The client half: the tasks to send down for ``call`` in place of ``tasks``."""
        ...  # pragma: no cover - protocol

    def finish(self, call: Call, tasks: dict[int, Task], result: ExecResult) -> ExecResult:
        """The server half: the result the layers above see, from the tasks sent and the result below."""
        ...  # pragma: no cover - protocol


def check_layer(obj: Any, where: str) -> Any:
    """``obj`` if it has the two halves of a :class:`Layer` (and a name), else a one-line ConfigError."""
    missing = [m for m in ("wrap_tasks", "finish") if not callable(getattr(obj, m, None))]
    if missing or not isinstance(getattr(obj, "name", None), str):
        lacks = ", ".join(missing + ([] if isinstance(getattr(obj, "name", None), str) else ["name (a str)"]))
        raise ConfigError(f"{where}: {type(obj).__name__} is not a fedray layer: it lacks {lacks} "
                          "(see fedray.layers.base.Layer)")
    return obj


class LayerExecutor(ExecutorWrapper):
    """The executor that runs ``layer`` on ``inner``: its client half, the layers below, its server half."""

    def __init__(self, inner: Executor, layer: Any) -> None:
        super().__init__(inner)
        self.layer = layer

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        sent = self.layer.wrap_tasks(call, dict(tasks))
        return self.layer.finish(call, sent, self.inner.execute(call, sent, timeout))

    def report(self) -> dict[str, Any]:
        own = getattr(self.layer, "report", None)
        below = self.inner.report()
        return {**below, "layers": {**below.get("layers", {}), self.layer.name: own()}} if own else below

    def reset_records(self) -> None:
        if (reset := getattr(self.layer, "reset_records", None)) is not None:
            reset()
        self.inner.reset_records()

    def restore(self, report: dict[str, Any]) -> None:
        self.inner.restore(report)
        own = getattr(self.layer, "restore", None)
        if own is not None and self.layer.name in report.get("layers", {}):
            own(report["layers"][self.layer.name])
