"""The local runtime: every client in one in-process host, the reference for correctness and speed."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.core.contract import Task
from fedray.core.replies import Replies
from fedray.data.checks import Descriptions
from fedray.data.federation import ClientSpec
from fedray.runtime.executor import ExecResult, Executor
from fedray.runtime.host import ClientHost
from fedray.runtime.tasks import plan_shared, split_tasks


class LocalExecutor(Executor):
    """All clients in one in-process :class:`ClientHost`."""

    backend = "local"

    def __init__(self, specs: list[ClientSpec], seed: int, supervised: bool, sample_shape: tuple[int, ...],
                 runtime: Any = None, resident: bool = True, **_: Any) -> None:
        self.host = ClientHost(specs, seed, supervised, sample_shape,
                               batched=True if runtime is None else runtime.batched, resident=resident)
        self.n_actors = 0

    def describe(self, private: bool = False) -> Descriptions:
        return self.host.describe(private)

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> None:
        self.host.apply_scaler(shift, scale)

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        shared, which = plan_shared(tasks)
        per_host, _ = split_tasks(tasks, which)  # one host: its items, or none
        result = ExecResult(Replies())
        result.add_parts(self.host.run_parts(call.stream_round, per_host.get(0, []), *shared))
        result.sort_replies()
        return result

    def accounting(self) -> dict[str, int]:
        return self.host.accounting()

    def gather_data(self, labels: bool = True, rows: dict[int, np.ndarray] | None = None):
        return self.host.gather_data(labels, rows)

    def get_state(self, client_ids: list[int]) -> dict[int, dict[str, Any]]:
        return self.host.get_state(client_ids)

    def set_state(self, states: dict[int, dict[str, Any]]) -> None:
        self.host.set_state(states)
