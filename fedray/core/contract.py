"""The algorithm contract: Task, Reply, FederationInfo, RoundContext, Params and Algorithm.

The registry of algorithms is :mod:`fedray.core.registry`.

An algorithm is a small class. The server's round loop (:mod:`fedray.loop.server`)
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from fedray.core.client_view import ClientView
from fedray.core.seeding import ALGORITHM_STREAM, server_rng

ClientFn = Callable[[Any, Any, ClientView], Any]  # fn(payload, shared, client)


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
    summed : bool
        The algorithm reads these replies only through :func:`fedray.total` (and their client
        ids, seconds and bytes): where no layer needs each client's reply, a runtime may then add
        the clients' updates where they live, each host continuing the sum of the clients before
        its own (the same bits), and send only the sum. Reading one reply's update then raises.
    """

    fn: ClientFn
    payload: Any = None
    shared: Any = None
    evaluation: bool = False
    summed: bool = False

    @property
    def fn_name(self) -> str:
        return f"{self.fn.__module__}:{self.fn.__qualname__}"


def batched(many: Callable[[list[Any], Any, Any], Any], *, shared: str = "one",
            split: bool = True) -> Callable[[ClientFn], ClientFn]:
    """Give a client function a batched form, run once for all of a host's clients in a round.

    ``many(payloads, shared, batch) -> list of updates`` receives the payloads of the
    clients of one host that run this function with the same ``shared`` object, in
    client-id order, and a :class:`~fedray.runtime.clients.ClientBatch` (their rows as one
    contiguous array with offsets, and each client's view for ``state`` and ``rng``).
    It returns one update per client, in that order, equal to what the plain function
    returns for each client alone — bit for bit (the statistics algorithms), or up to
    float rounding (batched network training, :mod:`fedray.nn.batched`): a list, or a
    :class:`~fedray.core.stats.StatsBlock` whose row ``i`` is client ``i``'s statistics (no
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

    ``split`` (default true) says that each client's update depends on its own rows only, bit for
    bit, so that a host may run the batched form over chunks of its clients (it does for many
    clients, to keep temporary arrays small); false for forms whose rounding depends on the
    batch (batched network training).
    """
    if not callable(many):
        raise TypeError(f"batched: expected a function, got {many!r}")
    if shared not in ("one", "each"):
        raise ValueError(f"batched: shared must be 'one' or 'each'; got {shared!r}")

    def attach(fn: ClientFn) -> ClientFn:
        fn.__fedray_batched__ = many  # type: ignore[attr-defined]
        fn.__fedray_batched_shared__ = shared  # type: ignore[attr-defined]
        fn.__fedray_batched_split__ = bool(split)  # type: ignore[attr-defined]
        return fn

    return attach


def batched_form(fn: ClientFn) -> Callable[[list[Any], Any, Any], list[Any]] | None:
    """The batched form declared with :func:`batched`, or None."""
    return getattr(fn, "__fedray_batched__", None)


def batched_split(fn: ClientFn) -> bool:
    """Whether a host may run the batched form of ``fn`` over chunks of its clients (see :func:`batched`)."""
    return bool(getattr(fn, "__fedray_batched_split__", False))


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


class CohortTasks(Mapping):
    """One task for each of many clients: ``{client id: task}`` without a dictionary entry per client.

    What :meth:`RoundContext.each` returns, and what the round loop hands the runtimes when every
    client of a call runs the same task; a mapping like any other, which the loop, the runtimes and
    the layers also read as a whole (:attr:`ids`, :attr:`task`).
    """

    __slots__ = ("ids", "task")

    def __init__(self, ids: Any, task: Task) -> None:
        ids = np.asarray(ids, dtype=np.int64).ravel()
        if ids.size > 1 and not np.all(ids[1:] > ids[:-1]):
            ids = np.unique(ids)
        self.ids, self.task = ids, task

    def __getitem__(self, cid: Any) -> Task:
        i = int(np.searchsorted(self.ids, int(cid)))
        if i < len(self.ids) and int(self.ids[i]) == int(cid):
            return self.task
        raise KeyError(cid)

    def __contains__(self, cid: Any) -> bool:
        try:
            self[cid]
        except (KeyError, TypeError, ValueError):
            return False
        return True

    def __iter__(self) -> Any:
        return iter(self.ids.tolist())

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"CohortTasks({len(self.ids)} clients, {self.task!r:.60})"


def one_task(tasks: Mapping[int, Task]) -> Task | None:
    """The task every client of ``tasks`` runs, when it is one and the same object (else None)."""
    if isinstance(tasks, CohortTasks):
        return tasks.task if len(tasks) else None
    first = next(iter(tasks.values()), None)
    if first is None or not all(t is first for t in tasks.values()):
        return None
    return first


@dataclass(frozen=True)
class RoundContext:
    """Read-only facts about the current round, handed to the algorithm.

    ``aggregate`` receives the same context with ``failed`` and ``late`` filled in: the sampled
    clients whose reply is missing, as Flower's ``aggregate_fit(results, failures)`` is told.
    """

    round: int
    seed: int
    sampled: tuple[int, ...]
    info: FederationInfo
    fraction: float = 1.0
    #: Clients of this round that failed or were late in its last attempt (set when
    #: :meth:`Algorithm.aggregate` is called; empty in ``configure_round``).
    failed: tuple[int, ...] = ()
    late: tuple[int, ...] = ()
    #: Executions of the round (1 unless clients were asked again or the round was retried).
    attempts: int = 1
    #: ``sampled`` as a sorted array, when the loop has it (what :meth:`each` uses).
    cohort: Any = field(default=None, repr=False, compare=False)

    @property
    def all_clients(self) -> tuple[int, ...]:
        return tuple(range(self.info.n_clients))

    def each(self, task: Task, clients: Any = None) -> CohortTasks:
        """``{client: task}`` for every sampled client (or every one of ``clients``), as one object."""
        if clients is None:
            clients = self.cohort if self.cohort is not None else self.sampled
        return CohortTasks(clients, task)

    def rng(self, *stream: int) -> np.random.Generator:
        """The server's generator for this round (extra ints select sub-streams)."""
        return server_rng(self.seed, self.round, ALGORITHM_STREAM, *stream)


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

    Lifecycle (see :class:`fedray.loop.server.Server`)
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


