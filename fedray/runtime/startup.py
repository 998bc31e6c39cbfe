"""Starting the run's client actors and setting restarted ones up again.

The actors go into the bundles of the run's placement group (:mod:`fedray.runtime.placement`),
``runtime.actor_batch`` at a time; each gets its clients' recipes (kept in the object store, so
that a restarted actor gets them again) and builds its shards itself.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from fedray.core.errors import RoundFailedError
from fedray.data.federation import ClientSpec
from fedray.data.recipes import recipe_ids
from fedray.runtime.placement import Placement

log = logging.getLogger(__name__)


def actor_options(runtime: Any, actor_cpus: float, runtime_env: dict[str, Any] | None) -> dict[str, Any]:
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


def start_actors(chunks: list[list[ClientSpec]], options: dict[str, Any], host_args: tuple[Any, ...],
                 runtime: Any, placement: Placement, preload: tuple[str, ...]
                 ) -> tuple[list[Any], np.ndarray, list[Any]]:
    """Create one actor per chunk of clients, ``runtime.actor_batch`` at a time, and hand each its recipes
    and ``host_args`` (the rest of :class:`~fedray.runtime.host.ClientHost`'s arguments).

    Returns the actors, ``owner`` (client id -> actor index) and each actor's recipes in the object
    store; raises RoundFailedError when a batch cannot be placed within ``runtime.startup_timeout``.
    """
    import ray

    from fedray.actors.client_actor import ClientActor

    actors: list[Any] = []
    ids = [recipe_ids(chunk) for chunk in chunks]
    owner = np.full(max((int(i[-1]) + 1 for i in ids if len(i)), default=0), -1, dtype=np.int64)
    recipes: list[Any] = []
    batch = max(1, int(runtime.actor_batch))
    for start in range(0, len(chunks), batch):
        group = chunks[start : start + batch]
        new = [ClientActor.options(**options, **placement.options(start + i)).remote() for i in range(len(group))]
        if preload:  # the import runs beside the shards' construction (an actor runs its calls in order)
            for a in new:
                a.preload.remote(tuple(preload))
        refs = [ray.put(chunk) for chunk in group]  # kept: a restarted actor gets them again
        recipes.extend(refs)
        # Wait for the batch to be created before asking for more (bounded start-up pressure).
        try:
            ray.get([a.ready.remote(r, host_args) for a, r in zip(new, refs)], timeout=runtime.startup_timeout)
        except ray.exceptions.GetTimeoutError:
            raise RoundFailedError(
                f"client actors could not be placed within runtime.startup_timeout={runtime.startup_timeout} s "
                f"(each asks for {options.get('num_cpus')} CPU, {options.get('num_gpus', 0)} GPU, "
                f"{options.get('resources', {})}); cluster has {ray.cluster_resources()}") from None
        for a_idx in range(len(group)):
            owner[ids[start + a_idx]] = start + a_idx
        actors.extend(new)
    return actors, owner, recipes


def set_up_again(actors: list[Any], idxs: list[int], scaler: tuple | None, recipes: list[Any],
                 host_args: tuple[Any, ...], timeout: float = 120.0) -> set[int]:
    """Set up actors ``idxs`` again after a crash: Ray restarted them (``runtime.max_restarts``); each
    rebuilds its shards from its recipes and applies the scaler again (:meth:`ClientActor.adopt`).
    Client state of a restarted actor starts empty. Returns the actors found dead for good."""
    import ray
    from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

    dead: set[int] = set()
    deadline = time.monotonic() + timeout
    pending = list(idxs)
    while pending:
        refs = {a: actors[a].adopt.remote(scaler, recipes[a], host_args) for a in pending}
        pending = []
        for a, ref in refs.items():
            try:
                ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                log.warning("client actor %d restarted: shards rebuilt from their recipes, client state reset", a)
            except ActorDiedError:
                dead.add(a)
                log.error("client actor %d is dead and will not be restarted (runtime.max_restarts); "
                          "its clients fail from now on", a)
            except RayActorError:  # unavailable while restarting: ask again
                pending.append(a)
            except GetTimeoutError:  # the set-up call stays queued ahead of the next round
                log.warning("client actor %d is still restarting after %.0f s", a, timeout)
        if pending:
            if time.monotonic() > deadline:
                log.warning("client actors %s still unavailable after %.0f s", pending, timeout)
                return dead
            time.sleep(0.2)
    return dead
