"""The client actor: hosts one or more clients (shards, state, random streams)."""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

import ray

from fedray.core.extras import preload
from fedray.runtime.clients import pack_parts
from fedray.runtime.host import ClientHost
from fedray.runtime.messages import HostFailure, HostReply, HostTask

#: What a restarted incarnation answers until the executor has set it up again.
NOT_SET_UP = HostFailure("was restarted: its shards were rebuilt, its client state is lost", restarted=True)


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


def _lean_serialization() -> None:
    """Create this worker's Ray serialization context without pyarrow.

    Ray's context registers serializers for Arrow types and imports pyarrow to do so (about 40 MiB and
    0.3 s in every process) as soon as a worker deserializes its first argument. Client actors receive
    no Arrow objects, so the context is made here, while pyarrow cannot be imported; pyarrow stays
    importable for whatever later needs it (reading Parquet shards), and Arrow objects, were any
    sent, still travel pickled. Only a constructor without arguments runs before that first
    deserialization; where Ray's internals differ, nothing changes.
    """
    if "pyarrow" in sys.modules:
        return
    try:
        worker = ray._private.worker.global_worker
        sys.modules["pyarrow"] = None  # type: ignore[assignment]  # "import pyarrow" raises ModuleNotFoundError
        try:
            worker.get_serialization_context()
        finally:
            del sys.modules["pyarrow"]
    except Exception:  # noqa: BLE001 - another Ray version: the context is made as usual
        pass


def _store(part: Any) -> Any:
    """A chunk's replies, put in the object store as soon as they are computed (the actor's own copy
    is dropped before the next chunk runs); the executor fetches them."""
    return ray.put(part.narrowed()) if part.column_wise else part


@ray.remote
class ClientActor:
    """A Ray actor around :class:`~fedray.runtime.host.ClientHost`.

    Shards are built from their recipes here, inside the actor, so the driver
    never holds the federation's rows.
    """

    def __init__(self) -> None:
        # No constructor arguments: Ray keeps a restartable actor's constructor arguments (and warns
        # when they live in the object store, as a large federation's recipes would), and an actor
        # whose constructor takes none is set up before Ray's serialization context exists (see
        # _lean_serialization). The host's settings and recipes arrive with :meth:`ready` (and again
        # with :meth:`adopt` after a restart).
        _tune_heap()
        _lean_serialization()
        self._host: ClientHost | None = None  # private: shards and client state
        # False until the executor has set this incarnation up (recipes + scaler). Ray re-runs the
        # constructor when it restarts a crashed actor; such an actor must not answer rounds
        # before the executor notices and sets it up again.
        self._adopted = False

    def preload(self, packages: tuple[str, ...]) -> None:
        """Import the run's packages (torch) in the background (:func:`fedray.core.extras.preload`)."""

        preload(packages)

    def ready(self, specs: list, args: tuple) -> int:
        """Build the shards from their recipes, inside the actor (``args``: the rest of
        :class:`~fedray.runtime.host.ClientHost`'s arguments)."""
        self._host = ClientHost(specs, *args)
        self._adopted = True
        return os.getpid()

    def adopt(self, scaler: tuple | None, specs: list, args: tuple) -> int:
        """Set up a restarted incarnation once: rebuild the shards from their recipes, apply the
        scaler, then answer rounds again. Idempotent, so the executor may repeat it while the
        actor is still restarting."""
        if not self._adopted:
            if self._host is None:
                self._host = ClientHost(specs, *args)
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

    def imported(self, packages: tuple[str, ...]) -> list[str]:
        """Which of ``packages`` this actor's process has imported so far (a check that client actors
        stay lean: pandas, scipy, cryptography and the like load only where a run uses them)."""
        return [p for p in packages if p in sys.modules]

    def describe(self, private: bool = False) -> Any:
        return self.host.describe(private)

    def accounting(self) -> dict[str, int]:
        return self.host.accounting()

    def apply_scaler(self, shift, scale) -> int:
        return self.host.apply_scaler(shift, scale)

    def run(self, task: HostTask, *shared: Any) -> HostReply | HostFailure:
        """Run ``task`` with the call's ``shared`` objects (resolved by Ray from the object store). A
        summed call's first half (``task.keep``, :meth:`ClientHost.keep`) keeps the replies here."""
        if not self._adopted:
            return NOT_SET_UP
        if task.keep:
            return self.host.keep(task.round, task.items, *shared, store=_store)
        return HostReply(pack_parts(self.host.run_parts(task.round, task.items, *shared, sink=_store)))

    def fold_kept(self, acc: Any) -> Any:
        """A summed call's second half: continue the sum of the hosts before this one."""
        return self.host.fold_kept(acc)

    def take_kept(self) -> HostReply:
        """A summed call's kept replies, per client (another host answered client by client)."""
        return self.host.take_kept()

    def get_state(self, client_ids: list[int]) -> dict:
        return self.host.get_state(client_ids)

    def set_state(self, states: dict) -> None:
        self.host.set_state(states)

    def gather_data(self, labels: bool = True, rows: dict | None = None) -> list:
        return self.host.gather_data(labels, rows)
