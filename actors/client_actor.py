"""The client actor: hosts one or more clients (shards, state, random streams)."""
from __future__ import annotations

import ctypes
import os
from typing import Any

import ray

from fedray.core.extras import preload
from fedray.runtime.host import ClientHost, PackedOutcomes, pack_parts


def _tune_heap() -> None:
    """Have glibc serve blocks up to 64 MiB from its heap and keep up to 512 MiB of freed ones there, so
    that the chunks of one round reuse the pages of the last one instead of faulting fresh ones in
    (about a third of a round of 10^6 clients on 2 CPUs). Elsewhere than glibc, nothing changes."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 26)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 29)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def _store(part: Any) -> Any:
    """A chunk's replies, put in the object store as soon as they are computed (the actor's own copy
    is dropped before the next chunk runs); the executor fetches them."""
    return ray.put(part.narrowed()) if isinstance(part, PackedOutcomes) else part


@ray.remote
class ClientActor:
    """A Ray actor around :class:`~fedray.runtime.host.ClientHost`.

    Shards are built from their recipes here, inside the actor, so the driver
    never holds the federation's rows.
    """

    def __init__(self, seed: int, supervised: bool, sample_shape: tuple[int, ...], batched: bool = True,
                 resident: bool = True) -> None:
        # The recipes arrive with :meth:`ready` (and again with :meth:`adopt` after a restart), not
        # as constructor arguments: Ray keeps a restartable actor's constructor arguments, and
        # warns when they live in the object store, as a large federation's recipes would.
        self._args = (seed, supervised, sample_shape, batched, resident)
        _tune_heap()
        self._host: ClientHost | None = None  # private: shards and client state
        # False until the executor has set this incarnation up (recipes + scaler). Ray re-runs the
        # constructor when it restarts a crashed actor; such an actor must not answer rounds
        # before the executor notices and sets it up again.
        self._adopted = False

    def preload(self, packages: tuple[str, ...]) -> None:
        """Import the run's packages (torch) in the background (:func:`fedray.core.extras.preload`)."""

        preload(packages)

    def ready(self, specs: list) -> int:
        """Build the shards from their recipes, inside the actor."""
        self._host = ClientHost(specs, *self._args)
        self._adopted = True
        return os.getpid()

    def adopt(self, scaler: tuple | None = None, specs: list | None = None) -> int:
        """Set up a restarted incarnation once: rebuild the shards from their recipes, apply the
        scaler, then answer rounds again. Idempotent, so the executor may repeat it while the
        actor is still restarting."""
        if not self._adopted:
            if self._host is None:
                self._host = ClientHost(specs, *self._args)
            if scaler is not None:
                self._host.apply_scaler(*scaler)
            self._adopted = True
        return os.getpid()

    @property
    def host(self) -> ClientHost:
        if self._host is None:
            raise RuntimeError("this client actor was restarted and is not set up again yet")
        return self._host

    def incarnation(self) -> tuple[int, bool]:
        """(process id, whether the executor has set this incarnation up); does not set it up."""
        return os.getpid(), self._adopted

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def whereabouts(self) -> dict[str, Any]:
        """Where this actor runs: node, process, the GPUs Ray gave it and what CUDA_VISIBLE_DEVICES shows."""
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "pid": os.getpid(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "clients": self._host.ids.tolist() if self._host is not None else []}

    def describe(self, private: bool = False) -> Any:
        return self.host.describe(private)

    def accounting(self) -> dict[str, int]:
        return self.host.accounting()

    def apply_scaler(self, shift, scale) -> int:
        return self.host.apply_scaler(shift, scale)

    def run(self, round_: int, tasks: list, *shared: Any) -> list | str:
        if not self._adopted:
            return "restarted"
        return pack_parts(self.host.run_parts(round_, tasks, *shared, sink=_store))

    def run_kept(self, round_: int, tasks: Any, *shared: Any) -> Any:
        """A summed call's first half (:meth:`ClientHost.run_kept`): the replies stay here."""
        if not self._adopted:
            return "restarted"
        return self.host.run_kept(round_, tasks, *shared, store=_store)

    def fold_kept(self, acc: Any) -> Any:
        """A summed call's second half: continue the sum of the hosts before this one."""
        return self.host.fold_kept(acc)

    def take_kept(self) -> Any:
        """A summed call's kept replies, per client (another host answered client by client)."""
        return self.host.take_kept()

    def get_state(self, client_ids: list[int]) -> dict:
        return self.host.get_state(client_ids)

    def set_state(self, states: dict) -> None:
        self.host.set_state(states)

    def gather_data(self, labels: bool = True) -> list:
        return self.host.gather_data(labels)
