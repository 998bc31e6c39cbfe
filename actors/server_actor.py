"""The server actor: runs :class:`fedray.server.Server` (the round loop) inside Ray."""
from __future__ import annotations

import logging
import warnings
from typing import Any

import ray

from fedray.server import Server


@ray.remote(num_cpus=0)
class ServerActor:
    """Holds the algorithm's state and drives rounds; the driver polls :meth:`step` for progress."""

    def __init__(self, algorithm: Any, executor: Any, kwargs: dict[str, Any], log_level: int = logging.WARNING) -> None:
        # The round loop's warnings (failed, late, restarted clients) go to this process's
        # stderr, which Ray forwards to the driver's console.
        logger = logging.getLogger("fedray")
        if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.NullHandler)
                   for h in logger.handlers):
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(log_level)
        # Python warnings raised by the loop (e.g. an empty cluster) as one log line, without the
        # library's file path
        warnings.showwarning = lambda message, category, *args, **kwargs: logger.warning(
            "%s: %s", category.__name__, message)
        self._server = Server(algorithm, executor, **kwargs)  # private: algorithm state, history

    def step(self) -> dict[str, Any] | None:
        return self._server.step()

    def run_until(self, n_rounds: int) -> list[dict[str, Any]]:
        """Up to ``n_rounds`` rounds in one call (fewer remote calls on long runs)."""
        rows = []
        for _ in range(n_rounds):
            row = self._server.step()
            if row is None:
                break
            rows.append(row)
        return rows

    def evaluate(self) -> dict[str, Any]:
        return self._server.evaluate()

    def result(self) -> dict[str, Any]:
        return self._server.result()

    def state(self) -> dict[str, Any]:
        return self._server.state()

    def algorithm(self) -> Any:
        return self._server.algorithm

    def snapshot(self) -> dict[str, Any]:
        return self._server.snapshot()

    def restore(self, snap: dict[str, Any]) -> None:
        self._server.restore(snap)
