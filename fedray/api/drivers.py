"""Where a run's round loop lives: in this process (local runtime) or in a server actor (Ray).

A driver owns one :class:`~fedray.loop.server.Server` for one run and offers the same five
steps either way: ``begin``, ``step``, ``finish`` (evaluation, model, state), ``snapshot``
(for checkpoints) and ``state`` (what a failed run still has). :class:`RayDriver` runs the
server in a :class:`~fedray.actors.server_actor.ServerActor`, turning its errors into the
fedray error it raised and its death into one line.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fedray.core.errors import FedrayError, RoundFailedError
from fedray.loop.server import Server
from fedray.loop.settings import ServerSettings

log = logging.getLogger(__name__)


def _server_call(refs: Any, timeout: float | None = None) -> Any:
    """``ray.get`` on the server actor: its errors arrive as the fedray error it raised, and
    its death as one :class:`RoundFailedError` line, not as Ray's remote traceback."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError


    try:
        return ray.get(refs, timeout=timeout)
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, FedrayError):
            raise cause from None
        raise
    except RayActorError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RoundFailedError(f"the server actor died ({type(exc).__name__}: {first[:200]}); the run cannot go "
                               "on — check the Ray logs of the node that hosted it (e.g. out of memory)") from None


class LocalDriver:
    """The round loop in this process."""

    def __init__(self, alg: Any, executor: Any, settings: ServerSettings, resume: dict[str, Any] | None) -> None:
        self.server = Server(alg, executor, settings)
        if resume is not None:
            self.server.restore(resume["server"])

    def begin(self) -> None:
        pass

    def step(self) -> dict[str, Any] | None:
        return self.server.step()

    def finish(self) -> list[Any]:
        return [self.server.evaluate(), self.server.result(), self.server.state()]

    def snapshot(self) -> dict[str, Any]:
        return self.server.snapshot()

    def state(self) -> dict[str, Any]:
        return self.server.state()

    def close(self) -> None:
        pass


class RayDriver:
    """The round loop in a server actor: ``actor`` (maybe started ahead, ``ahead``) or a new one
    from ``new_actor()``; the actor is killed by :meth:`close`, also when the run fails."""

    def __init__(self, alg: Any, executor: Any, settings: ServerSettings, resume: dict[str, Any] | None,
                 actor: Any, new_actor: Callable[[], Any]) -> None:
        self.args = (alg, executor, settings, logging.getLogger("fedray").getEffectiveLevel())
        self.resume = resume
        self.ahead = actor is not None
        self.new_actor = new_actor
        self.actor = actor if actor is not None else new_actor()

    def begin(self) -> None:
        import ray

        try:
            _server_call(self.actor.start.remote(*self.args))
        except RoundFailedError:
            if not self.ahead:
                raise
            # the actor started ahead died while it waited (a lost node, the OOM killer): a new one
            log.warning("the server actor started ahead for this run is gone; starting a new one")
            ray.kill(self.actor)
            self.actor = self.new_actor()
            _server_call(self.actor.start.remote(*self.args))
        if self.resume is not None:
            _server_call(self.actor.restore.remote(self.resume["server"]))

    def step(self) -> dict[str, Any] | None:
        return _server_call(self.actor.step.remote())

    def finish(self) -> list[Any]:
        a = self.actor
        return _server_call([a.evaluate.remote(), a.result.remote(), a.state.remote()])

    def snapshot(self) -> dict[str, Any]:
        return _server_call(self.actor.snapshot.remote())

    def state(self) -> dict[str, Any]:
        return _server_call(self.actor.state.remote(), timeout=30)

    def close(self) -> None:
        import ray

        ray.kill(self.actor)
