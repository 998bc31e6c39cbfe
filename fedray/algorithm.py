"""The algorithm contract and the registry of algorithms.

An algorithm is a small class. The server's round loop (:mod:`fedray.server`)
asks it each round what the sampled clients should run
(:meth:`Algorithm.configure_round`), runs those *client functions* where the
clients live, and hands the replies, sorted by client id, to
:meth:`Algorithm.aggregate`. Returning ``None`` from ``configure_round`` ends the
run. Multi-phase methods keep their phase in ``self.phase`` and switch it in
``aggregate``.

Client functions are plain module-level functions ``fn(payload, shared, client)``
that run inside the client actor (or in-process on the local runtime).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from fedray.errors import ConfigError
from fedray.seeding import server_rng

ClientFn = Callable[[Any, Any, Any], Any]


@dataclass(frozen=True)
class Task:
    """What one client runs in a round.

    Attributes
    ----------
    fn : callable
        A module-level function ``fn(payload, shared, client) -> update``.
    payload : object
        Client-specific input (small).
    shared : object
        Input common to many clients. Tasks whose ``shared`` is the *same object*
        share one broadcast (one ``ray.put`` per round).
    evaluation : bool
        Evaluation tasks may read the client's ground-truth labels; training tasks
        of unsupervised algorithms never see them.
    """

    fn: ClientFn
    payload: Any = None
    shared: Any = None
    evaluation: bool = False

    @property
    def fn_name(self) -> str:
        return f"{self.fn.__module__}:{self.fn.__qualname__}"


@dataclass(frozen=True)
class Reply:
    """A client's answer to a task."""

    client_id: int
    update: Any
    seconds: float = 0.0
    nbytes: int = 0


@dataclass(frozen=True)
class FederationInfo:
    """What the server may know about the federation before the first round.

    Attributes
    ----------
    n_clients : int
    n_features : int
        Number of features of a flattened sample.
    sample_shape : tuple of int
        Shape of one sample (``(n_features,)`` for tables, ``(1, 8, 8)`` for images).
    n_samples : ndarray of shape (n_clients,)
        Samples held by each client.
    feature_min, feature_max : ndarray of shape (n_features,)
        Federated bounding box (after scaling).
    n_classes : int or None
        Number of label values, where the data have labels (for supervised models
        and evaluation only).
    has_labels : bool
    """

    n_clients: int
    n_features: int
    sample_shape: tuple[int, ...]
    n_samples: np.ndarray
    feature_min: np.ndarray
    feature_max: np.ndarray
    n_classes: int | None = None
    has_labels: bool = False
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def total_samples(self) -> int:
        return int(np.sum(self.n_samples))


@dataclass(frozen=True)
class RoundContext:
    """Read-only facts about the current round, handed to the algorithm."""

    round: int
    seed: int
    sampled: tuple[int, ...]
    info: FederationInfo
    fraction: float = 1.0

    @property
    def all_clients(self) -> tuple[int, ...]:
        return tuple(range(self.info.n_clients))

    def rng(self, *stream: int) -> np.random.Generator:
        """The server's generator for this round (extra ints select sub-streams)."""
        return server_rng(self.seed, self.round, 7, *stream)


class Params(BaseModel):
    """Base of algorithm hyperparameters: frozen, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class Algorithm:
    """Base class of all algorithms.

    Subclasses set ``name``, ``Params`` (a :class:`Params` subclass) and implement
    :meth:`configure_round`, :meth:`aggregate` and :meth:`result`.
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type[Params]] = Params
    supervised: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def __init__(self, params: Params, info: FederationInfo, seed: int) -> None:
        self.params = params
        self.info = info
        self.seed = int(seed)
        self.phase = "train"
        self.validate()

    def validate(self) -> None:
        """Check the parameters against the federation (raise :class:`ConfigError`)."""

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError

    def result(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    # Optional hooks -------------------------------------------------------
    def evaluation_task(self) -> Task | None:
        """A task every client runs once after training to compute metrics."""
        return None

    def summarize_evaluation(self, replies: list[Reply]) -> dict[str, Any]:
        return {}

    @property
    def converged(self) -> bool:
        return bool(getattr(self, "_converged", False))


_REGISTRY: dict[str, type[Algorithm]] = {}
# name -> module that registers it; modules are imported only when asked for, so a
# clustering run never imports the torch-based methods (nor torch).
_BUILTIN_MODULES: dict[str, str] = {
    "kmeans": "fedray.algorithms.kmeans",
    "federated-fcm": "fedray.algorithms.fcm",
    "fedkmeans": "fedray.algorithms.fedkmeans",
    "kfed": "fedray.algorithms.kfed",
    "fedfcm": "fedray.algorithms.fedfcm",
    "fedfcm-avg": "fedray.algorithms.fedfcm",
    "flacc": "fedray.algorithms.flacc",
    "fedavg": "fedray.algorithms.baselines",
    "local": "fedray.algorithms.baselines",
    "ifca": "fedray.algorithms.baselines",
    "cfl": "fedray.algorithms.baselines",
    "flhc": "fedray.algorithms.baselines",
    "fedcref": "fedray.algorithms.fedcref",
}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator adding an algorithm to the registry under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    for alias in getattr(cls, "aliases", ()):
        _REGISTRY[alias] = cls
    return cls


def _load_module(mod: str) -> None:
    import importlib
    import importlib.util

    if importlib.util.find_spec(mod) is not None:
        importlib.import_module(mod)


def available_algorithms() -> dict[str, type[Algorithm]]:
    """Every algorithm (imports every built-in algorithm module; none of them imports torch)."""
    for mod in dict.fromkeys(_BUILTIN_MODULES.values()):
        _load_module(mod)
    return dict(sorted(_REGISTRY.items()))


def get_algorithm(name: str) -> type[Algorithm]:
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        _load_module(_BUILTIN_MODULES[name])
    if name not in _REGISTRY:
        algos = available_algorithms()
        raise ConfigError(
            f"algorithm.name: unknown algorithm {name!r}; choose one of {', '.join(algos)}"
        )
    return _REGISTRY[name]


def make_params(cls: type[Algorithm], params: Mapping[str, Any] | None) -> Params:
    """Validate ``params`` against ``cls.Params`` with a message naming the key."""
    from pydantic import ValidationError

    try:
        return cls.Params(**dict(params or {}))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"algorithm.params ({cls.name})")) from None


def format_validation_error(exc: Any, prefix: str = "") -> str:
    """One line per problem: ``key: message (got value)``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        key = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown parameter"
        got = err.get("input")
        got_s = "" if isinstance(got, dict) else f"; got {got!r}"
        lines.append(f"{key}: {msg}{got_s}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def dataclass_replace(obj: Any, **changes: Any) -> Any:
    return dataclasses.replace(obj, **changes)
