"""The frozen settings the floors below the API take, read from the configuration by name.

No floor below ``api`` reads the raw configuration (DESIGN.md): the round loop gets a
:class:`~fedray.loop.settings.ServerSettings` (built per run by :mod:`fedray.api.runner`), the
executors a :class:`~fedray.runtime.settings.RuntimeSettings`, the layers a
:class:`~fedray.layers.settings.PrivacySettings` and a :class:`~fedray.layers.settings.FaultSettings`,
and the layer stack a list of layers (:func:`stack_layers`), the user's own among them.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from fedray.core.errors import ConfigError
from fedray.core.plugins import first_line, load_reference
from fedray.core.registry import plugin_modules
from fedray.layers.base import Layer, check_layer
from fedray.layers.faults import FaultInjector
from fedray.layers.messages import MessageLog
from fedray.layers.privacy import PrivacyLayer
from fedray.layers.settings import DPSettings, FaultSettings, PrivacySettings
from fedray.runtime.executor import Executor
from fedray.runtime.placement import client_bundles as _bundles
from fedray.runtime.settings import ClientResourceSettings, RuntimeSettings, ShipSettings


def privacy_settings(cfg: Any) -> PrivacySettings:
    """``cfg.privacy`` (an ExperimentConfig's) as :class:`PrivacySettings`."""
    p = cfg.privacy
    dp = None if p.dp is None else DPSettings(clip=p.dp.clip, noise_multiplier=p.dp.noise_multiplier,
                                              delta=p.dp.delta, seeded_noise=p.dp.seeded_noise,
                                              adjacency=p.dp.adjacency)
    bounds = None if p.feature_bounds is None else tuple((float(lo), float(hi)) for lo, hi in p.feature_bounds)
    return PrivacySettings(secure_aggregation=p.secure_aggregation, mask_neighbors=p.mask_neighbors,
                           min_cohort=p.min_cohort, secagg_threshold=p.secagg_threshold,
                           release_rule=p.release_rule, cohorts=p.cohorts, blocks_seed=p.blocks_seed,
                           release_log=p.release_log, dp=dp, min_samples_guard=p.min_samples_guard,
                           min_cluster_count=p.min_cluster_count, feature_bounds=bounds)


def fault_settings(cfg: Any) -> FaultSettings:
    """``cfg.faults`` as :class:`FaultSettings`."""
    f = cfg.faults
    return FaultSettings(crash_probability=f.crash_probability, delay_probability=f.delay_probability,
                         delay_seconds=f.delay_seconds, delay_mode=f.delay_mode,
                         crashes=tuple((int(r), int(c)) for r, c in f.crashes), crash_scope=f.crash_scope)


def runtime_settings(cfg: Any) -> RuntimeSettings:
    """``cfg.runtime`` as :class:`RuntimeSettings` (every key by name)."""
    rt = cfg.runtime
    res = rt.client_resources
    fields = {k: getattr(rt, k) for k in RuntimeSettings.__dataclass_fields__ if k != "client_resources"}
    return RuntimeSettings(**fields, client_resources=ClientResourceSettings(
        num_cpus=res.num_cpus, num_gpus=res.num_gpus, custom=dict(res.custom)))


def ship_settings(cfg: Any) -> ShipSettings:
    """What ``cfg``'s run ships to Ray's workers: the modules its code comes from (the algorithm, a model
    factory in ``algorithm.params.model``, the user's layers) and the ``runtime`` keys of the same name."""
    rt = cfg.runtime
    modules = plugin_modules(cfg.algorithm.name, (cfg.algorithm.params or {}).get("model"), getattr(cfg, "layers", ()))
    return ShipSettings(modules=tuple(modules), ship_code=rt.ship_code, ship_max_mb=rt.ship_max_mb,
                        runtime_env=dict(rt.runtime_env or {}), address=rt.address, num_cpus=rt.num_cpus)


def client_bundles(config: Any, n_clients: int | None = None, total_cpus: float | None = None
                   ) -> list[dict[str, float]]:
    """The placement group bundles of a run's client actors, one per actor (``fedray.client_bundles``).

    ``config`` is an experiment configuration (its ``runtime`` and ``federation.n_clients``) or a
    runtime configuration with ``n_clients`` given. ``total_cpus`` fixes the CPUs an ``"auto"`` layout
    fills (e.g. a Ray Tune trial's share of the cluster); None asks the connected cluster. A run inside a
    placement group with ``[{"CPU": 1}] + client_bundles(config, total_cpus=T)`` lays its clients out
    the same way (its group's client bundles hold T CPUs).
    """
    runtime = getattr(config, "runtime", config)
    if n_clients is None:
        n_clients = getattr(getattr(config, "federation", None), "n_clients", None)
    return _bundles(runtime, n_clients, total_cpus)


def user_layers(cfg: Any) -> list[Any]:
    """The user's layers of ``cfg.layers``: objects given from Python as they are, and each
    ``{name: package.module:ClassName, params: {...}}`` made as ``ClassName(**params)`` (one-line errors)."""
    out = []
    for i, entry in enumerate(cfg.layers):
        where = f"layers[{i}]"
        if isinstance(entry, Layer) or not hasattr(entry, "name") or not hasattr(entry, "params"):
            out.append(check_layer(entry, where))
            continue
        cls = load_reference(entry.name, f"{where}.name")
        if not inspect.isclass(cls):
            raise ConfigError(f"{where}.name: {entry.name!r} is not a class (it is a {type(cls).__name__})")
        try:
            obj = cls(**entry.params)
        except Exception as exc:  # noqa: BLE001 - any error of the user's class, in one line
            raise ConfigError(f"{where}.params: {cls.__qualname__}(**{entry.params!r:.80}) failed: "
                              f"{type(exc).__name__}: {first_line(exc)}") from None
        out.append(check_layer(obj, where))
    return out


def stack_layers(cfg: Any, disclosures: dict[str, int] | None = None) -> list[Callable[[Executor], Executor] | Layer]:
    """The layers ``cfg`` asks for, from the bottom (:func:`fedray.layers.stack.build_stack`): faults, the
    message log, the user's layers, privacy."""
    layers: list[Callable[[Executor], Executor] | Layer] = []
    faults = fault_settings(cfg)
    if faults.active:
        layers.append(lambda inner: FaultInjector(inner, faults, cfg.seed))
    if cfg.output.messages or cfg.output.message_payloads:
        keep = bool(cfg.output.message_payloads)
        layers.append(lambda inner: MessageLog(inner, keep_payloads=keep))
    layers.extend(user_layers(cfg))
    privacy = privacy_settings(cfg)
    if privacy.active:
        layers.append(lambda inner: PrivacyLayer(inner, privacy, cfg.seed, disclosures))
    return layers
