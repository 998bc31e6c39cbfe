"""The server actor: runs :class:`fedray.loop.server.Server` (the round loop) inside Ray."""
from __future__ import annotations

import logging
import warnings
from typing import Any

import ray

from fedray.loop.server import Server
from fedray.loop.settings import ServerSettings


@ray.remote(num_cpus=0)
class ServerActor:
    """Holds the algorithm's state and drives rounds; the driver polls :meth:`step` for progress."""

    def __init__(self, algorithm: Any = None, executor: Any = None, settings: ServerSettings | None = None,
                 log_level: int = logging.WARNING) -> None:
        # Built empty, a session keeps one ready (its process started and its imports done) for the
        # next run, which hands it the run's algorithm with :meth:`start`.
        self._server: Server | None = None
        if algorithm is not None:
            self.start(algorithm, executor, settings, log_level)

    def start(self, algorithm: Any, executor: Any, settings: ServerSettings, log_level: int = logging.WARNING) -> None:
        """Take the run: build its :class:`~fedray.loop.server.Server` with the run's ``settings``
        (once per actor)."""
        if not isinstance(settings, ServerSettings):
            raise TypeError(f"ServerActor.start: settings must be a ServerSettings; got {type(settings).__name__}")
        if self._server is not None:
            raise RuntimeError("this server actor already runs a run; a run needs a fresh one")
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
        self._server = Server(algorithm, executor, settings)  # private: algorithm state, history

    @property
    def _run(self) -> Server:
        if self._server is None:
            raise RuntimeError("this server actor has not started a run (call start first)")
        return self._server

    def step(self) -> dict[str, Any] | None:
        return self._run.step()

    def evaluate(self) -> dict[str, Any]:
        return self._run.evaluate()

    def result(self) -> dict[str, Any]:
        return self._run.result()

    def state(self) -> dict[str, Any]:
        return self._run.state()

    def algorithm(self) -> Any:
        return self._run.algorithm

    def snapshot(self) -> dict[str, Any]:
        return self._run.snapshot()

    def restore(self, snap: dict[str, Any]) -> None:
        self._run.restore(snap)
