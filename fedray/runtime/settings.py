"""The runtime's settings, typed from the configuration to the executors.

The API floor reads them from the configuration's ``runtime`` section by name
(:func:`fedray.api.settings.runtime_settings`) and hands the frozen object to
:func:`fedray.runtime.backends.make_executor`, as it hands
:class:`~fedray.loop.settings.ServerSettings` to the round loop. Each field is the key of the same
name under ``runtime`` (its doc: :class:`fedray.api.config.RuntimeConfig`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ClientResourceSettings:
    """What Ray reserves for each client actor (``runtime.client_resources``)."""

    num_cpus: float | None = None
    num_gpus: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeSettings:
    """Where clients run, with their resources and deadlines (``runtime``)."""

    backend: Literal["local", "ray"] = "ray"
    address: str | None = None
    num_cpus: int | None = None
    clients_per_actor: int | Literal["auto"] = "auto"
    client_resources: ClientResourceSettings = field(default_factory=ClientResourceSettings)
    round_timeout: float | None = None
    placement: Literal["pack", "spread"] = "pack"
    queue_timeout: float | None = None
    wait_for_nodes: bool = False
    actor_batch: int = 64
    max_restarts: int = 3
    startup_timeout: float = 300.0
    call_timeout: float = 300.0
    stall_warning: float = 10.0
    progress: bool | None = None
    batched: bool = True
    resident: Literal["auto", "always", "never"] = "auto"
    ship_code: Literal["auto", "always", "never"] = "auto"
    ship_max_mb: float = 50.0
    runtime_env: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ShipSettings:
    """What a run ships to Ray's workers, and how it joins Ray (:mod:`fedray.runtime.shipping`).

    ``modules``: the top-level modules, other than fedray, that the run's code comes from (the
    algorithm's class, a model factory named in ``algorithm.params.model``, the user's layers); the
    rest are the keys of the same name under ``runtime``."""

    modules: tuple[str, ...] = ()
    ship_code: Literal["auto", "always", "never"] = "auto"
    ship_max_mb: float = 50.0
    runtime_env: dict[str, Any] = field(default_factory=dict)
    address: str | None = None
    num_cpus: int | None = None
