"""The Ray runtime: clients packed into Ray actors (:class:`fedray.actors.client_actor.ClientActor`).

:class:`RayExecutor` puts the pieces together, each with one job:

* placement — :mod:`fedray.runtime.placement` reserves the run's actors at once as one placement
  group (the layout, the bundles, queueing behind other runs);
* start-up — :mod:`fedray.runtime.startup` creates the actors in batches into their bundles and sets
  restarted ones up again;
* the pool — :class:`fedray.runtime.pool.ClientPool`: who hosts which client, dead actors, late tasks;
* dispatch — :meth:`RayExecutor.execute` here: one :class:`~fedray.runtime.messages.HostTask` per
  hosting actor, the call's shared objects once in the object store, replies collected until the
  deadline, late and failed clients counted;
* summing — :mod:`fedray.runtime.summed`: calls whose replies the hosts add up themselves.

Actors answer with a :class:`~fedray.runtime.messages.HostReply` or a
:class:`~fedray.runtime.messages.HostFailure`; an actor that Ray reports failed becomes a
``HostFailure`` here, so every failure reaches the round loop the same way.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.core.contract import Task, one_task
from fedray.core.errors import RoundFailedError
from fedray.core.replies import Replies
from fedray.data.checks import Descriptions
from fedray.data.federation import ClientSpec, put_shards
from fedray.runtime import summed as summed_calls
from fedray.runtime.connect import connect
from fedray.runtime.executor import ExecResult, Executor
from fedray.runtime.messages import HostFailure, HostTask
from fedray.runtime.placement import Placement, layout_for, reserve
from fedray.runtime.pool import ClientPool
from fedray.runtime.settings import ShipSettings
from fedray.runtime.shipping import connect_for
from fedray.runtime.startup import actor_options, set_up_again, start_actors
from fedray.runtime.summed import execute_summed, hosts_sum
from fedray.runtime.tasks import plan_shared

log = logging.getLogger(__name__)


def ensure_ray(address: str | None = None, num_cpus: int | None = None, ship: ShipSettings | None = None) -> bool:
    """Connect to Ray (``address``) or start an embedded local instance; True if started here.

    Without ``address`` fedray starts its own instance even when another Ray
    cluster runs on this machine; an address is probed first so that a wrong
    one fails in seconds (see :mod:`fedray.runtime.connect`). With the run's
    ``ship`` settings (their address and CPUs), a Ray Client connection also carries the code to ship
    (:func:`fedray.runtime.shipping.connect_for`).
    """
    if ship is not None:
        return connect_for(ship)
    return connect(address, num_cpus)


class RayExecutor(Executor):
    """Clients hosted by Ray actors.

    Parameters
    ----------
    specs, seed, supervised, sample_shape
        As for :class:`~fedray.runtime.local.LocalExecutor`.
    runtime : RuntimeConfig
        ``clients_per_actor``, ``client_resources``, ``placement``, ``actor_batch``, ``call_timeout``,
        ``stall_warning``, ``max_restarts``.
    """

    backend = "ray"

    def __init__(self, specs: list[ClientSpec], seed: int, supervised: bool, sample_shape: tuple[int, ...],
                 runtime: Any = None, runtime_env: dict[str, Any] | None = None, preload: tuple[str, ...] = (),
                 resident: bool = True, **_: Any) -> None:
        # Shards given from Python go to the object store, one object per client; the
        # recipes holding the references stay here while the actors may need them.
        specs = put_shards(specs)
        self.specs = specs
        layout = layout_for(runtime, len(specs))
        self.clients_per_actor, self.actor_cpus = layout.clients_per_actor, layout.actor_cpus
        chunks = [specs[i : i + self.clients_per_actor] for i in range(0, len(specs), self.clients_per_actor)]
        # All the actors at once (a placement group), so runs that share a cluster queue for it.
        self.placement: Placement | None = reserve(layout, runtime)
        self._host_args = (seed, supervised, tuple(sample_shape), runtime.batched, resident)  # a restarted actor's too
        t0 = time.perf_counter()
        try:
            actors, owner, self._recipes = start_actors(chunks, actor_options(runtime, self.actor_cpus, runtime_env),
                                                        self._host_args, runtime, self.placement, preload)
        except BaseException:
            self._release()
            raise
        self.pool = ClientPool(actors, owner)
        self.n_actors = len(actors)
        self._scaler: tuple[np.ndarray, np.ndarray] | None = None  # re-applied to restarted actors
        self.call_timeout = float(runtime.call_timeout)
        self.stall_warning = float(runtime.stall_warning)
        # clients a host from which hosts add a summed call's replies (fedray.runtime.summed); read here, so
        # that it travels with the executor to the server actor
        self.sum_min_clients = summed_calls.SUM_MIN_CLIENTS
        self._round_s: list[float] = []  # wall time of rounds that waited for every actor (stall warnings)
        log.info("created %d client actors (%d clients each, %.2f CPUs each) in %.1f s",
                 self.n_actors, self.clients_per_actor, self.actor_cpus, time.perf_counter() - t0)

    @property
    def actors(self) -> list[Any]:
        """The client actors' handles, in client-id order of what they host."""
        return self.pool.actors

    @actors.setter
    def actors(self, value: list[Any]) -> None:
        self.pool.actors = value

    @property
    def owner(self) -> np.ndarray:
        """Client id -> index of the actor hosting it."""
        return self.pool.owner

    def preload(self, packages: tuple[str, ...]) -> None:
        """Ask every live actor to import ``packages`` in the background; nothing waits for it."""
        if packages:
            for i in self.pool.alive():
                self.actors[i].preload.remote(tuple(packages))

    def _get(self, refs: list[Any], what: str, timeout: float | None = None) -> list[Any]:
        """``ray.get`` under a deadline (``runtime.call_timeout``); a stuck or dead actor is one line."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        limit = self.call_timeout if timeout is None else timeout
        try:
            return ray.get(refs, timeout=limit)
        except GetTimeoutError:
            raise RoundFailedError(f"{what}: client actors did not answer within runtime.call_timeout={limit:g} s "
                                   "(a stopped or overloaded node?)") from None
        except (RayActorError, RayTaskError) as exc:
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise RoundFailedError(f"{what}: a client actor failed ({type(exc).__name__}: {first[:200]})") from None

    def _call_all(self, method: str, *args: Any) -> list[Any]:
        return self._get([getattr(a, method).remote(*args) for a in self.actors], method)

    def whereabouts(self) -> list[dict[str, Any]]:
        """Per actor (in order): node, process, its Ray GPU ids, CUDA_VISIBLE_DEVICES, its clients, and
        the placement group bundle it was reserved in (:mod:`fedray.runtime.placement`)."""
        out = self._call_all("whereabouts")
        for i, w in enumerate(out):
            w["bundle"] = self.placement.indices[i] if self.placement is not None else None
        return out

    def describe(self, private: bool = False) -> Descriptions:
        return Descriptions.concat(self._call_all("describe", private))

    def accounting(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for part in self._call_all("accounting"):
            for k, v in part.items():
                out[k] = out.get(k, 0) + int(v)
        out["hosts"] = len(self.actors)
        return out

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> None:
        self._scaler = (shift, scale)
        self._call_all("apply_scaler", shift, scale)

    # --- dispatch ---------------------------------------------------------------------------
    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        import ray

        timeout = call.timeout(timeout)  # what is left of the round's deadline, if it has one
        shared, which = plan_shared(tasks)
        refs = [ray.put(s) for s in shared]
        per_actor, uniform = self.pool.split(tasks, which)
        first = one_task(tasks)
        if (uniform and first is not None and first.summed and self.sums_in_hosts and timeout is None
                and self.pool.quiet() and hosts_sum(len(tasks), len(per_actor), self.sum_min_clients)):
            result = execute_summed(self.pool, call, per_actor, refs, self._get, _fetch_parts)
            if result is not None:
                return result
        return self._execute_plain(call, per_actor, refs, timeout)

    def _execute_plain(self, call: Call, per_actor: dict[int, Any], refs: list[Any],
                       timeout: float | None) -> ExecResult:
        """One :class:`HostTask` per hosting actor; collect until ``timeout``, count the rest late."""
        result = ExecResult(Replies())
        for a, items in self.pool.take_dead(per_actor).items():
            _fail(HostFailure("is dead (runtime.max_restarts exhausted)"), a, items, result)
        busy = self.pool.busy()
        t0 = time.monotonic()
        futures = self.pool.submit(lambda actor, items: actor.run.remote(HostTask(call.stream_round, items), *refs),
                                   per_actor)
        ready, not_ready = self._wait(call, list(futures), timeout)
        broken = [a for a in (self._collect(fut, futures[fut], per_actor[futures[fut]], result) for fut in ready)
                  if a is not None]
        if broken:
            self.pool.mark_dead(set_up_again(self.actors, sorted(broken), self._scaler, self._recipes, self._host_args))
        for fut in not_ready:
            a = futures[fut]
            ids = HostTask(call.stream_round, per_actor[a]).client_ids()
            result.late.extend(ids)
            if a in busy:
                result.spillover.extend(ids)
            self.pool.mark_late(a, call.stream_round, fut)
        if not not_ready and call.training:
            self._round_s.append(time.monotonic() - t0)
        result.spillover.sort()
        result.sort_replies()
        result.failed.sort()
        result.late.sort()
        return result

    def _collect(self, fut: Any, a: int, items: Any, result: ExecResult) -> int | None:
        """Add actor ``a``'s answer to ``result``; returns ``a`` when it must be set up again."""
        import ray
        from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError, RayTaskError

        try:
            out = ray.get(fut)
        except RayActorError as exc:  # Ray restarts the actor, or it is dead for good (set_up_again finds out)
            out = _failure(exc, restarted=True)
        except (RayTaskError, GetTimeoutError, ObjectLostError) as exc:
            out = _failure(exc, restarted=False)
        if not out.ok:
            _fail(out, a, items, result)
            return a if out.restarted else None
        result.add_parts(_fetch_parts(out.parts))
        return None

    def _wait(self, call: Call, futures: list[Any], timeout: float | None) -> tuple[list[Any], list[Any]]:
        """Wait for the round's replies until ``timeout``; without one, warn while it stalls."""
        import ray

        if timeout is not None:
            return ray.wait(futures, num_returns=len(futures), timeout=timeout)
        every = (max(STALL_FLOOR_S, self.stall_warning * float(np.median(self._round_s[-20:]))) if self._round_s
                 else STALL_FIRST_S)
        t0 = time.monotonic()
        ready, not_ready = ray.wait(futures, num_returns=len(futures), timeout=every)
        while not_ready:
            log.warning("%s: still waiting for %d of %d client actors after %.0f s%s; set "
                        "runtime.round_timeout to drop late clients", call.label(), len(not_ready), len(futures),
                        time.monotonic() - t0, f" (a round takes {np.median(self._round_s[-20:]):.2f} s)"
                        if self._round_s else "")
            more, not_ready = ray.wait(not_ready, num_returns=len(not_ready), timeout=every)
            ready += more
        return ready, not_ready

    def gather_data(self, labels: bool = True, rows: dict[int, np.ndarray] | None = None):
        out = []
        for part in self._call_all("gather_data", labels, rows):
            out.extend(part)
        return sorted(out, key=lambda t: t[0])

    def get_state(self, client_ids: list[int]) -> dict[int, dict[str, Any]]:
        by_actor = self.pool.by_actor(client_ids)
        out: dict[int, dict[str, Any]] = {}
        for part in self._get([self.actors[a].get_state.remote(c) for a, c in by_actor.items()], "client state"):
            out.update(part)
        return out

    def set_state(self, states: dict[int, dict[str, Any]]) -> None:
        by_actor = {a: {cid: states[cid] for cid in ids} for a, ids in self.pool.by_actor(states).items()}
        self._get([self.actors[a].set_state.remote(s) for a, s in by_actor.items()], "restoring client state")

    def shutdown(self) -> None:
        import ray

        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.pool.clear()
        self.specs = []
        self._recipes = []
        self._release()

    def _release(self) -> None:
        """Give the run's placement group back (the next queued run on the cluster gets it)."""
        if getattr(self, "placement", None) is not None:
            self.placement.release()
            self.placement = None


def _failure(exc: Exception, restarted: bool) -> HostFailure:
    """The :class:`HostFailure` of an actor whose answer Ray could not give (``exc``)."""
    return HostFailure(f"failed: {type(exc).__name__}: {str(exc).splitlines()[0]}", restarted=restarted)


def _fail(failure: HostFailure, a: int, items: Any, result: ExecResult) -> None:
    """Every client of ``items`` (actor ``a``'s) failed for ``failure``'s reason."""
    for cid, _, _ in items:
        result.failed.append(cid)
        result.errors[cid] = f"actor {a} {failure.reason}"


def _fetch_parts(out: list[Any]) -> list[Any]:
    """An answer's parts with those the actor stored in the object store as it went (see
    :meth:`ClientActor.run`) fetched."""
    import ray

    refs = [p for p in out if isinstance(p, ray.ObjectRef)]
    if not refs:
        return out
    got = dict(zip(map(id, refs), ray.get(refs)))
    return [got.get(id(p), p) for p in out]


#: Without runtime.round_timeout, a round that waits longer than runtime.stall_warning times the
#: median round (but at least STALL_FLOOR_S; STALL_FIRST_S before any round finished) is reported.
STALL_FLOOR_S = 60.0


STALL_FIRST_S = 300.0
