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

import abc
import dataclasses
from collections.abc import Callable, Mapping, MutableSequence
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


def batched(many: Callable[[list[Any], Any, Any], Any], *, shared: str = "one") -> Callable[[ClientFn], ClientFn]:
    """Give a client function a batched form, run once for all of a host's clients in a round.

    ``many(payloads, shared, batch) -> list of updates`` receives the payloads of the
    clients of one host that run this function with the same ``shared`` object, in
    client-id order, and a :class:`~fedray.client.ClientBatch` (their rows as one
    contiguous array with offsets, and each client's view for ``state`` and ``rng``).
    It returns one update per client, in that order, equal to what the plain function
    returns for each client alone — bit for bit (the statistics algorithms), or up to
    float rounding (batched network training, :mod:`fedray.nn.batched`): a list, or a
    :class:`~fedray.stats.StatsBlock` whose row ``i`` is client ``i``'s statistics (no
    per-client object is built; the actor sends the columns as they are). Hosts run the
    batched form for a group of one client too, so the runtimes agree bit for bit as
    long as a client's update does not depend on which clients share its host.
    The plain function stays the reference: hosts fall back to it when the batched
    form raises, when a task is wrapped (faults, privacy) and when
    ``runtime.batched`` is false::

        def _lloyd_many(payloads, centers, batch): ...

        @batched(_lloyd_many)
        def lloyd_stats(payload, centers, client): ...

    ``shared="each"`` lets one call cover the clients of a host that run this function
    with *different* shared objects (the clusters' models of clustered FL): ``many``
    then receives a list with each client's shared object in place of the one object
    (the same object repeated for the clients that share it). Nothing is sent twice:
    the shared objects still travel once per host.
    """
    if not callable(many):
        raise TypeError(f"batched: expected a function, got {many!r}")
    if shared not in ("one", "each"):
        raise ValueError(f"batched: shared must be 'one' or 'each'; got {shared!r}")

    def attach(fn: ClientFn) -> ClientFn:
        fn.__fedray_batched__ = many  # type: ignore[attr-defined]
        fn.__fedray_batched_shared__ = shared  # type: ignore[attr-defined]
        return fn

    return attach


def batched_form(fn: ClientFn) -> Callable[[list[Any], Any, Any], list[Any]] | None:
    """The batched form declared with :func:`batched`, or None."""
    return getattr(fn, "__fedray_batched__", None)


def batched_shared(fn: ClientFn) -> str:
    """How the batched form of ``fn`` takes its shared object: "one" (one call per shared
    object) or "each" (a list, one per client); see :func:`batched`."""
    return getattr(fn, "__fedray_batched_shared__", "one")


@dataclass(frozen=True)
class Reply:
    """A client's answer to a task."""

    client_id: int
    update: Any
    seconds: float = 0.0
    nbytes: int = 0


class Replies(MutableSequence):
    """A round's replies, in client-id order: a list of :class:`Reply` to its users.

    Hosts that answer column-wise (a :class:`~fedray.stats.StatsBlock` per host) are kept
    as columns: no per-client object exists until one is read. :func:`fedray.total`
    of a ``Replies`` sums the updates straight from the columns (the same bits as
    summing the :class:`Reply` objects), and :meth:`columns` gives the client ids,
    seconds and bytes as arrays. Anything else (indexing, iterating, changing) turns
    it into an ordinary list of :class:`Reply` first.
    """

    __slots__ = ("_segs", "_list")

    def __init__(self, items: Any = ()) -> None:
        self._segs: list[tuple[np.ndarray, Any, np.ndarray, np.ndarray]] = []
        self._list: list[Reply] | None = list(items) if items else None

    # --- column-wise construction and reads ---
    def add_columns(self, client_ids: np.ndarray, block: Any, seconds: np.ndarray, nbytes: np.ndarray) -> None:
        """Append the replies of one host: client ids, a StatsBlock of their updates, seconds, bytes."""
        if len(client_ids) == 0:
            return
        seg = (np.asarray(client_ids, dtype=np.int64), block, np.asarray(seconds, dtype=np.float64),
               np.asarray(nbytes, dtype=np.int64))
        if self._list is not None:
            self._list.extend(_rows_of(seg))
        else:
            self._segs.append(seg)

    def sort_by_client(self) -> None:
        """Order by client id (stable), without building replies where possible."""
        if self._list is not None:
            self._list.sort(key=_reply_client)
            return
        if len(self._segs) > 1:
            self._segs.sort(key=lambda seg: int(seg[0][0]))
        ids = np.concatenate([seg[0] for seg in self._segs]) if self._segs else np.zeros(0, dtype=np.int64)
        if ids.size > 1 and not np.all(ids[1:] > ids[:-1]):
            self._materialize().sort(key=_reply_client)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(client ids, seconds, bytes) of the replies, as arrays in order."""
        if self._list is None:
            if not self._segs:
                return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
            return tuple(np.concatenate([seg[i] for seg in self._segs]) for i in (0, 2, 3))  # type: ignore[return-value]
        n = len(self._list)
        return (np.fromiter((r.client_id for r in self._list), dtype=np.int64, count=n),
                np.fromiter((r.seconds for r in self._list), dtype=np.float64, count=n),
                np.fromiter((r.nbytes for r in self._list), dtype=np.int64, count=n))

    def stacked_updates(self) -> dict[str, np.ndarray] | None:
        """The updates stacked per statistic (rows in order), when all are columns of one layout."""
        if self._list is not None or not self._segs:
            return None
        first = self._segs[0][1].arrays
        if any(seg[1].arrays.keys() != first.keys()
               or any(seg[1].arrays[k].shape[1:] != first[k].shape[1:] for k in first) for seg in self._segs):
            return None
        if len(self._segs) == 1:
            return dict(first)
        return {k: np.concatenate([seg[1].arrays[k] for seg in self._segs]) for k in first}

    # --- the list protocol ---
    def _materialize(self) -> list[Reply]:
        if self._list is None:
            out: list[Reply] = []
            for seg in self._segs:
                out.extend(_rows_of(seg))
            self._list, self._segs = out, []
        return self._list

    def __len__(self) -> int:
        if self._list is not None:
            return len(self._list)
        return sum(len(seg[0]) for seg in self._segs)

    def __getitem__(self, i: Any) -> Any:
        return self._materialize()[i]

    def __setitem__(self, i: Any, v: Any) -> None:
        self._materialize()[i] = v

    def __delitem__(self, i: Any) -> None:
        del self._materialize()[i]

    def insert(self, i: int, v: Reply) -> None:
        self._materialize().insert(i, v)

    def __iter__(self) -> Any:
        return iter(self._materialize())

    def sort(self, key: Any = None, reverse: bool = False) -> None:
        self._materialize().sort(key=key, reverse=reverse)

    def __add__(self, other: Any) -> list[Reply]:
        return list(self._materialize()) + list(other)

    def __radd__(self, other: Any) -> list[Reply]:
        return list(other) + list(self._materialize())

    def __eq__(self, other: Any) -> bool:
        return list(self._materialize()) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return (Replies, (list(self._materialize()),))

    def __repr__(self) -> str:
        return f"Replies({len(self)} replies)"


def _reply_client(r: Reply) -> int:
    return r.client_id


def _rows_of(seg: tuple[np.ndarray, Any, np.ndarray, np.ndarray]) -> list[Reply]:
    ids, block, seconds, nbytes = seg
    return list(map(Reply, ids.tolist(), block.rows(), seconds.tolist(), nbytes.tolist()))


def reply_columns(replies: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(client ids, seconds, bytes) of a round's replies as arrays (any sequence of :class:`Reply`)."""
    if isinstance(replies, Replies):
        return replies.columns()
    return Replies(replies).columns()


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


class Algorithm(abc.ABC):
    """The contract between an algorithm and fedray's one round loop.

    Subclass it (or one of the public bases :class:`fedray.CenterAlgorithm` and
    :class:`fedray.SupervisedAlgorithm`), set the class attributes, implement the three
    abstract methods, and override optional hooks where their defaults do not fit.
    Load it by name as ``algorithm.name: package.module:ClassName``, through the
    entry-point group ``fedray.algorithms``, or register it with :func:`register`.

    Class attributes
    ----------------
    name : str
        Key in configs and outputs (default: ``"module:ClassName"``).
    Params : type[Params]
        Pydantic model of the hyperparameters (``algorithm.params``).
    supervised : bool
        True when training tasks may read the clients' labels.
    description : str
        One line for ``fedray list``.
    aliases : tuple of str
        Further names under which :func:`register` files the class.
    fuzzy : bool
        The model gives memberships (K selection then uses the fuzzy index).
    requires : tuple of str
        Packages beyond fedray's base install (``("torch",)``: the ``nn`` extra); checked
        when the configuration is validated. Supervised algorithms need torch anyway.

    Instance attributes the loop reads
    ----------------------------------
    params, info, seed : as passed to ``__init__``
    phase : str
        Recorded in each history row; multi-phase methods switch it in ``aggregate``.
    converged : bool
        Set it to True when the algorithm stopped by its own rule (``summary.json``).

    Lifecycle (see :class:`fedray.server.Server`)
    ---------------------------------------------
    ``check_config(cfg)`` (before any data) -> ``__init__`` -> ``validate()`` ->
    rounds of ``configure_round(ctx)`` / ``aggregate(ctx, replies)`` until
    ``configure_round`` returns None (or the round cap: ``federation.rounds``, by default
    :meth:`round_budget`) -> evaluation stages
    ``evaluation_task(stage, previous)`` until it returns None ->
    ``summarize_evaluation(stages)`` -> ``result()``. ``predict``,
    ``predict_proba`` and ``central`` serve :class:`fedray.Result` afterwards.
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type[Params]] = Params
    supervised: ClassVar[bool] = False
    description: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    fuzzy: ClassVar[bool] = False
    requires: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name"):
            cls.name = f"{cls.__module__}:{cls.__qualname__}"

    def __init__(self, params: Params, info: FederationInfo, seed: int) -> None:
        self.params = params
        self.info = info
        self.seed = int(seed)
        self.phase = "train"
        self.converged = False
        self.validate()

    # --- required ---------------------------------------------------------------
    @abc.abstractmethod
    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        """What each client runs this round, ``{client_id: Task}``; None ends the run.

        Clients outside ``ctx.sampled`` may get tasks too (e.g. ``ctx.all_clients`` in an
        initialisation round). Tasks that share the *same* ``shared`` object are
        broadcast once.
        """

    @abc.abstractmethod
    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        """Fold the replies (sorted by client id; late and failed clients left out) into
        the server state; returns this round's metrics (one history row)."""

    @abc.abstractmethod
    def result(self) -> dict[str, Any]:
        """The model: a mapping of names to arrays (saved to ``model.npz``)."""

    # --- optional hooks, with their defaults -------------------------------------
    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Check the whole configuration before any data is read (raise :class:`ConfigError`)."""

    def validate(self) -> None:
        """Check the parameters against the federation (raise :class:`ConfigError`)."""

    #: True for methods that train for ``federation.rounds`` rounds by definition (FedAvg and the
    #: supervised methods: the paper's N_server): reaching the cap is their planned end
    #: (``stop_reason`` "rounds done", no warning). Any other algorithm that the cap stops
    #: warns and records ``stop_reason`` "round cap".
    trains_for_rounds: ClassVar[bool] = False

    def round_budget(self) -> int | None:
        """Most rounds this algorithm asks for by its own parameters (e.g. ``max_rounds`` plus a
        start-up round), asked once before the first round. It sizes the round cap when
        ``federation.rounds`` is unset and is the progress total; None when only the round cap
        bounds it (then the cap is 100 unless set)."""
        return None

    def retries_for_missing(self, ctx: RoundContext) -> int:
        """How many times the loop asks this round's failed or late clients again, within the
        round, before aggregating (0: the round goes on without them). Steps whose outcome a
        missing client would change, not just make noisier (a start from every client's
        summary), ask for retries here."""
        return 0

    def evaluation_task(self, stage: int, previous: list[Reply] | None) -> Task | None:
        """The task every client runs in evaluation stage ``stage`` (0, 1, ...) after training.

        ``previous`` holds the replies of stage ``stage - 1`` (None for stage 0), so a
        later pass can use totals of an earlier one. Return None when done.
        """
        return None

    def summarize_evaluation(self, stages: list[list[Reply]]) -> dict[str, Any]:
        """Final metrics from the replies of every evaluation stage (``summary.json`` ``final``)."""
        return {}

    @staticmethod
    def predict(model: dict[str, Any], X: np.ndarray) -> np.ndarray:
        """Label of each row of ``X`` (n_samples, n_features) under ``model`` (from :meth:`result`)."""
        raise NotImplementedError("this algorithm has no predict")

    @staticmethod
    def predict_proba(model: dict[str, Any], X: np.ndarray) -> np.ndarray:
        """Memberships (n_samples, n_clusters) of each row of ``X`` under ``model``."""
        raise NotImplementedError("this algorithm gives crisp assignments only")

    @staticmethod
    def central(X: np.ndarray, start: np.ndarray, params: Params, rounds: int) -> np.ndarray | None:
        """The central algorithm on the union ``X`` from the same start (centres), for
        ``evaluation.central_baseline``; None when there is no central counterpart."""
        return None


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
    """Class decorator adding an algorithm to the registry under ``cls.name`` and its aliases."""
    from fedray.plugins import check_algorithm_class

    check_algorithm_class(cls, cls.__qualname__, key="register")
    _REGISTRY[cls.name] = cls
    for alias in cls.aliases:
        _REGISTRY[alias] = cls
    return cls


def _load_module(mod: str) -> None:
    import importlib
    import importlib.util

    if importlib.util.find_spec(mod) is not None:
        importlib.import_module(mod)


def available_algorithms() -> dict[str, type[Algorithm]]:
    """Every built-in and registered algorithm (imports the built-in modules; none imports torch).

    Installed plug-ins are listed by :func:`fedray.plugins.entry_points` and loaded on use.
    """
    for mod in dict.fromkeys(_BUILTIN_MODULES.values()):
        _load_module(mod)
    return dict(sorted(_REGISTRY.items()))


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class for ``name``: a registered or built-in key, ``package.module:ClassName``,
    or the name of an installed plug-in (entry-point group ``fedray.algorithms``).

    Raises
    ------
    ConfigError
        One line: unknown name (with the nearest known names), module not found,
        attribute missing, or not an :class:`Algorithm`.
    """
    from fedray import plugins

    if not isinstance(name, str) or not name:
        raise ConfigError(f"algorithm.name: expected a name or package.module:ClassName; got {name!r}")
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        _load_module(_BUILTIN_MODULES[name])
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        cls = plugins.load_algorithm(name)
        _REGISTRY[name] = cls
        return cls
    installed = plugins.entry_points()
    if name in installed:
        cls = plugins.load_entry_point(name)
        _REGISTRY[name] = cls
        return cls
    import difflib

    known = list(available_algorithms()) + sorted(installed)
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
    raise ConfigError(f"algorithm.name: unknown algorithm {name!r}{hint}; choose one of {', '.join(known)}, "
                      "or give your own class as package.module:ClassName")


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
