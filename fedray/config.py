"""The experiment configuration: one validated object, from YAML or keywords.

Every value is checked before Ray starts; an error names the key, the value and
what is allowed. Dotted overrides (``federation.n_clients=100``) are applied to
the raw mapping before validation.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fedray.algorithm import format_validation_error, get_algorithm, make_params
from fedray.errors import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AlgorithmConfig(_Section):
    name: str = "kmeans"
    params: dict[str, Any] = Field(default_factory=dict)


class DataConfig(_Section):
    dataset: str = "sklearn:iris"
    data_dir: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    partition: dict[str, Any] = Field(default_factory=dict)
    scale: Literal["none", "standard", "minmax"] = "none"
    feature_columns: list[str] | None = None
    label_column: str | None = None
    client_column: str | None = None


class FederationConfig(_Section):
    n_clients: int | None = Field(default=10, ge=1)
    fraction: float = Field(default=1.0, gt=0.0, le=1.0)
    rounds: int = Field(default=100, ge=1)
    min_clients: int = Field(default=1, ge=1)
    round_retries: int = Field(default=0, ge=0, description="re-run a round that got fewer than min_clients answers")


class ClientResources(_Section):
    num_cpus: float | None = Field(default=None, gt=0)
    num_gpus: float = Field(default=0.0, ge=0)
    custom: dict[str, float] = Field(default_factory=dict)


class RuntimeConfig(_Section):
    backend: Literal["local", "ray"] = "ray"
    address: str | None = None
    num_cpus: int | None = Field(default=None, ge=1)
    clients_per_actor: int | Literal["auto"] = "auto"
    client_resources: ClientResources = Field(default_factory=ClientResources)
    round_timeout: float | None = Field(default=None, gt=0)
    placement: Literal["pack", "spread"] = "pack"
    actor_batch: int = Field(default=64, ge=1)
    max_restarts: int = Field(default=0, ge=-1)
    startup_timeout: float = Field(default=300.0, gt=0)
    progress: bool | None = None
    # Code shipping (fedray.shipping): what reaches Ray workers through runtime_env.
    ship_code: Literal["auto", "always", "never"] = "auto"
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="Ray runtime_env, merged with fedray's")

    @field_validator("clients_per_actor")
    @classmethod
    def _cpa(cls, v: Any) -> Any:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be a positive integer or 'auto'")
        return v


class EvaluationConfig(_Section):
    central_baseline: bool = False


class OutputConfig(_Section):
    directory: str | None = None
    overwrite: bool = False  # replace the contents of a non-empty output folder (else it is refused)
    plots: bool = True
    messages: bool = False  # write messages.parquet (every message: round, client, direction, names, shapes, bytes)
    message_payloads: bool = False  # also keep what the server received on the Result (audits, tests)


class FaultsConfig(_Section):
    """Injected client faults (see docs/reliability.md). All off by default."""

    crash_probability: float = Field(default=0.0, ge=0.0, lt=1.0)
    delay_probability: float = Field(default=0.0, ge=0.0, le=1.0)
    delay_seconds: float = Field(default=0.0, ge=0.0)
    delay_mode: Literal["virtual", "sleep"] = "virtual"
    crashes: list[tuple[int, int]] = Field(default_factory=list, description="(round, client id) pairs")
    crash_scope: Literal["client", "actor"] = "client"

    @property
    def active(self) -> bool:
        return bool(self.crash_probability or self.crashes or (self.delay_probability and self.delay_seconds))


class DPConfig(_Section):
    """Gaussian mechanism on clients' statistics: clip to L2 norm ``clip``, noise std ``noise_multiplier * clip``."""

    clip: float = Field(gt=0)
    noise_multiplier: float = Field(gt=0)
    delta: float = Field(default=1e-5, gt=0, lt=1)


class PrivacyConfig(_Section):
    secure_aggregation: bool = False
    mask_neighbors: int | None = Field(default=None, ge=2, description="pairwise masks with this many peers (None: all)")
    dp: DPConfig | None = None
    min_samples_guard: bool = False

    @property
    def active(self) -> bool:
        return bool(self.secure_aggregation or self.dp is not None or self.min_samples_guard)


class CheckpointConfig(_Section):
    every: int = Field(default=0, ge=0, description="save a checkpoint every N rounds (0: never)")
    directory: str | None = None  # default: <output folder>/checkpoint


class ExperimentConfig(_Section):
    """A whole experiment. Build with :func:`make_config`."""

    seed: int = Field(default=0, ge=0)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    federation: FederationConfig = Field(default_factory=FederationConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    extra: dict[str, Any] = Field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set ``raw["a"]["b"]["c"] = value`` for ``key = "a.b.c"`` (creating levels)."""
    parts = key.split(".")
    cur = raw
    for p in parts[:-1]:
        nxt = cur.get(p)
        if nxt is None:
            nxt = cur[p] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"{key}: {p!r} is not a section (it holds {nxt!r})")
        cur = nxt
    cur[parts[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """``"federation.n_clients=100"`` -> (``"federation.n_clients"``, 100) (value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. federation.n_clients=100")
    key, _, value = item.partition("=")
    try:
        parsed = yaml.safe_load(value) if value != "" else None
    except yaml.YAMLError:
        parsed = value
    return key.strip(), parsed


def _nest_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments to a raw mapping; ``federation__n_clients=5`` or dotted keys work too."""
    raw: dict[str, Any] = {}
    for k, v in kwargs.items():
        key = k.replace("__", ".")
        if "." in key:
            set_dotted(raw, key, v)
        elif isinstance(v, dict) and isinstance(raw.get(key), dict):
            raw[key].update(v)
        else:
            raw[key] = v
    return raw


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    return raw


def make_config(config: ExperimentConfig | dict | str | Path | None = None,
                overrides: list[str] | dict[str, Any] | None = None, **kwargs: Any) -> ExperimentConfig:
    """Validate a configuration.

    Parameters
    ----------
    config : ExperimentConfig, mapping, path to a YAML file, or None
    overrides : list of ``"key=value"`` strings or a mapping of dotted keys
    **kwargs
        Top-level sections or dotted keys (``federation={"n_clients": 5}`` or
        ``**{"federation.n_clients": 5}``).

    Raises
    ------
    ConfigError
        Naming each bad key, its value and what is allowed.
    """
    if isinstance(config, ExperimentConfig):
        raw = config.to_dict()
    elif isinstance(config, (str, Path)):
        raw = load_yaml(config)
    elif config is None:
        raw = {}
    else:
        raw = copy.deepcopy(dict(config))
    for k, v in _nest_kwargs(kwargs).items():
        if isinstance(v, dict) and isinstance(raw.get(k), dict):
            merged = copy.deepcopy(raw[k])
            for kk, vv in v.items():
                set_dotted(merged, kk, vv)
            raw[k] = merged
        else:
            raw[k] = v
    items = overrides.items() if isinstance(overrides, dict) else (parse_override(o) for o in (overrides or []))
    for key, value in items:
        set_dotted(raw, key, value)
    try:
        cfg = ExperimentConfig(**raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None
    except TypeError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    validate_static(cfg)
    return cfg


def validate_static(cfg: ExperimentConfig) -> None:
    """Checks that need no data: algorithm and its parameters, dataset name, runtime."""
    from fedray.data.datasets import check_dataset_name

    cls = get_algorithm(cfg.algorithm.name)
    from fedray.extras import check_requirements

    check_requirements(cls)
    make_params(cls, cfg.algorithm.params)
    check_dataset_name(cfg.data.dataset)
    fed = cfg.federation
    if fed.n_clients is not None and fed.min_clients > fed.n_clients:
        raise ConfigError(
            f"federation.min_clients: {fed.min_clients} is more than federation.n_clients={fed.n_clients}")
    _check_reliability(cfg)
    cls.check_config(cfg)


def _check_reliability(cfg: ExperimentConfig) -> None:
    """Cross-section checks of ``faults``, ``privacy`` and ``checkpoint``."""
    f, rt = cfg.faults, cfg.runtime
    if f.crash_scope == "actor" and (f.crash_probability or f.crashes):
        if rt.backend != "ray":
            raise ConfigError("faults.crash_scope: 'actor' kills a Ray actor process and needs runtime.backend='ray'; "
                              f"got runtime.backend={rt.backend!r} (use crash_scope='client')")
        if rt.max_restarts == 0:
            raise ConfigError("faults.crash_scope: 'actor' needs runtime.max_restarts > 0 or -1 so that crashed actors "
                              "are restarted; got runtime.max_restarts=0")
    if f.delay_mode == "sleep" and f.delay_probability and rt.backend != "ray":
        raise ConfigError("faults.delay_mode: 'sleep' needs runtime.backend='ray' (the local runtime has no deadline); "
                          "use delay_mode='virtual'")
    if f.delay_probability and f.delay_seconds and rt.round_timeout is None:
        raise ConfigError("faults.delay_probability: delays only matter with a deadline; set runtime.round_timeout")
    for r, c in f.crashes:
        if r < 0 or c < 0 or (cfg.federation.n_clients is not None and c >= cfg.federation.n_clients):
            raise ConfigError(f"faults.crashes: ({r}, {c}) must be (round >= 0, client id in "
                              f"[0, federation.n_clients))")
