"""Where a run's client actors go: their layout, their resource bundles, and one placement group.

A run reserves all its client actors at once with a Ray placement group (one
bundle per actor, strategy ``PACK`` or ``SPREAD`` from ``runtime.placement``), so
that runs sharing a cluster queue for it instead of each holding part of their
actors and waiting for the rest forever. While the group waits, a line says so
every so often (:func:`reserve`); a request that can never fit the cluster fails
in one line before anything waits (:func:`check_fits`).

Inside a placement group that is already there (a Ray Tune trial whose resources
are a ``PlacementGroupFactory``), no new group is made: the client actors go into
that group's bundles 1, 2, ... (bundle 0 is the trial's driver), and a group too
small for them fails in one line. Such a trial asks for
``[{"CPU": 1}] + fedray.client_bundles(config)``.

Public helpers: :func:`client_bundles` (the bundles of a runtime layout; users call
:func:`fedray.client_bundles` with their configuration),
:func:`resolve_layout`, :func:`client_capacity`, :class:`Placement`.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from fedray.core.errors import ConfigError, RoundFailedError

log = logging.getLogger(__name__)

#: ``runtime.placement`` -> the placement group strategy of the run's client actors.
STRATEGIES = {"pack": "PACK", "spread": "SPREAD"}

#: Seconds between the "waiting for resources" lines: the first after WAIT_FIRST_S, then
#: twice as long each time, up to WAIT_MAX_S.
WAIT_FIRST_S = 5.0
WAIT_MAX_S = 60.0

# Resources held by the placement groups this process made and has not released (id of the
# Placement -> summed bundles): they are not given back while this process waits for another.
_HELD: dict[int, dict[str, float]] = {}


def cluster_cpus() -> float:
    import ray

    return float(ray.cluster_resources().get("CPU", 1.0))


def client_capacity(custom: dict[str, float] | None = None) -> tuple[float, int | None]:
    """CPUs of the nodes that can host client actors, and how many actors the custom resources allow.

    Without ``custom`` every alive node counts: ``(cluster CPUs, None)``. With it
    (e.g. ``{"fedray_client": 1}`` to keep clients off a head node that does not
    declare ``fedray_client``) only nodes offering every named resource count, and
    the second value is the number of actors their amounts admit.
    """
    import ray

    wants = {k: float(v) for k, v in (custom or {}).items() if float(v) > 0}
    if not wants:
        return cluster_cpus(), None
    cpus, slots = 0.0, 0
    for node in ray.nodes():
        res = node.get("Resources", {}) if node.get("Alive", True) else {}
        if res and all(res.get(k, 0.0) >= v for k, v in wants.items()):
            cpus += float(res.get("CPU", 0.0))
            slots += min(int(res.get(k, 0.0) // v) for k, v in wants.items())
    return (cpus if cpus > 0 else cluster_cpus()), (slots if slots > 0 else None)


def resolve_layout(n_clients: int, clients_per_actor: int | str, actor_cpus: float | None, total_cpus: float,
                   num_gpus: float = 0.0, max_actors: int | None = None) -> tuple[int, float]:
    """(clients per actor, CPUs per actor) for ``n_clients`` on a cluster with ``total_cpus``.

    ``max_actors`` (from custom resources, see :func:`client_capacity`) caps the
    number of actors of the ``"auto"`` layout.
    """
    if clients_per_actor == "auto":
        per = actor_cpus if actor_cpus else 1.0
        slots = max(1, int(total_cpus // per)) if per > 0 else n_clients
        if max_actors:
            slots = max(1, min(slots, int(max_actors)))
        n_actors = max(1, min(n_clients, slots))
        cpa = math.ceil(n_clients / n_actors)
    else:
        cpa = int(clients_per_actor)
        if cpa < 1:
            raise ConfigError(f"runtime.clients_per_actor: must be >= 1 or 'auto'; got {clients_per_actor!r}")
    n_actors = math.ceil(n_clients / cpa)
    if actor_cpus is None:
        # Enough actors to fill the cluster get 1 CPU each; more share the CPUs.
        actor_cpus = 1.0 if n_actors <= total_cpus else max(0.01, math.floor(100 * total_cpus / n_actors) / 100)
    return cpa, float(actor_cpus)


@dataclass(frozen=True)
class Layout:
    """How a run's clients are packed into actors, and what Ray reserves for each actor."""

    n_clients: int
    clients_per_actor: int
    actor_cpus: float
    num_gpus: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)

    @property
    def n_actors(self) -> int:
        return math.ceil(self.n_clients / self.clients_per_actor)

    def bundle(self) -> dict[str, float]:
        """One actor's resources as a placement group bundle (``CPU``, ``GPU``, custom names)."""
        out = {"CPU": float(self.actor_cpus)}
        if self.num_gpus:
            out["GPU"] = float(self.num_gpus)
        out.update({k: float(v) for k, v in self.custom.items() if float(v) > 0})
        return out


def layout_for(runtime: Any, n_clients: int, total_cpus: float | None = None,
               max_actors: int | None = None) -> Layout:
    """The :class:`Layout` of ``n_clients`` under ``runtime`` (a RuntimeConfig).

    ``total_cpus`` is what the ``"auto"`` layout fills; None asks the connected
    Ray cluster (:func:`client_capacity`), or the current placement group's client
    bundles when the driver runs inside one.
    """
    res = runtime.client_resources
    if total_cpus is None:
        current = current_group()
        if current is not None:
            total_cpus = sum(float(b.get("CPU", 0.0)) for b in current.bundle_specs[1:]) or 1.0
        else:
            total_cpus, max_actors = client_capacity(res.custom)
    cpa, cpus = resolve_layout(n_clients, runtime.clients_per_actor, res.num_cpus, total_cpus, res.num_gpus,
                               max_actors)
    return Layout(n_clients, cpa, cpus, float(res.num_gpus or 0.0), dict(res.custom))


def client_bundles(runtime: Any, n_clients: int, total_cpus: float | None = None) -> list[dict[str, float]]:
    """The placement group bundles of a run's client actors, one per actor, for ``n_clients`` clients
    laid out by ``runtime`` (:class:`~fedray.runtime.settings.RuntimeSettings`, or the configuration's
    ``runtime`` section). ``total_cpus`` fixes the CPUs an ``"auto"`` layout fills (e.g. a Ray Tune
    trial's share of the cluster); None asks the connected cluster. Users call
    :func:`fedray.client_bundles` with their configuration."""
    if not n_clients:
        raise ConfigError("federation.n_clients: the client bundles need the number of clients; give n_clients")
    layout = layout_for(runtime, int(n_clients), total_cpus)
    return [layout.bundle() for _ in range(layout.n_actors)]


def current_group() -> Any:
    """The placement group this driver runs in (a Ray Tune trial), or None."""
    import ray

    if not ray.is_initialized():
        return None
    from ray.util.placement_group import get_current_placement_group

    return get_current_placement_group()


def _fmt(res: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in sorted(res.items()) if v)


def _sum(bundles: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            out[k] = out.get(k, 0.0) + float(v)
    return out


def check_fits(bundles: list[dict[str, float]], wait_for_nodes: bool = False) -> None:
    """Fail in one line when ``bundles`` can never be reserved on the cluster as it is.

    Their sum must fit the cluster's total resources and each bundle one alive
    node. The cluster is taken as fixed: with ``wait_for_nodes`` (an autoscaler adds
    nodes on demand) the check only logs what is missing and the group waits.
    """
    import ray

    total = ray.cluster_resources()
    need = _sum(bundles)
    short = {k: v for k, v in need.items() if total.get(k, 0.0) + 1e-9 < v}
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive", True)]
    b = bundles[0] if bundles else {}
    no_node = bundles and not any(all(r.get(k, 0.0) + 1e-9 >= v for k, v in b.items()) for r in nodes)
    if not short and not no_node:
        _check_own(need, total)
        return
    lacking = [k for k, v in b.items() if not any(r.get(k, 0.0) + 1e-9 >= v for r in nodes)]
    key = next(iter(short), None) or (lacking or list(b))[0]
    where = "runtime.client_resources." + ({"CPU": "num_cpus", "GPU": "num_gpus"}.get(key) or f"custom.{key}")
    what = (f"{len(bundles)} client actors need {need[key]:g} {key} in all" if short else
            f"each client actor asks for {b[key]:g} {key}, more than any one node has")
    line = (f"{where}: {what} but the Ray cluster has {total.get(key, 0.0):g} {key}"
            f"{' in all' if short else ''}; lower the request, set "
            "runtime.clients_per_actor, add nodes, or set runtime.wait_for_nodes for a cluster that grows on demand")
    if wait_for_nodes:
        log.warning("%s (waiting for nodes: runtime.wait_for_nodes)", line)
        return
    raise ConfigError(line)


def _check_own(need: dict[str, float], total: dict[str, float]) -> None:
    """Fail when what this process already holds for other runs leaves too little for ever."""
    held = _sum(list(_HELD.values()))
    for key, amount in need.items():
        if held.get(key, 0.0) and total.get(key, 0.0) - held[key] + 1e-9 < amount:
            raise ConfigError(
                f"runtime: this run's client actors need {amount:g} {key} but this process already holds "
                f"{held[key]:g} of the cluster's {total.get(key, 0.0):g} {key} for another run's actors (an open "
                "fedray.Session?); close it first, or lower runtime.client_resources")


class Placement:
    """Where each client actor of a run goes: a bundle of a placement group.

    :meth:`reserve` makes the run's own group (or finds the trial's group it runs
    in); :meth:`options` gives an actor's Ray scheduling options; :meth:`release`
    removes a group this run made (never one it found).
    """

    def __init__(self, group: Any, indices: list[int], owned: bool) -> None:
        self.group = group
        self.indices = indices  # actor i -> bundle index of ``group``
        self.owned = owned

    def options(self, actor: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=self.group, placement_group_bundle_index=self.indices[actor])}

    def release(self) -> None:
        _HELD.pop(id(self), None)
        if self.owned and self.group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.group)
            except Exception:  # noqa: BLE001 - Ray is going down; the group goes with it
                pass
        self.group = None


def reserve(layout: Layout, runtime: Any) -> Placement:
    """The :class:`Placement` of ``layout``'s actors: inside the current placement group when
    the driver runs in one, else a new group reserved at once (waiting, with a line every
    so often, until the cluster has room or ``runtime.queue_timeout`` passes)."""
    current = current_group()
    bundles = [layout.bundle() for _ in range(layout.n_actors)]
    if current is not None:
        return Placement(current, fit_into(current.bundle_specs, bundles), owned=False)
    check_fits(bundles, bool(getattr(runtime, "wait_for_nodes", False)))
    from ray.util.placement_group import placement_group

    group = placement_group(bundles, strategy=STRATEGIES[runtime.placement])
    placement = Placement(group, list(range(len(bundles))), owned=True)
    try:
        _wait_ready(group, bundles, getattr(runtime, "queue_timeout", None))
    except BaseException:
        placement.release()
        raise
    _HELD[id(placement)] = _sum(bundles)
    return placement


def _wait_ready(group: Any, bundles: list[dict[str, float]], queue_timeout: float | None) -> None:
    import ray

    t0 = time.monotonic()
    every = WAIT_FIRST_S
    ready = group.ready()
    while True:
        left = None if queue_timeout is None else queue_timeout - (time.monotonic() - t0)
        step = every if left is None else max(0.0, min(every, left))
        done, _ = ray.wait([ready], timeout=step)
        if done:
            waited = time.monotonic() - t0
            if waited >= WAIT_FIRST_S:
                log.warning("resources reserved after waiting %.0f s; the run starts", waited)
            return
        waited = time.monotonic() - t0
        if queue_timeout is not None and waited >= queue_timeout:
            raise RoundFailedError(
                f"runtime.queue_timeout={queue_timeout:g} s: the {len(bundles)} client actors ({_fmt(_sum(bundles))}) "
                f"could not be reserved; the cluster has {_fmt(ray.available_resources())} free of "
                f"{_fmt(ray.cluster_resources())} (other runs hold the rest)")
        log.warning("waiting for resources for %.0f s: %d client actors need %s; the cluster has %s free of %s "
                    "(other runs hold the rest; this run starts when they finish)", waited, len(bundles),
                    _fmt(_sum(bundles)), _fmt(ray.available_resources()) or "nothing", _fmt(ray.cluster_resources()))
        every = min(WAIT_MAX_S, every * 2)


def fit_into(specs: list[dict[str, float]], bundles: list[dict[str, float]]) -> list[int]:
    """Bundle index (>= 1; bundle 0 is the trial's driver) of the existing group ``specs`` for each
    actor's ``bundles``, first fit; fails in one line when the group is too small."""
    free = [dict(s) for s in specs]
    out: list[int] = []
    for b in bundles:
        for i in range(1, len(free)):
            if all(free[i].get(k, 0.0) + 1e-9 >= v for k, v in b.items()):
                for k, v in b.items():
                    free[i][k] = free[i].get(k, 0.0) - v
                out.append(i)
                break
        else:
            raise ConfigError(
                f"runtime: this run is inside a placement group (a Ray Tune trial?) whose client bundles "
                f"{specs[1:]} cannot hold its {len(bundles)} client actors ({_fmt(_sum(bundles))}); request "
                "[{'CPU': 1}] + fedray.client_bundles(config) for the trial")
    return out
