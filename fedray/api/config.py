"""The experiment configuration: one validated object, from YAML or keywords.

Every value is checked before Ray starts; an error names the key, the value and
what is allowed. Dotted overrides (``federation.n_clients=100``) are applied to
the raw mapping before validation (parsing them: :mod:`fedray.api.overrides`).
"""
from __future__ import annotations

import copy
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
)

from fedray.api.config_checks import validate_static
from fedray.api.config_files import MAX_CONFIG_BYTES, MAX_CONFIG_NODES, load_yaml, parse_yaml  # noqa: F401 - here too
from fedray.api.federation_config import FederationConfig
from fedray.api.overrides import nest_kwargs, parse_override, set_dotted
from fedray.api.uris import redact_config
from fedray.core.errors import ConfigError, format_validation_error
from fedray.data.arrays import ArrayData


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, v: Any, info: Any) -> Any:
        """``n_clients: true`` is a mistake, not 1 client: numbers never come from booleans."""
        if isinstance(v, bool):
            ann = cls.model_fields[info.field_name].annotation
            if not _allows_bool(ann) and _allows_number(ann):
                raise ValueError(f"expected a number, not a boolean ({v!r})")
        return v


def _allows_bool(ann: Any) -> bool:
    return ann is bool or ann is Any or any(_allows_bool(a) for a in typing.get_args(ann))


def _allows_number(ann: Any) -> bool:
    return ann in (int, float) or any(_allows_number(a) for a in typing.get_args(ann))


class AlgorithmConfig(_Section):
    """The method and its hyperparameters (`fedray describe NAME` lists an algorithm's params)."""

    name: str = Field(default="kmeans", description="algorithm key (`fedray list`), an installed plug-in's name, or "
                      "package.module:ClassName")
    params: dict[str, Any] = Field(default_factory=dict, description="the algorithm's hyperparameters, checked "
                                   "against its Params (`fedray describe NAME`)")


class DataConfig(_Section):
    """Which data, how they are read and scaled, and how they are split over clients."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    # A data set name, or arrays from Python (fedray.from_arrays), written out as their description.
    dataset: str | ArrayData = Field(default="sklearn:iris", description="data set name (`fedray list`): blobs, "
                                     "sklearn:NAME, benchmark:BATTERY/NAME, csv:PATH, parquet:PATH, mnist, "
                                     "femnist, cifar10, emnist:SPLIT, fashion-mnist, kmnist, k49, images:FOLDER, "
                                     "scenario:NAME; or arrays from fedray.from_arrays")
    data_dir: str | None = Field(default=None, description="folder of benchmark and image data files, e.g. "
                                 "mnist/, femnist/, cifar-10-batches-bin/ (default: $FEDRAY_DATA_DIR)")
    options: dict[str, Any] = Field(default_factory=dict, description="options of the data set, e.g. "
                                    "points_per_client for blobs, classes for femnist (`fedray describe DATASET`)")
    partition: dict[str, Any] = Field(default_factory=dict, description="name: the split over clients (`fedray "
                                      "describe PARTITION`), with that partition's options beside it")
    scale: Literal["none", "standard", "minmax"] = Field(default="none", description="feature scaling from "
                                                         "federated statistics (no rows leave a client)")
    feature_columns: list[str] | None = Field(default=None, description="tables: the columns used as features "
                                              "(default: every numeric column except label and client)")
    label_column: str | None = Field(default=None, description="tables: the column of true labels, for "
                                     "evaluation (and training of supervised methods)")
    client_column: str | None = Field(default=None, description="tables: the column naming each row's client "
                                      "(one client per value; partition by_column)")

    @field_serializer("dataset")
    def _dataset_text(self, v: str | ArrayData) -> str:
        return v if isinstance(v, str) else str(v)


class ClientResources(_Section):
    """What Ray reserves for each client actor."""

    num_cpus: float | None = Field(default=None, gt=0, description="CPUs per client actor (default: one per "
                                   "actor; fractions pack several actors on a CPU)")
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs per client actor (fractions share a GPU)")
    custom: dict[str, float] = Field(default_factory=dict, description="custom Ray resources per client actor, "
                                     "e.g. {edge: 1}")


class RuntimeConfig(_Section):
    """Where clients run: in-process (local) or as Ray actors, with their resources and deadlines."""

    backend: Literal["local", "ray"] = Field(default="ray", description="ray: client actors on Ray; local: the "
                                             "same objects in this process, without Ray (same results)")
    address: str | None = Field(default=None, description="Ray cluster to join (host:port, ray://host:port or "
                                "auto); None: start an embedded Ray instance")
    num_cpus: int | None = Field(default=None, ge=1, description="CPUs of the embedded Ray instance (default: all "
                                 "of this machine)")
    clients_per_actor: int | Literal["auto"] = Field(default="auto", description="clients hosted by one actor; "
                                                     "auto: about one actor per CPU slot")
    client_resources: ClientResources = Field(default_factory=ClientResources,
                                              description="what Ray reserves for each client actor")
    round_timeout: float | None = Field(default=None, gt=0, description="deadline of a round's attempt in s, "
                                        "protocol steps and re-asks included; later clients dropped (None: wait)")
    placement: Literal["pack", "spread"] = Field(default="pack", description="the run's client actors, "
                                                 "reserved at once as one placement group, packed on few nodes "
                                                 "(PACK) or spread over all nodes of the cluster (SPREAD)")
    queue_timeout: float | None = Field(default=None, gt=0, description="seconds to wait for the cluster to "
                                        "have room for all the client actors at once (other runs hold it); past it "
                                        "the run fails in one line (None: wait, saying so at intervals doubling from 5 s to 60 s)")
    wait_for_nodes: bool = Field(default=False, description="the cluster grows on demand (an autoscaler): a "
                                 "request larger than its current resources waits for nodes instead of failing")
    actor_batch: int = Field(default=64, ge=1, description="actors created at once while starting (bounds the "
                             "start-up pressure on the cluster)")
    max_restarts: int = Field(default=3, ge=-1, description="times Ray restarts a crashed client actor (its "
                              "shards are rebuilt from their recipes; -1: always)")
    startup_timeout: float = Field(default=300.0, gt=0, description="seconds to wait for the client actors to be "
                                   "placed and ready; past it the run fails in one line")
    call_timeout: float = Field(default=300.0, gt=0, description="seconds to wait for any other call to the client "
                                "actors (set-up, checkpoint state, gathering data); past it the call fails in one line")
    stall_warning: float = Field(default=10.0, gt=1, description="without round_timeout, warn when a round waits "
                                 "this many times the median round time (at least 60 s)")
    progress: bool | None = Field(default=None, description="progress bar (true), none (false), or None: a bar on "
                                  "a terminal or in a notebook, about 20 log lines otherwise")
    batched: bool = Field(default=True, description="run client functions that have a batched form once per host "
                          "for all its clients (false: client by client, to check the batched form)")
    resident: Literal["auto", "always", "never"] = Field(default="auto", description="keep the shards in memory "
                                                         "(always) or generate blobs' rows again whenever clients run "
                                                         "(never); auto: kept unless over half the free memory")
    # Code shipping (fedray.runtime.shipping): what reaches Ray workers through runtime_env.
    ship_code: Literal["auto", "always", "never"] = Field(default="auto", description="send fedray and plug-in "
                                                          "modules to the workers with runtime_env (auto: fedray when "
                                                          "joining a cluster, plug-ins not installed here)")
    ship_max_mb: float = Field(default=50.0, gt=0, description="largest plug-in package shipped to the workers, "
                               "in MB (only its Python package goes: no dotfiles, keys or .gitignore'd files)")
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="Ray runtime_env, merged with fedray's")

    @field_validator("clients_per_actor")
    @classmethod
    def _cpa(cls, v: Any) -> Any:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be a positive integer or 'auto'")
        return v


class EvaluationConfig(_Section):
    """What is measured besides the federated run."""

    central_baseline: bool = Field(default=False, description="also run the central algorithm on the union of "
                                   "the clients' data and compare (central_ari, centre distance)")
    central_max_rows: int = Field(default=1_000_000, ge=1, description="the central baseline runs on at most this "
                                  "many rows: above, on a uniform sample of them from the seed (the summary says so)")


class OutputConfig(_Section):
    """The output folder and what goes into it."""

    directory: str | None = Field(default=None, description="output folder (default: fedray-output/NAME-TIMESTAMP "
                                  "from the CLI; none from Python unless output= is given)")
    overwrite: bool = Field(default=False, description="replace the contents of a non-empty output folder (else "
                            "it is refused)")
    plots: bool = Field(default=True, description="write plots/*.png (convergence, centres, client clusters)")
    messages: bool = Field(default=False, description="write messages.parquet: every message with round, client, "
                           "direction, names, shapes and bytes")
    message_payloads: bool = Field(default=False, description="also keep what the server received on the Result "
                                   "(audits, tests)")
    trackers: list[Literal["tensorboard", "mlflow"]] = Field(
        default_factory=list, description="experiment trackers that get every round's metrics, the configuration, "
        "the summary and the plots (the tracking extra; docs/tuning.md)")
    mlflow_tracking_uri: str | None = Field(default=None, description="MLflow tracking URI (default: "
                                            "$MLFLOW_TRACKING_URI, else a file: store ./mlruns)")
    mlflow_experiment: str = Field(default="fedray", min_length=1, description="MLflow experiment the runs go to")

    @field_validator("trackers")
    @classmethod
    def _distinct_trackers(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("each tracker at most once")
        return v


class FaultsConfig(_Section):
    """Injected client faults (see docs/reliability.md). All off by default."""

    crash_probability: float = Field(default=0.0, ge=0.0, lt=1.0, description="chance that a sampled client "
                                     "crashes in a round (drawn from the seed)")
    delay_probability: float = Field(default=0.0, ge=0.0, le=1.0, description="chance that a sampled client "
                                     "answers delay_seconds late")
    delay_seconds: float = Field(default=0.0, ge=0.0, description="how late a delayed client answers (matters "
                                 "against runtime.round_timeout)")
    delay_mode: Literal["virtual", "sleep"] = Field(default="virtual", description="virtual: the delay is "
                                                    "simulated (exact, free); sleep: the client really sleeps (Ray)")
    crashes: list[tuple[int, int]] = Field(default_factory=list, description="(round, client id) pairs that crash "
                                           "for sure")
    crash_scope: Literal["client", "actor"] = Field(default="client", description="client: the client loses its "
                                                    "state; actor: its actor process exits and Ray restarts it")

    @property
    def active(self) -> bool:
        return bool(self.crash_probability or self.crashes or (self.delay_probability and self.delay_seconds))


class DPConfig(_Section):
    """Gaussian mechanism on clients' statistics: clip to L2 norm ``clip``, noise std ``noise_multiplier * clip``."""

    clip: float = Field(gt=0, allow_inf_nan=False, description="L2 norm C each client's statistics are clipped to")
    noise_multiplier: float = Field(gt=0, allow_inf_nan=False,
                                    description="z: Gaussian noise of standard deviation z C is added")
    delta: float = Field(default=1e-5, gt=0, lt=1, description="delta of the (epsilon, delta) guarantee reported")
    seeded_noise: bool = Field(default=False, description="debugging only: noise from the seed, not private")
    adjacency: Literal["replace-one", "add-remove"] = Field(
        default="replace-one", description="neighbouring data sets of the guarantee: replace-one (a client's data "
        "replaced, sensitivity 2*clip: the server knows who took part) or add-remove (a client added or removed, "
        "sensitivity clip)")


class PrivacyConfig(_Section):
    """Secure aggregation, DP and guards (see fedray.layers.privacy and docs/reliability.md)."""

    secure_aggregation: bool = Field(default=False, description="pairwise masking: the server sees only the sum "
                                     "of a round's statistics, never one client's")
    mask_neighbors: int | None = Field(default=None, ge=2, description="pairwise masks with this many peers (None: all)")
    min_cohort: int = Field(default=3, ge=2, description="secure aggregation refuses smaller cohorts or survivor sets")
    secagg_threshold: float = Field(default=0.5, gt=0, lt=1, description="Shamir threshold t = floor(value * peers) + 1")
    release_rule: Literal["strict", "count"] = Field(default="strict", description="a sum with which a combination "
        "of released sums singles out < min_cohort clients: strict: narrowed or refused; count: released, counted")
    cohorts: Literal["auto", "random", "blocks"] = Field(default="auto", description="blocks: whole fixed blocks of "
        "min_cohort clients; random: one by one; auto: blocks under secure aggregation without DP at fraction < 1")
    blocks_seed: int = Field(default=0, ge=0, description="seed of the fixed blocks: the federation's, not the run's")
    release_log: str | None = Field(default=None, description="release journal folder (default: <output>/release_log)")
    dp: DPConfig | None = Field(default=None, description="DP: set clip and noise_multiplier to turn on (None: off)")
    min_samples_guard: bool = Field(default=False, description="a client withholds its statistics when N_m F <= L "
                                    "(too few samples for L statistics)")
    min_cluster_count: int = Field(default=0, ge=0, description="clients zero clusters with fewer points (0: off)")
    feature_bounds: list[tuple[float, float]] | None = Field(
        default=None, description="(low, high) per feature, known a priori: min-max scaling and bounds under privacy")

    @property
    def active(self) -> bool:
        return bool(self.secure_aggregation or self.dp is not None or self.min_samples_guard or self.min_cluster_count)


class LayerConfig(_Section):
    """A user's own layer of the stack (:mod:`fedray.layers.base`): its class and the arguments it is made with."""

    name: str = Field(description="package.module:ClassName of a class with the two halves of a fedray layer "
                      "(wrap_tasks, finish) and a name")
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the class")


def _layer_entry(i: int, v: Any) -> Any:
    """A layer entry: a reference string, a mapping (LayerConfig), or a layer object given from Python."""
    if isinstance(v, str):
        v = {"name": v}
    if isinstance(v, dict):
        name, params = v.get("name"), v.get("params", {})
        if set(v) - {"name", "params"} or not isinstance(name, str) or not isinstance(params, dict):
            raise ValueError(f"entry {i}: expected package.module:ClassName or {{name: package.module:ClassName, "
                             f"params: {{...}}}}; got {v!r:.80}")
        return LayerConfig(**v)
    return v


class CheckpointConfig(_Section):
    """Checkpoints to continue an interrupted run (`fedray run --resume DIR`)."""

    every: int = Field(default=0, ge=0, description="save a checkpoint every N rounds (0: never)")
    directory: str | None = Field(default=None, description="checkpoint folder (default: <output folder>/checkpoint)")


class ExperimentConfig(_Section):
    """A whole experiment. Build with :func:`make_config`."""

    seed: int = Field(default=0, ge=0, description="seed of every random stream: sampling, starts, data, and "
                      "each client's stream keyed by (seed, client id, round)")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="the method and its params")
    data: DataConfig = Field(default_factory=DataConfig, description="data set, scaling and split over clients")
    federation: FederationConfig = Field(default_factory=FederationConfig,
                                         description="clients, fraction sampled per round, round cap")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, description="local or Ray, resources, deadlines")
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig, description="central baseline")
    output: OutputConfig = Field(default_factory=OutputConfig, description="output folder, plots, message log")
    faults: FaultsConfig = Field(default_factory=FaultsConfig, description="injected crashes and delays")
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig,
                                   description="secure aggregation, differential privacy, guards")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig,
                                         description="periodic checkpoints for --resume")
    layers: list[LayerConfig | Any] = Field(default_factory=list, description="the user's own layers between the "
                                            "server and the clients, above the message log and below privacy: "
                                            "package.module:ClassName, {name, params}, or layer objects from Python")
    extra: dict[str, Any] = Field(default_factory=dict, description="free-form notes kept in config.yaml and "
                                  "summary.json; fedray does not read them")

    @field_validator("layers", mode="before")
    @classmethod
    def _layer_entries(cls, v: Any) -> Any:
        if not isinstance(v, (list, tuple)):
            raise ValueError("expected a list of layers")
        return [_layer_entry(i, e) for i, e in enumerate(v)]

    @field_serializer("layers")
    def _layers_text(self, v: list[Any]) -> list[Any]:  # an object from Python is written as its class
        return [e.model_dump() if isinstance(e, LayerConfig) else
                {"name": f"{type(e).__module__}:{type(e).__qualname__}", "params": {}} for e in v]

    @field_validator("data", mode="before")
    @classmethod
    def _arrays_as_data(cls, v: Any) -> Any:
        return {"dataset": v} if isinstance(v, ArrayData) else v

    def to_dict(self) -> dict[str, Any]:
        return redact_config(self.model_dump(mode="json"))  # no credentials of a tracking URI

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


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
        if isinstance(config.data.dataset, ArrayData):  # to_dict writes its description; keep the arrays
            raw["data"]["dataset"] = config.data.dataset
        raw["layers"] = list(config.layers)  # to_dict writes a layer object as its class; keep the objects
    elif isinstance(config, (str, Path)):
        raw = load_yaml(config)
    elif config is None:
        raw = {}
    elif isinstance(config, Mapping):
        raw = copy.deepcopy(dict(config))
    else:
        raise ConfigError(f"config: expected an ExperimentConfig, a mapping or the path of a YAML file; got "
                          f"{type(config).__name__} {config!r:.60}")
    for k, v in nest_kwargs(kwargs).items():
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
        raise ConfigError(format_validation_error(exc, model=ExperimentConfig)) from None
    except TypeError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    validate_static(cfg)
    return cfg


