"""The Ray runtime: clients packed into Ray actors (:class:`fedray.actors.client_actor.ClientActor`).

The run's actors are reserved at once as one placement group (:mod:`fedray.runtime.placement`:
the layout, the bundles, queueing behind other runs), then created in batches into their
bundles; each call's shared input is one object in the object store; replies are collected with
a deadline, late and dead actors are counted, and a restarted actor's shards are rebuilt.
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.core.contract import CohortTasks, Task, one_task
from fedray.core.errors import RoundFailedError
from fedray.core.replies import Replies
from fedray.core.stats import Stats
from fedray.data.checks import Descriptions
from fedray.data.federation import ClientSpec, put_shards
from fedray.data.recipes import recipe_ids
from fedray.runtime.connect import connect
from fedray.runtime.executor import (
    ExecResult,
    Executor,
    collect_outcomes,
    plan_shared,
    sort_replies,
)
from fedray.runtime.host import UniformTasks
from fedray.runtime.placement import Placement, layout_for, reserve
from fedray.runtime.shipping import connect_for

log = logging.getLogger(__name__)


def ensure_ray(address: str | None = None, num_cpus: int | None = None, cfg: Any = None) -> bool:
    """Connect to Ray (``address``) or start an embedded local instance; True if started here.

    Without ``address`` fedray starts its own instance even when another Ray
    cluster runs on this machine; an address is probed first so that a wrong
    one fails in seconds (see :mod:`fedray.runtime.connect`). With the experiment's
    ``cfg``, a Ray Client connection also carries the code to ship
    (:func:`fedray.runtime.shipping.connect_for`).
    """
    if cfg is not None:

        return connect_for(cfg)

    return connect(address, num_cpus)


def _actor_options(runtime: Any, actor_cpus: float, runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """Ray options of a client actor: CPUs, restarts, GPUs and custom resources, runtime_env (the placement
    group bundle comes from :class:`fedray.runtime.placement.Placement`)."""
    res = runtime.client_resources
    options: dict[str, Any] = {"num_cpus": actor_cpus, "max_restarts": runtime.max_restarts,
                               "max_task_retries": 0}
    if res.num_gpus:
        options["num_gpus"] = res.num_gpus
    if res.custom:
        options["resources"] = dict(res.custom)
    if runtime_env:  # fedray and plug-ins for nodes that lack them (fedray.runtime.shipping)
        options["runtime_env"] = runtime_env
    return options


class RayExecutor(Executor):
    """Clients hosted by Ray actors.

    Parameters
    ----------
    specs, seed, supervised, sample_shape
        As for :class:`LocalExecutor`.
    runtime : RuntimeConfig
        ``clients_per_actor``, ``client_resources``, ``placement``, ``actor_batch``.
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
        self.clients_per_actor, actor_cpus = layout.clients_per_actor, layout.actor_cpus
        chunks = [specs[i : i + self.clients_per_actor] for i in range(0, len(specs), self.clients_per_actor)]
        options = _actor_options(runtime, actor_cpus, runtime_env)
        self.actor_cpus = actor_cpus
        # All the actors at once (a placement group), so runs that share a cluster queue for it.
        self.placement: Placement | None = reserve(layout, runtime)
        t0 = time.perf_counter()
        self._host_args = (seed, supervised, tuple(sample_shape), runtime.batched, resident)  # a restarted actor's too
        try:
            self._start_actors(chunks, options, self._host_args, runtime, preload)
        except BaseException:
            self._release()
            raise
        self.n_actors = len(self.actors)
        self._scaler: tuple[np.ndarray, np.ndarray] | None = None  # re-applied to restarted actors
        self._dead: set[int] = set()  # actors that died for good (runtime.max_restarts exhausted)
        self.call_timeout = float(runtime.call_timeout)
        self.stall_warning = float(runtime.stall_warning)
        self._round_s: list[float] = []  # wall time of rounds that waited for every actor (stall warnings)
        # Late tasks cannot be interrupted (Ray does not stop a running actor task): an actor
        # keeps working on one after its deadline. actor index -> (round, ref) of that task, so
        # that lateness it causes in later rounds is counted as spill-over, not as new stragglers.
        self._late: dict[int, tuple[int, Any]] = {}
        log.info("created %d client actors (%d clients each, %.2f CPUs each) in %.1f s",
                 self.n_actors, self.clients_per_actor, actor_cpus, time.perf_counter() - t0)

    def _start_actors(self, chunks: list[list[ClientSpec]], options: dict[str, Any], args: tuple[Any, ...],
                      runtime: Any, preload: tuple[str, ...]) -> None:
        """Create one actor per chunk of clients, ``runtime.actor_batch`` at a time, and hand each its recipes.

        Sets ``actors``, ``owner`` (client id -> actor index, an array) and ``_recipes``; raises
        RoundFailedError when a batch cannot be placed within ``runtime.startup_timeout``.
        """
        import ray

        from fedray.actors.client_actor import ClientActor

        self.actors = []
        ids = [recipe_ids(chunk) for chunk in chunks]
        self.owner = np.full(max((int(i[-1]) + 1 for i in ids if len(i)), default=0), -1, dtype=np.int64)
        self._recipes: list[Any] = []  # per actor: its clients' recipes in the object store
        batch = max(1, int(runtime.actor_batch))
        for start in range(0, len(chunks), batch):
            group = chunks[start : start + batch]
            new = [ClientActor.options(**options, **self.placement.options(start + i)).remote()
                   for i in range(len(group))]
            if preload:  # the import runs beside the shards' construction (an actor runs its calls in order)
                for a in new:
                    a.preload.remote(tuple(preload))
            recipes = [ray.put(chunk) for chunk in group]  # kept: a restarted actor gets them again
            self._recipes.extend(recipes)
            # Wait for the batch to be created before asking for more (bounded start-up pressure).
            try:
                ray.get([a.ready.remote(r, args) for a, r in zip(new, recipes)], timeout=runtime.startup_timeout)
            except ray.exceptions.GetTimeoutError:
                raise RoundFailedError(
                    f"client actors could not be placed within runtime.startup_timeout={runtime.startup_timeout} s "
                    f"(each asks for {options.get('num_cpus')} CPU, {options.get('num_gpus', 0)} GPU, "
                    f"{options.get('resources', {})}); cluster has {ray.cluster_resources()}") from None
            for a_idx in range(len(group)):
                self.owner[ids[start + a_idx]] = start + a_idx
            self.actors.extend(new)

    def preload(self, packages: tuple[str, ...]) -> None:
        """Ask every live actor to import ``packages`` in the background; nothing waits for it."""
        if packages:
            for i, actor in enumerate(self.actors):
                if i not in self._dead:
                    actor.preload.remote(tuple(packages))

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

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        timeout = call.timeout(timeout)  # what is left of the round's deadline, if it has one
        first = one_task(tasks)
        if (first is not None and first.summed and self.sums_in_hosts and timeout is None and not self._dead
                and not self._late and len(tasks) > 1):
            result = self._execute_summed(call, tasks)
            if result is not None:
                return result
        return self._execute_plain(call, tasks, timeout)

    def _execute_summed(self, call: Call, tasks: dict[int, Task]) -> ExecResult | None:
        """A ``Task(summed=True)`` call: every host runs its clients and keeps the replies, then the hosts
        add them in client order, each continuing the sum of the hosts before it (a chain of small calls),
        so that only the sum travels. None when it cannot (the caller runs the call as usual)."""
        import ray

        shared, which = plan_shared(tasks)
        refs = [ray.put(s) for s in shared]
        per_actor = self._per_actor(tasks, which)
        if not all(isinstance(v, UniformTasks) for v in per_actor.values()):
            return None
        order = sorted(per_actor)  # actors own consecutive client ids: actor order is client order
        try:
            outs = self._get([self.actors[a].run_kept.remote(call.stream_round, per_actor[a], *refs) for a in order],
                             call.label())
            if any(not isinstance(o, tuple) for o in outs):
                return None  # a restarted actor: the usual call reports its clients and sets it up again
            if any(o[0] != "kept" for o in outs):
                return self._kept_per_client(order, outs, call)
            acc = None
            for a in order:
                acc = self.actors[a].fold_kept.remote(acc)
            sums = self._get([acc], call.label())[0]
        except RoundFailedError as exc:
            log.debug("%s: a summed call falls back to per-client replies: %s", call.label(), exc)
            return None
        cat = np.concatenate
        ones = {k: np.add.reduce(cat([o[4][k] for o in outs]).astype(np.float64, copy=False), axis=0)
                for k in outs[0][4]}
        total = Stats(**{k: (sums[k] if k in sums else ones[k]) for k in outs[0][5]})  # the statistics' order
        return ExecResult(Replies.summed(cat([o[1] for o in outs]), cat([o[2] for o in outs]),
                                         cat([o[3] for o in outs]), total))

    def _kept_per_client(self, order: list[int], outs: list[tuple[Any, ...]], call: Call) -> ExecResult:
        """A summed call where some host answered client by client (a batched form that declined, a
        client's error, more replies than it keeps): every reply goes to the server, the kept ones
        fetched from their hosts; no client runs twice."""
        kept = [a for a, o in zip(order, outs) if o[0] == "kept"]
        fetched = dict(zip(kept, self._get([self.actors[a].take_kept.remote() for a in kept], call.label())))
        result = ExecResult(Replies())
        for a, o in zip(order, outs):
            collect_outcomes(_fetch_parts(fetched[a] if a in fetched else o[1]), result)
        sort_replies(result)
        result.failed.sort()
        return result

    def _execute_plain(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        import ray
        from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError, RayTaskError

        shared, which = plan_shared(tasks)
        refs = [ray.put(s) for s in shared]
        per_actor = self._per_actor(tasks, which)
        result = ExecResult(Replies())
        for a in (self._dead.intersection(per_actor) if self._dead else ()):
            for cid, _, _ in per_actor.pop(a):
                result.failed.append(cid)
                result.errors[cid] = f"actor {a} is dead (runtime.max_restarts exhausted)"
        if self._late:  # forget late tasks that have finished meanwhile
            done, _ = ray.wait([r for _, r in self._late.values()], num_returns=len(self._late), timeout=0)
            done_ids = {id(r) for r in done}
            self._late = {a: v for a, v in self._late.items() if id(v[1]) not in done_ids}
        busy = dict(self._late)
        t0 = time.monotonic()
        futures = {self.actors[a].run.remote(call.stream_round, items, *refs): a for a, items in per_actor.items()}
        ready, not_ready = self._wait(call, list(futures), timeout)
        broken: list[int] = []
        for fut in ready:
            a = futures[fut]
            try:
                out = _fetch_parts(ray.get(fut))
            except (RayActorError, RayTaskError, GetTimeoutError, ObjectLostError) as exc:
                for cid, _, _ in per_actor[a]:
                    result.failed.append(cid)
                    result.errors[cid] = f"actor {a} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                if isinstance(exc, RayActorError):
                    broken.append(a)
                continue
            if isinstance(out, str):  # a restarted actor, not set up again yet (see ClientActor.run)
                for cid, _, _ in per_actor[a]:
                    result.failed.append(cid)
                    result.errors[cid] = f"actor {a} was restarted: its shards were rebuilt, its client state is lost"
                broken.append(a)
                continue
            collect_outcomes(out, result)
        if broken:
            self._restore(sorted(broken))
        for fut in not_ready:
            a = futures[fut]
            result.late.extend(cid for cid, _, _ in per_actor[a])
            if a in busy:
                result.spillover.extend(cid for cid, _, _ in per_actor[a])
            self._late[a] = (call.stream_round, fut)
        if not not_ready and call.training:
            self._round_s.append(time.monotonic() - t0)
        result.spillover.sort()
        sort_replies(result)
        result.failed.sort()
        result.late.sort()
        return result

    def _per_actor(self, tasks: dict[int, Task], which: dict[int, int]) -> dict[int, Any]:
        """Each actor's items (client-id order): a list of (client id, task, shared index), or one
        :class:`~fedray.runtime.host.UniformTasks` where all of them run one task."""
        first = one_task(tasks)
        if first is not None and len(tasks) > 1:
            arr = tasks.ids if isinstance(tasks, CohortTasks) else np.asarray(sorted(tasks), dtype=np.int64)
            owners = self.owner[arr]
            cuts = np.flatnonzero(np.diff(owners)) + 1 if np.all(np.diff(owners) >= 0) else None
            if cuts is not None:  # actors own consecutive client ids: one slice each
                sidx = which[int(arr[0])]
                return {int(owners[part[0]]): UniformTasks(arr[part], first, sidx)
                        for part in np.split(np.arange(len(arr)), cuts)}
        per_actor: dict[int, Any] = defaultdict(list)
        owner = self.owner
        for cid in sorted(tasks):
            per_actor[int(owner[cid])].append((cid, tasks[cid], which[cid]))
        return per_actor

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

    def _restore(self, idxs: list[int], timeout: float = 120.0) -> None:
        """Set up actors again after a crash: Ray restarted them (``runtime.max_restarts``) and
        their constructor rebuilt the shards from the recipes; the scaler is applied again
        (:meth:`ClientActor.adopt`). Client state of a restarted actor starts empty."""
        import ray
        from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

        deadline = time.monotonic() + timeout
        pending = list(idxs)
        while pending:
            refs = {a: self.actors[a].adopt.remote(self._scaler, self._recipes[a], self._host_args) for a in pending}
            pending = []
            for a, ref in refs.items():
                try:
                    ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                    log.warning("client actor %d restarted: shards rebuilt from their recipes, client state reset", a)
                except ActorDiedError:
                    self._dead.add(a)
                    log.error("client actor %d is dead and will not be restarted (runtime.max_restarts); "
                              "its clients fail from now on", a)
                except RayActorError:  # unavailable while restarting: ask again
                    pending.append(a)
                except GetTimeoutError:  # the set-up call stays queued ahead of the next round
                    log.warning("client actor %d is still restarting after %.0f s", a, timeout)
            if pending:
                if time.monotonic() > deadline:
                    log.warning("client actors %s still unavailable after %.0f s", pending, timeout)
                    return
                time.sleep(0.2)

    def gather_data(self, labels: bool = True):
        out = []
        for part in self._call_all("gather_data", labels):
            out.extend(part)
        return sorted(out, key=lambda t: t[0])

    def get_state(self, client_ids: list[int]) -> dict[int, dict[str, Any]]:
        by_actor: dict[int, list[int]] = defaultdict(list)
        for cid in client_ids:
            by_actor[int(self.owner[cid])].append(cid)
        out: dict[int, dict[str, Any]] = {}
        for part in self._get([self.actors[a].get_state.remote(c) for a, c in by_actor.items()], "client state"):
            out.update(part)
        return out

    def set_state(self, states: dict[int, dict[str, Any]]) -> None:
        by_actor: dict[int, dict[int, dict]] = defaultdict(dict)
        for cid, st in states.items():
            by_actor[int(self.owner[cid])][cid] = st
        self._get([self.actors[a].set_state.remote(s) for a, s in by_actor.items()], "restoring client state")

    def shutdown(self) -> None:
        import ray

        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors = []
        self.specs = []
        self._recipes = []
        self._release()

    def _release(self) -> None:
        """Give the run's placement group back (the next queued run on the cluster gets it)."""
        if getattr(self, "placement", None) is not None:
            self.placement.release()
            self.placement = None


def _fetch_parts(out: Any) -> Any:
    """An actor's answer with the parts it stored in the object store as it went (see
    :meth:`ClientActor.run`) fetched."""
    import ray

    if not isinstance(out, list) or not any(isinstance(p, ray.ObjectRef) for p in out):
        return out
    refs = [p for p in out if isinstance(p, ray.ObjectRef)]
    got = dict(zip(map(id, refs), ray.get(refs)))
    return [got[id(p)] if isinstance(p, ray.ObjectRef) else p for p in out]


#: Without runtime.round_timeout, a round that waits longer than runtime.stall_warning times the
#: median round (but at least STALL_FLOOR_S; STALL_FIRST_S before any round finished) is reported.
STALL_FLOOR_S = 60.0


STALL_FIRST_S = 300.0
