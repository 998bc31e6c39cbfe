"""The message log: what the server sent and what it received, message by message.

With ``output.messages: true`` every task sent to a client (``down``) and every
reply that reached the server (``up``) becomes one row of ``messages.parquet``:
round, attempt, the call's kind (``train``, ``evaluate``, ``setup``, ``adhoc``) and purpose,
client, direction, the client function, the kind of message
(``stats``, ``masked``, ``other``, ``none``), and the names, shapes, dtypes and
bytes of its array leaves (:func:`fedray.core.sizes.describe_message`). The layer sits
below the privacy layer (:mod:`fedray.layers.privacy`), so under secure aggregation the
``up`` rows show the masked vectors the server received, never a client's sum.
Shared inputs (one object-store broadcast per round) are listed in each client's
``down`` row, as each client receives them. Every call of the session passes through
the layer, so evaluation passes, set-up sums, K selection, validation and the plots'
statistics are logged too; ``round`` is the integer the clients' random streams are
keyed by (:attr:`fedray.core.calls.Call.stream_round`: the round for training, -1 - stage
for evaluation, -1000 for set-up, -100 for ad-hoc calls). Only the central baseline, an
oracle of the simulation that reads the shards directly, is not a message.

``output.message_payloads: true`` also keeps the received replies themselves on
the :class:`~fedray.api.results.Result` (``result.extras["payloads"]``) for audits;
:func:`find_own_rows` checks that none of them contains one of its sender's rows
(DESIGN.md, "Nothing a client returns contains its rows").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.core.contract import Task
from fedray.core.sizes import describe_message, leaves
from fedray.core.stats import Stats
from fedray.runtime.executor import ExecResult, Executor, ExecutorWrapper


@dataclass(frozen=True)
class Envelope:
    """A task payload wrapped by a layer: the algorithm's function and payload plus the layer's own part.

    Attributes
    ----------
    fn : callable
        The algorithm's client function.
    payload : object
        The algorithm's payload.
    extra : dict
        What the layer adds (e.g. the client's mask peers under secure aggregation).
    """

    fn: Any
    payload: Any
    extra: dict[str, Any]


def _kind(update: Any) -> str:
    if update is None:
        return "none"
    if getattr(update, "masked", False):
        return "masked"
    if isinstance(update, Stats):
        return "stats"
    return "other"


def _row(call: Call, cid: int, direction: str, fn: str, kind: str,
         leaves: list[tuple[str, tuple[int, ...], str, int]]) -> dict[str, Any]:
    return {"round": call.stream_round, "attempt": call.attempt, "call": call.kind.value, "purpose": call.purpose,
            "client_id": cid, "direction": direction, "function": fn,
            "kind": kind, "names": [n for n, _, _, _ in leaves], "shapes": [str(tuple(s)) for _, s, _, _ in leaves],
            "dtypes": [d for _, _, d, _ in leaves], "bytes": int(sum(b for _, _, _, b in leaves))}


def _fn_name(fn: Any) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def _task_fn(t: Task) -> str:
    """The algorithm's client function of task ``t`` (inside a layer's envelope, if wrapped)."""
    return _fn_name(t.payload.fn) if isinstance(t.payload, Envelope) else t.fn_name


class MessageLog(ExecutorWrapper):
    """Executor layer recording every message of every round; its two halves are those of a
    :class:`fedray.layers.base.Layer` (``wrap_tasks``: the ``down`` rows; ``finish``: the ``up`` rows).

    Parameters
    ----------
    inner : Executor
    keep_payloads : bool
        Also keep the received replies (``(round, attempt, client_id, update)``).
    """

    name = "messages"

    def __init__(self, inner: Executor, keep_payloads: bool = False) -> None:
        super().__init__(inner)
        self.rows: list[dict[str, Any]] = []
        self.keep_payloads = keep_payloads
        self.payloads: list[tuple[int, int, int, Any]] = []

    def reset_records(self) -> None:
        self.rows, self.payloads = [], []
        self.inner.reset_records()

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        sent = self.wrap_tasks(call, tasks)
        return self.finish(call, sent, self.inner.execute(call, sent, timeout))

    def wrap_tasks(self, call: Call, tasks: dict[int, Task]) -> dict[int, Task]:
        """The client half (:class:`fedray.layers.base.Layer`): one ``down`` row per task; the tasks go unchanged."""
        shared_rows: dict[int, list] = {}
        for cid in sorted(tasks):
            t = tasks[cid]
            if isinstance(t.payload, Envelope):
                leaves = describe_message(t.payload.payload, "payload") + describe_message(t.payload.extra, "layer")
            else:
                leaves = describe_message(t.payload, "payload")
            if t.shared is not None:
                key = id(t.shared)
                if key not in shared_rows:
                    shared_rows[key] = describe_message(t.shared, "shared")
                leaves = leaves + shared_rows[key]
            self.rows.append(_row(call, cid, "down", _task_fn(t), "task", leaves))
        return tasks

    def finish(self, call: Call, tasks: dict[int, Task], result: ExecResult) -> ExecResult:
        """The server half: one ``up`` row per reply that reached the server (and its payload, if kept)."""
        for r in result.replies:
            t = tasks.get(r.client_id)
            self.rows.append(_row(call, r.client_id, "up", "" if t is None else _task_fn(t),
                                  _kind(r.update), describe_message(r.update, "update")))
            if self.keep_payloads:
                self.payloads.append((call.stream_round, call.attempt, r.client_id, r.update))
        return result

    def report(self) -> dict[str, Any]:
        out = {**self.inner.report(), "messages": list(self.rows)}
        if self.keep_payloads:
            out["payloads"] = list(self.payloads)
        return out

    def restore(self, report: dict[str, Any]) -> None:
        self.inner.restore(report)
        self.rows = list(report.get("messages", []))
        self.payloads = list(report.get("payloads", []))


def messages_table(rows: list[dict[str, Any]]) -> Any:
    """``messages.parquet`` as a DataFrame (list columns ``names``, ``shapes``, ``dtypes``)."""
    import pandas as pd

    cols = ["round", "attempt", "call", "purpose", "client_id", "direction", "function", "kind", "names", "shapes",
            "dtypes", "bytes"]
    return pd.DataFrame(rows, columns=cols)


# --- the row check ------------------------------------------------------------------
def _float_leaves(obj: Any, prefix: str = "") -> list[tuple[str, np.ndarray]]:
    return [(n, v) for n, v in leaves(obj, prefix) if isinstance(v, np.ndarray) and v.dtype.kind == "f"]


def find_own_rows(update: Any, X: np.ndarray) -> list[str]:
    """Names of the leaves of ``update`` that contain a row of ``X`` as consecutive values.

    Every float array leaf is flattened; a row ``x`` of ``X`` (shape (n, d)) is found
    where ``d`` consecutive values equal ``x`` exactly (as float32 too, for models
    kept in single precision).

    Parameters
    ----------
    update : object
        A reply as the server received it.
    X : ndarray of shape (n, d)
        The sender's shard.

    Returns
    -------
    list of str
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        return []
    d = X.shape[1]
    found = []
    for name, arr in _float_leaves(update):
        v = np.ascontiguousarray(arr, dtype=np.float64).ravel()
        if v.size < d:
            continue
        for Xc in (X, X.astype(np.float32).astype(np.float64)):
            rows = {r.tobytes() for r in Xc}
            cand = np.flatnonzero(np.isin(v[: v.size - d + 1], Xc[:, 0]))
            if any(v[i : i + d].tobytes() in rows for i in cand):
                found.append(name)
                break
    return found

