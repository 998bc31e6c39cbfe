"""The client actor: hosts one or more clients (shards, state, random streams)."""
from __future__ import annotations

import os
from typing import Any

import ray

from fedray.client import ClientHost, pack_outcomes


@ray.remote
class ClientActor:
    """A Ray actor around :class:`~fedray.client.ClientHost`.

    Shards are built from their recipes here, inside the actor, so the driver
    never holds the federation's rows.
    """

    def __init__(self, specs: list, seed: int, supervised: bool, sample_shape: tuple[int, ...]) -> None:
        self._host = ClientHost(specs, seed, supervised, sample_shape)  # private: shards and client state
        # False until the executor has set this incarnation up (ready + scaler). Ray re-runs the
        # constructor when it restarts a crashed actor; such an actor must not answer rounds
        # with unscaled shards before the executor notices and sets it up again.
        self._adopted = False

    def ready(self) -> int:
        self._adopted = True
        return os.getpid()

    def adopt(self, scaler: tuple | None = None) -> int:
        """Set up a restarted incarnation once: apply the scaler, then answer rounds again.
        Idempotent, so the executor may repeat it while the actor is still restarting."""
        if not self._adopted:
            if scaler is not None:
                self._host.apply_scaler(*scaler)
            self._adopted = True
        return os.getpid()

    def incarnation(self) -> tuple[int, bool]:
        """(process id, whether the executor has set this incarnation up); does not set it up."""
        return os.getpid(), self._adopted

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def describe(self, private: bool = False) -> list[dict[str, Any]]:
        return self._host.describe(private)

    def apply_scaler(self, shift, scale) -> int:
        return self._host.apply_scaler(shift, scale)

    def run(self, round_: int, tasks: list, *shared: Any) -> list | str:
        if not self._adopted:
            return "restarted"
        return pack_outcomes(self._host.run(round_, tasks, *shared))

    def get_state(self, client_ids: list[int]) -> dict:
        return self._host.get_state(client_ids)

    def set_state(self, states: dict) -> None:
        self._host.set_state(states)

    def gather_data(self, labels: bool = True) -> list:
        return self._host.gather_data(labels)
