"""What a client function sees, and what a host sends back.

:class:`Client` is a view of one client of a :class:`~fedray.runtime.host.ClientHost`: its rows,
its state and secrets (kept by the host, per client, only while not empty), its random stream for
the round. Views are built when a client runs and dropped after, so a client costs its rows and
nothing else until it takes part. :class:`ClientBatch` is the view of many clients for a batched
client function; :class:`Outcome` and :class:`PackedOutcomes` are the replies, one by one or
column-wise. The tasks a host is given (:class:`~fedray.runtime.tasks.UniformTasks`,
:func:`~fedray.runtime.tasks.task_items`) live in :mod:`fedray.runtime.tasks`.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedray.core.contract import Reply
from fedray.core.seeding import client_rng, client_rng_many
from fedray.core.sizes import nbytes_of
from fedray.core.stats import Stats, StatsBlock

__all__ = ["Client", "ClientBatch", "ClientData", "ClientsView", "Outcome", "PackedOutcomes", "TrainingView",
           "batch_outcomes", "pack_outcomes", "pack_parts", "unpack_outcomes"]


@dataclass
class ClientData:
    """A client's shard. ``y`` is None unless the task may see labels."""

    X: np.ndarray
    y: np.ndarray | None
    sample_shape: tuple[int, ...]

    @property
    def n(self) -> int:
        return int(self.X.shape[0])


class Client:
    """What a client function sees: ``id``, ``data``, ``state``, ``rng``, ``round``, ``meta``, ``secrets``.

    A view built when the client runs: ``state`` and ``secrets`` live in the host (``states`` and
    ``secrets``, keyed by client id), so they outlive the view; the host forgets them again when
    they are empty.
    """

    __slots__ = ("id", "name", "_X", "_y", "_supervised", "sample_shape", "_states", "_secrets", "_rng", "round",
                 "seed", "_meta")

    def __init__(self, client_id: int, name: str, X: np.ndarray, y: np.ndarray | None, seed: int,
                 supervised: bool, sample_shape: tuple[int, ...], states: dict[int, dict[str, Any]],
                 secrets: dict[int, dict[str, Any]], meta: Any = None, round_: int = -1) -> None:
        self.id = int(client_id)
        self.name = name
        self._X = X
        self._y = y
        self._supervised = supervised
        self.sample_shape = sample_shape
        self._states, self._secrets = states, secrets
        self._meta = meta  # recipe facts (e.g. test split, true group: evaluation only), or a function giving them
        self.seed = seed
        self.round = round_
        self._rng: np.random.Generator | None = None

    @property
    def state(self) -> dict[str, Any]:
        """The client's persistent state (kept by its host across rounds and runs)."""
        st = self._states.get(self.id)
        if st is None:
            st = self._states[self.id] = {}
        return st

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        self._states[self.id] = value

    @property
    def secrets(self) -> dict[str, Any]:
        """Keys of the privacy protocols (fedray.layers.privacy), drawn from the OS where the client lives;
        never returned to the server, never in ``state`` (so never in checkpoints)."""
        sec = self._secrets.get(self.id)
        if sec is None:
            sec = self._secrets[self.id] = {}
        return sec

    @property
    def meta(self) -> dict[str, Any]:
        if callable(self._meta):
            self._meta = self._meta()
        if self._meta is None:
            self._meta = {}
        return self._meta

    @property
    def rng(self) -> np.random.Generator:
        """This client's generator for the current round (keyed by seed, client id, round; built on first use)."""
        if self._rng is None:
            self._rng = client_rng(self.seed, self.id, self.round)
        return self._rng

    @property
    def data(self) -> ClientData:
        return ClientData(self._X, self._y if self._supervised else None, self.sample_shape)

    @property
    def labels(self) -> np.ndarray | None:
        """Ground truth, for evaluation tasks only (training tasks get a view without it)."""
        return self._y


class TrainingView:
    """The client as a training task of an unsupervised algorithm sees it: no labels."""

    __slots__ = ("_c",)

    def __init__(self, client: Client) -> None:
        self._c = client

    def __getattr__(self, name: str) -> Any:
        if name in ("labels", "_y"):
            raise AttributeError("labels are not available to training tasks of unsupervised algorithms")
        return getattr(self._c, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_c":
            object.__setattr__(self, name, value)
        else:
            setattr(self._c, name, value)


@dataclass(frozen=True)
class Outcome:
    """What the host returns for one client and one task."""

    client_id: int
    update: Any = None
    seconds: float = 0.0
    nbytes: int = 0
    error: str | None = None
    user_error: bool = False

    # The interface a reply part offers the host and the executor (here and in PackedOutcomes):
    # ``column_wise`` says which of the two it is; ``narrowed`` is the part as it is sent; ``columns``
    # adds what it holds column-wise to a result and returns the outcomes left to :meth:`record` one by
    # one; ``outcomes`` gives every client's outcome.
    column_wise: ClassVar[bool] = False

    def narrowed(self) -> Outcome:
        return self

    def columns(self, result: Any) -> list[Outcome]:
        return [self]

    def outcomes(self) -> list[Outcome]:
        return [self]

    def record(self, result: Any) -> None:
        """Add this outcome to ``result`` (an :class:`~fedray.runtime.executor.ExecResult`): a reply, a
        user error, or a failure."""
        if self.error is None:
            result.replies.append(Reply(self.client_id, self.update, self.seconds, self.nbytes))
        elif self.user_error:
            result.user_errors[self.client_id] = self.error
        else:
            result.errors[self.client_id] = self.error
            result.failed.append(self.client_id)


@dataclass(frozen=True)
class PackedOutcomes:
    """Outcomes whose updates are :class:`~fedray.core.stats.Stats` of one layout, stored column-wise.

    Serialising thousands of small objects costs as much as computing them; an actor
    sends one array per statistic instead (``arrays[name]`` has shape (n_clients, ...)).
    A batched client function that returns a :class:`~fedray.core.stats.StatsBlock` gives
    these arrays directly, without a per-client object.
    """

    client_ids: np.ndarray
    seconds: np.ndarray
    nbytes: np.ndarray
    arrays: dict[str, np.ndarray]
    others: list[Outcome]
    narrow: frozenset = frozenset()  # arrays sent as small integers (StatsBlock.narrowed)
    column_wise: ClassVar[bool] = True

    def block(self) -> StatsBlock:
        b = StatsBlock.__new__(StatsBlock)
        b.arrays, b.n, b.narrow = self.arrays, len(self.client_ids), self.narrow
        return b

    def narrowed(self) -> PackedOutcomes:
        """For sending: integer-valued arrays as small integers (read back as the same float64 values)."""
        b = self.block().narrowed()
        return PackedOutcomes(self.client_ids, self.seconds, self.nbytes, b.arrays, self.others, b.narrow)

    def columns(self, result: Any) -> list[Outcome]:
        """Add the replies to ``result`` straight from the columns (a row view per client, a ``Reply``
        built only if something reads one); returns the outcomes of :attr:`others`."""
        result.replies.add_columns(self.client_ids, self.block(), self.seconds, self.nbytes)
        return self.others

    def outcomes(self) -> list[Outcome]:
        return self.unpack()

    def unpack(self) -> list[Outcome]:
        rows = self.block().rows()
        out = [Outcome(cid, rows[i], sec, nb) for i, (cid, sec, nb) in
               enumerate(zip(self.client_ids.tolist(), self.seconds.tolist(), self.nbytes.tolist()))]
        return sorted(out + self.others, key=lambda o: o.client_id) if self.others else out


def pack_outcomes(outcomes: list[Outcome]) -> list[Outcome | PackedOutcomes]:
    """``outcomes`` as parts: one :class:`PackedOutcomes` when there are many Stats updates of one
    layout, else the outcomes themselves."""
    ok: list[Outcome] = []
    others: list[Outcome] = []
    for o in outcomes:
        (ok if o.error is None and isinstance(o.update, Stats) else others).append(o)
    if len(ok) < 16:
        return outcomes
    layout = {k: v.shape for k, v in ok[0].update.items()}
    if any({k: v.shape for k, v in o.update.items()} != layout for o in ok):
        return outcomes
    arrays = {k: np.stack([o.update[k] for o in ok]) for k in layout}
    return [PackedOutcomes(np.array([o.client_id for o in ok]), np.array([o.seconds for o in ok]),
                           np.array([o.nbytes for o in ok]), arrays, others)]


def batch_outcomes(ids: np.ndarray, updates: Any, seconds: float) -> list[Outcome | PackedOutcomes]:
    """The outcomes of a batched form's ``updates`` for clients ``ids`` (``seconds`` each): one
    :class:`PackedOutcomes` when the form returned a :class:`~fedray.core.stats.StatsBlock` (nothing
    per client), else one :class:`Outcome` per client."""
    if isinstance(updates, StatsBlock):
        n = len(ids)
        return [PackedOutcomes(np.asarray(ids), np.full(n, seconds), np.full(n, updates.nbytes_each(), dtype=np.int64),
                               updates.arrays, [])]
    return [Outcome(cid, u, seconds, nbytes_of(u)) for cid, u in zip(ids.tolist(), updates)]


def pack_parts(parts: list[Outcome | PackedOutcomes]) -> list[Any]:
    """What an actor sends for :meth:`ClientHost.run_parts`: a list of parts, blocks as they are, the
    per-client outcomes packed where they can be; counts and tables travel as small integers
    (:meth:`PackedOutcomes.narrowed`)."""
    kinds: dict[type, list[Any]] = {PackedOutcomes: [], Outcome: []}
    sent: list[Any] = []  # parts stored already (by the sink): anything else
    for p in parts:
        kinds.get(type(p), sent).append(p)
    packed = [p.narrowed() for p in kinds[PackedOutcomes]]
    return packed + sent + [p.narrowed() for p in pack_outcomes(kinds[Outcome])]


def unpack_outcomes(parts: list[Outcome | PackedOutcomes]) -> list[Outcome]:
    """Outcomes of a host's parts (per client or column-wise), in client-id order where any part was
    column-wise (per-client parts alone keep their order)."""
    if not any(p.column_wise for p in parts):
        return parts
    return sorted((o for p in parts for o in p.outcomes()), key=lambda o: o.client_id)


class ClientBatch:
    """The clients of one host that run a batched client function together (client-id order).

    Attributes
    ----------
    ids : ndarray of int, shape (n_clients,)
    clients : list
        Each client as the plain function would see it (``state``, ``rng``, ``round``, ``data``).
    X : ndarray, shape (n_rows, ...)
        The clients' rows, one after another: client ``i`` has ``X[offsets[i]:offsets[i + 1]]``.
        A view of the host's block when the clients are consecutive there; read-only by contract.
    offsets : ndarray of int, shape (n_clients + 1,)
    labels : ndarray or None
        The rows' labels, where the task may read them (evaluation or supervised tasks).
    seed, round : int or None
        The experiment seed and the round of the call, which key the clients' streams (:meth:`rngs`);
        None when unknown (the streams then come from the views).
    """

    __slots__ = ("ids", "_clients", "X", "offsets", "labels", "_owner", "seed", "round")

    def __init__(self, ids: np.ndarray, clients: Any, X: np.ndarray, offsets: np.ndarray,
                 labels: np.ndarray | None, seed: int | None = None, round_: int | None = None) -> None:
        # ``clients`` is a list, or a function that builds it (the views are built only when asked for).
        self.ids, self._clients, self.X, self.offsets, self.labels = ids, clients, X, offsets, labels
        self._owner: np.ndarray | None = None
        self.seed, self.round = seed, round_

    def rngs(self) -> list[np.random.Generator]:
        """Each client's generator for the round, fresh: what ``client.rng`` of its view would be
        (``client_rng(seed, client, round)``), seeded for all the clients at once without building views."""
        if self.seed is None or self.round is None:
            return [client_rng(c.seed, c.id, c.round) for c in self.clients]
        return client_rng_many(self.seed, np.asarray(self.ids), self.round)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def clients(self) -> list[Any]:
        if callable(self._clients):
            self._clients = self._clients()
        return self._clients

    @property
    def views_built(self) -> bool:
        """Whether :attr:`clients` was read (the views were built, and may have left empty state)."""
        return not callable(self._clients)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def owner(self) -> np.ndarray:
        """For each row of ``X``, the position (0..n_clients-1) of its client."""
        if self._owner is None:
            self._owner = np.repeat(np.arange(len(self.ids)), self.sizes)
        return self._owner


class ClientsView(Mapping):
    """``host.clients``: client id -> a :class:`Client` view (built on access)."""

    __slots__ = ("_host",)

    def __init__(self, host: Any) -> None:
        self._host = host

    def __getitem__(self, cid: Any) -> Client:
        if cid not in self._host:
            raise KeyError(cid)
        return self._host.client(int(cid))

    def __iter__(self) -> Iterator[int]:
        return iter(self._host.ids.tolist())

    def __len__(self) -> int:
        return len(self._host.ids)
