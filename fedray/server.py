"""The round loop — the only one in fedray.

:class:`Server` drives rounds: sample clients from the server's seeded stream,
ask the algorithm what they run, send it through the executor, drop late or
failed clients (counted), hand the replies in client-id order to the algorithm
and record one history row. The Ray runtime runs the same object inside
:class:`fedray.actors.server_actor.ServerActor`.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from fedray.algorithm import Algorithm, Reply, RoundContext, Task
from fedray.errors import FedrayError, RoundFailedError
from fedray.runtime import Executor
from fedray.seeding import sample_clients
from fedray.sizes import nbytes_of

log = logging.getLogger(__name__)


class Server:
    """Runs an algorithm's rounds on an executor.

    Parameters
    ----------
    algorithm : Algorithm
    executor : Executor
    seed : int
    fraction : float
        Share of clients sampled each round.
    max_rounds : int
        Upper bound on rounds, whatever the algorithm says.
    min_clients : int
        A round with fewer answers fails.
    round_timeout : float or None
        Seconds to wait for replies; late clients are dropped from the round.
    """

    def __init__(self, algorithm: Algorithm, executor: Executor, *, seed: int, fraction: float = 1.0,
                 max_rounds: int = 100, min_clients: int = 1, round_timeout: float | None = None) -> None:
        self.algorithm = algorithm
        self.executor = executor
        self.seed = int(seed)
        self.fraction = float(fraction)
        self.max_rounds = int(max_rounds)
        self.min_clients = int(min_clients)
        self.round_timeout = round_timeout
        self.round = 0
        self.history: list[dict[str, Any]] = []
        self.client_rows: dict[int, dict[str, float]] = {}
        self.finished = False

    def step(self) -> dict[str, Any] | None:
        """Run one round; returns its history row, or None when the run is over."""
        if self.finished or self.round >= self.max_rounds:
            self.finished = True
            return None
        t0 = time.perf_counter()
        info = self.algorithm.info
        sampled = tuple(int(c) for c in sample_clients(self.seed, self.round, info.n_clients, self.fraction))
        ctx = RoundContext(self.round, self.seed, sampled, info, self.fraction)
        phase = self.algorithm.phase
        tasks = self.algorithm.configure_round(ctx)
        if tasks is None:
            self.finished = True
            return None
        res = self.executor.execute(self.round, tasks, self.round_timeout)
        if res.user_errors:
            cid = min(res.user_errors)
            raise type_of_user_error(res.user_errors[cid])
        for cid, err in res.errors.items():
            log.warning("round %d: client %d failed: %s", self.round, cid, err.strip().splitlines()[-1])
        need = min(self.min_clients, len(tasks))
        if len(res.replies) < need:
            first = next(iter(res.errors.values()), "")
            raise RoundFailedError(
                f"round {self.round}: {len(res.replies)} of {len(tasks)} clients answered "
                f"({len(res.failed)} failed, {len(res.late)} late); federation.min_clients={self.min_clients}"
                + (f"\nfirst failure:\n{first}" if first else ""))
        metrics = self.algorithm.aggregate(ctx, res.replies)
        bytes_down = _bytes_down(tasks)
        bytes_up = sum(r.nbytes for r in res.replies)
        for r in res.replies:
            row = self.client_rows.setdefault(r.client_id, {"rounds": 0, "bytes_up": 0, "compute_s": 0.0})
            row["rounds"] += 1
            row["bytes_up"] += r.nbytes
            row["compute_s"] += r.seconds
        out = {"round": self.round, "phase": phase, "clients_sampled": len(tasks),
               "clients_answered": len(res.replies), "clients_failed": len(res.failed),
               "clients_late": len(res.late), **{k: v for k, v in metrics.items()},
               "bytes_down": bytes_down, "bytes_up": bytes_up, "wall_s": time.perf_counter() - t0}
        self.history.append(out)
        self.round += 1
        return out

    def run(self) -> list[dict[str, Any]]:
        while self.step() is not None:
            pass
        return self.history

    def evaluate(self) -> dict[str, Any]:
        """Run the algorithm's evaluation passes on every client; returns the final metrics."""
        stages: list[list[Reply]] = []
        prev: list[Reply] | None = None
        while True:
            task = self.algorithm.evaluation_task(len(stages), prev)
            if task is None:
                break
            tasks = {cid: task for cid in range(self.algorithm.info.n_clients)}
            res = self.executor.execute(-1 - len(stages), tasks, None)
            if res.user_errors:
                raise type_of_user_error(res.user_errors[min(res.user_errors)])
            prev = res.replies
            stages.append(prev)
        return self.algorithm.summarize_evaluation(stages) if stages else {}

    def result(self) -> dict[str, Any]:
        return self.algorithm.result()

    def state(self) -> dict[str, Any]:
        return {"round": self.round, "history": self.history, "client_rows": self.client_rows,
                "finished": self.finished, "converged": self.algorithm.converged, "phase": self.algorithm.phase}


def _bytes_down(tasks: dict[int, Task]) -> int:
    sizes: dict[int, int] = {}
    total = 0
    for t in tasks.values():
        if t.shared is not None:
            key = id(t.shared)
            if key not in sizes:
                sizes[key] = nbytes_of(t.shared)
            total += sizes[key]
        total += nbytes_of(t.payload)
    return total


def type_of_user_error(message: str) -> FedrayError:
    from fedray.errors import DataError

    return DataError(message)
