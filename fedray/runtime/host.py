"""Clients and the host that keeps them.

A :class:`ClientHost` owns one or more clients: their shards (built from their
recipes), persistent state and random streams. The local runtime uses one host
in-process; the Ray runtime wraps hosts in actors (:mod:`fedray.actors`). The
host never knows what an algorithm computes: it calls the task's function.
"""
from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedray.core.contract import Task, batched_form, batched_shared
from fedray.core.errors import FedrayError
from fedray.core.seeding import client_rng
from fedray.core.sizes import nbytes_of
from fedray.core.stats import Stats, StatsBlock
from fedray.data.checks import describe_shard
from fedray.data.federation import ClientSpec, materialize_many

log = logging.getLogger(__name__)


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
    """What a client function sees: ``id``, ``data``, ``state``, ``rng``, ``round``."""

    __slots__ = ("id", "name", "_X", "_y", "_supervised", "sample_shape", "state", "_rng", "round", "seed", "meta",
                 "secrets")

    def __init__(self, spec: ClientSpec, X: np.ndarray, y: np.ndarray | None, seed: int,
                 supervised: bool, sample_shape: tuple[int, ...]) -> None:
        self.id = spec.client_id
        self.name = spec.name
        self._X = X
        self._y = y
        self._supervised = supervised
        self.sample_shape = sample_shape
        self.state: dict[str, Any] = {}
        self.meta: dict[str, Any] = dict(spec.meta)  # recipe facts (e.g. test split, true group: evaluation only)
        self.seed = seed
        # Keys of the privacy protocols (fedray.layers.privacy), drawn from the OS where the client lives; never
        # returned to the server, never in ``state`` (so never in checkpoints).
        self.secrets: dict[str, Any] = {}
        self.round = -1
        self._rng: np.random.Generator | None = None

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


class _TrainingView:
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

    def block(self) -> StatsBlock:
        b = StatsBlock.__new__(StatsBlock)
        b.arrays, b.n = self.arrays, len(self.client_ids)
        return b

    def unpack(self) -> list[Outcome]:
        rows = self.block().rows()
        out = [Outcome(cid, rows[i], sec, nb) for i, (cid, sec, nb) in
               enumerate(zip(self.client_ids.tolist(), self.seconds.tolist(), self.nbytes.tolist()))]
        return sorted(out + self.others, key=lambda o: o.client_id) if self.others else out


def pack_outcomes(outcomes: list[Outcome]) -> list[Outcome] | PackedOutcomes:
    """Column-wise form of ``outcomes`` when there are many Stats updates of one layout."""
    ok = [o for o in outcomes if o.error is None and isinstance(o.update, Stats)]
    if len(ok) < 16:
        return outcomes
    layout = {k: v.shape for k, v in ok[0].update.items()}
    if any({k: v.shape for k, v in o.update.items()} != layout for o in ok):
        return outcomes
    others = [o for o in outcomes if not (o.error is None and isinstance(o.update, Stats))]
    arrays = {k: np.stack([o.update[k] for o in ok]) for k in layout}
    return PackedOutcomes(np.array([o.client_id for o in ok]), np.array([o.seconds for o in ok]),
                          np.array([o.nbytes for o in ok]), arrays, others)


def pack_parts(parts: list[Outcome | PackedOutcomes]) -> list[Outcome | PackedOutcomes] | PackedOutcomes:
    """What an actor sends for :meth:`ClientHost.run_parts`: blocks as they are, the rest packed."""
    packed = [p for p in parts if isinstance(p, PackedOutcomes)]
    single = [p for p in parts if isinstance(p, Outcome)]
    if not packed:
        return pack_outcomes(single)
    rest = pack_outcomes(single)
    return packed + ([rest] if isinstance(rest, PackedOutcomes) else rest)


def unpack_outcomes(batch: list[Outcome | PackedOutcomes] | PackedOutcomes) -> list[Outcome]:
    """Outcomes of a host's reply (any of the packed forms), in client-id order."""
    if isinstance(batch, PackedOutcomes):
        return batch.unpack()
    if not any(isinstance(p, PackedOutcomes) for p in batch):
        return batch
    out: list[Outcome] = []
    for p in batch:
        if isinstance(p, PackedOutcomes):
            out.extend(p.unpack())
        else:
            out.append(p)
    return sorted(out, key=lambda o: o.client_id)


class UniformTasks:
    """One task (and one shared object) for many clients of a host: the compact form of
    ``[(client_id, task, shared_index), ...]`` when every item has the same task, so that
    neither the server nor the host handles one tuple per client.

    Iterating gives the ``(client_id, task, shared_index)`` items (client-id order).
    """

    __slots__ = ("ids", "task", "shared_index")

    def __init__(self, ids: np.ndarray, task: Task, shared_index: int) -> None:
        self.ids, self.task, self.shared_index = np.asarray(ids, dtype=np.int64), task, int(shared_index)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        task, sidx = self.task, self.shared_index
        return ((cid, task, sidx) for cid in self.ids.tolist())

    def client_ids(self) -> list[int]:
        return self.ids.tolist()


def task_items(tasks: Any) -> list[tuple[int, Task, int]]:
    """``[(client_id, task, shared_index)]`` from a list of them or :class:`UniformTasks`."""
    return list(tasks) if isinstance(tasks, UniformTasks) else tasks


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
    """

    __slots__ = ("ids", "_clients", "X", "offsets", "labels", "_owner")

    def __init__(self, ids: np.ndarray, clients: Any, X: np.ndarray, offsets: np.ndarray,
                 labels: np.ndarray | None) -> None:
        # ``clients`` is a list, or a function that builds it (the views are built only when asked for).
        self.ids, self._clients, self.X, self.offsets, self.labels = ids, clients, X, offsets, labels
        self._owner: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def clients(self) -> list[Any]:
        if callable(self._clients):
            self._clients = self._clients()
        return self._clients

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def owner(self) -> np.ndarray:
        """For each row of ``X``, the position (0..n_clients-1) of its client."""
        if self._owner is None:
            self._owner = np.repeat(np.arange(len(self.ids)), self.sizes)
        return self._owner


class ClientHost:
    """Holds clients; runs tasks on them in client-id order.

    Parameters
    ----------
    specs : list of ClientSpec
    seed : int
    supervised : bool
        Whether training tasks may read labels.
    sample_shape : tuple of int
    """

    def __init__(self, specs: list[ClientSpec], seed: int, supervised: bool, sample_shape: tuple[int, ...],
                 batched: bool = True) -> None:
        self.seed = int(seed)
        self.batched = bool(batched)  # run batched client functions (fedray.core.contract.batched) in one call
        self.clients: dict[int, Client] = {}
        self.build_errors: dict[int, str] = {}  # client id -> why its shard could not be built
        for spec, built in zip(specs, materialize_many(specs)):
            if isinstance(built, FedrayError):
                self.build_errors[spec.client_id] = str(built)
                X, y, names = np.zeros((0, 0)), None, ()
            elif isinstance(built, Exception):  # e.g. an unreadable file
                self.build_errors[spec.client_id] = f"{type(built).__name__}: {built}"
                X, y, names = np.zeros((0, 0)), None, ()
            else:
                X, y, names = built
                X = np.ascontiguousarray(X, dtype=np.float64)
            self.clients[spec.client_id] = Client(spec, X, y, seed, supervised, tuple(sample_shape))
            self.clients[spec.client_id].state["_feature_names"] = names
        self._make_block()

    def _make_block(self) -> None:
        """Keep the shards as one contiguous array (client-id order); each client's ``X`` is a view of it."""
        ok = [self.clients[cid] for cid in sorted(self.clients) if cid not in self.build_errors]
        self._block: np.ndarray | None = None
        self._block_y: np.ndarray | None = None
        self._offset: dict[int, tuple[int, int]] = {}  # client id -> (position in ok, first row)
        # A read-only shard is the caller's own array (fedray.from_arrays on the local runtime) or
        # the object store's: it is kept as it is, not copied, and its clients run client by client.
        if not ok or len({c._X.shape[1:] for c in ok}) != 1 or not all(c._X.flags.writeable for c in ok):
            return
        sizes = np.array([c._X.shape[0] for c in ok], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        # Always a copy: the scaler works in place, and a shard may be the user's array or read-only.
        block = np.concatenate([c._X for c in ok]) if len(ok) > 1 else np.array(ok[0]._X, copy=True)
        labelled = all(c._y is not None for c in ok)
        block_y = (np.concatenate([np.asarray(c._y) for c in ok]) if len(ok) > 1 else np.asarray(ok[0]._y)) \
            if labelled else None
        for i, c in enumerate(ok):
            c._X = block[offsets[i]:offsets[i + 1]]
            if block_y is not None:
                c._y = block_y[offsets[i]:offsets[i + 1]]
            self._offset[c.id] = (i, int(offsets[i]))
        self._block, self._block_y, self._offsets = block, block_y, offsets

    # --- set-up ---------------------------------------------------------
    def describe(self, private: bool = False) -> list[dict[str, Any]]:
        """Per-client facts the server may know: size, dimension, column sums, bounds, bad values.

        With ``private`` (any ``privacy.*`` mechanism on) the per-client column sums, sums of
        squares, minima and maxima are left out: for a small client they are rows (a one-row
        client's sum and a client's extremes); the session then sums moments securely.
        """
        out = []
        for cid in sorted(self.clients):
            c = self.clients[cid]
            if cid in self.build_errors:
                out.append({"client_id": cid, "name": c.name, "n": int(c._X.shape[0]),
                            "n_features": int(c._X.shape[1]) if c._X.ndim == 2 else -1,
                            "error": self.build_errors[cid]})
                continue
            out.append(describe_shard(cid, c.name, c._X, c._y, c.state.get("_feature_names", ()), moments=not private))
        return out

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> int:
        """Transform every shard to (X - shift) / scale."""
        if self._block is not None:
            self._block -= shift
            self._block /= scale
        for cid, c in self.clients.items():
            if cid not in self._offset:
                c._X = (c._X - shift) / scale
        return len(self.clients)

    # --- rounds ---------------------------------------------------------
    def run(self, round_: int, tasks: list[tuple[int, Task, int]], *shared: Any) -> list[Outcome]:
        """Run ``tasks`` = [(client_id, task, shared_index)] and return their outcomes (client-id order).

        Tasks whose function has a batched form (:func:`fedray.core.contract.batched`) and share one
        ``shared`` object run in one call; the rest, and every batch whose batched form raises,
        run client by client.
        """
        return unpack_outcomes(self.run_parts(round_, tasks, *shared))

    def run_parts(self, round_: int, tasks: list[tuple[int, Task, int]], *shared: Any
                  ) -> list[Outcome | PackedOutcomes]:
        """:meth:`run`, with the outcomes of a batched form that returned a
        :class:`~fedray.core.stats.StatsBlock` left column-wise (one :class:`PackedOutcomes` each)."""
        if isinstance(tasks, UniformTasks) and self.batched:
            many = batched_form(tasks.task.fn)
            ids = tasks.client_ids()
            if many is not None and ids and all(cid in self._offset for cid in ids):
                one: int | list[int] = tasks.shared_index
                if batched_shared(tasks.task.fn) == "each":
                    one = [tasks.shared_index] * len(ids)
                return self._run_batch(round_, many, ids, [tasks.task.payload] * len(ids), one,
                                       tasks.task.evaluation, shared, tasks)
        tasks = task_items(tasks)
        if not self.batched:
            return self._run_each(round_, tasks, shared)
        groups: dict[tuple[Any, int, bool], list[tuple[int, Task, int]]] = {}
        single: list[tuple[int, Task, int]] = []
        offset = self._offset
        forms: dict[Any, Any] = {}  # function -> its batched form (looked up once per function)
        each: set[Any] = set()  # functions whose batched form takes each client's shared object
        for item in tasks:
            cid, task, sidx = item
            fn = task.fn
            if fn in forms:
                many = forms[fn]
            else:
                many = forms[fn] = batched_form(fn)
                if batched_shared(fn) == "each":
                    each.add(fn)
            if many is None or cid not in offset:
                single.append(item)
            else:
                # shared="each": one call for every shared object (the key's -1 is never an index)
                key = (fn, -1 if fn in each else sidx, task.evaluation)
                g = groups.get(key)
                if g is None:
                    groups[key] = [item]
                else:
                    g.append(item)
        out: list[Outcome | PackedOutcomes] = self._run_each(round_, single, shared)
        for (fn, sidx, evaluation), items in groups.items():
            # A group of one runs the batched form too: which clients share a host differs between
            # runtimes, and a client must run the same code (the same float rounding) in all of them.
            which: int | list[int] = [item[2] for item in items] if fn in each else sidx
            out += self._run_batch(round_, forms[fn], [item[0] for item in items],
                                   [item[1].payload for item in items], which, evaluation, shared, items)
        return out

    def _batch(self, round_: int, ids: list[int], evaluation: bool) -> ClientBatch:
        def views() -> list[Any]:
            out = []
            for cid in ids:
                c = self.clients[cid]
                c.round = round_
                c._rng = None
                out.append(c if (evaluation or c._supervised) else _TrainingView(c))
            return out

        # Built only when the batched form asks for ``batch.clients``: a client's round and stream
        # are set there (every other run of a client sets them again before use).
        pos = [self._offset[cid][0] for cid in ids]
        offs = self._offsets
        if pos[-1] - pos[0] == len(pos) - 1:  # consecutive in the block: a view
            lo, hi = int(offs[pos[0]]), int(offs[pos[-1] + 1])
            X = self._block[lo:hi]
            y = self._block_y[lo:hi] if self._block_y is not None else None
            offsets = offs[pos[0]:pos[-1] + 2] - lo
        else:
            p = np.asarray(pos)
            sizes = offs[p + 1] - offs[p]
            offsets = np.concatenate([[0], np.cumsum(sizes)])
            X = np.concatenate([self._block[offs[i]:offs[i + 1]] for i in pos])
            y = (np.concatenate([self._block_y[offs[i]:offs[i + 1]] for i in pos])
                 if self._block_y is not None else None)
        see_labels = evaluation or (bool(ids) and self.clients[ids[0]]._supervised)
        return ClientBatch(np.asarray(ids), views, X, offsets, y if see_labels else None)

    def _run_batch(self, round_: int, many: Any, ids: list[int], payloads: list[Any], sidx: int | list[int],
                   evaluation: bool, shared: tuple[Any, ...], items: Any) -> list[Outcome | PackedOutcomes]:
        """Run a batched form; ``sidx`` is the index of the shared object, or one index per
        client (a form declared with ``shared="each"``, which receives the list of objects)."""
        batch = self._batch(round_, ids, evaluation)
        t0 = time.perf_counter()
        if isinstance(sidx, list):
            arg: Any = [shared[i] if i >= 0 else None for i in sidx]
        else:
            arg = shared[sidx] if sidx >= 0 else None
        try:
            updates = many(payloads, arg, batch)
            if len(updates) != len(ids):
                raise ValueError(f"batched client function returned {len(updates)} updates for {len(ids)} clients")
        except Exception:  # noqa: BLE001 - the plain function, client by client, reports who failed and why
            log.debug("batched client function failed; running its clients one by one:\n%s", traceback.format_exc())
            return self._run_each(round_, task_items(items), shared)
        each = (time.perf_counter() - t0) / len(ids)
        if isinstance(updates, StatsBlock):
            n = len(ids)
            return [PackedOutcomes(np.asarray(ids), np.full(n, each), np.full(n, updates.nbytes_each(), dtype=np.int64),
                                   updates.arrays, [])]
        return [Outcome(cid, u, each, nbytes_of(u)) for cid, u in zip(ids, updates)]

    def _run_each(self, round_: int, tasks: list[tuple[int, Task, int]], shared: tuple[Any, ...]) -> list[Outcome]:
        out = []
        for cid, task, sidx in tasks:
            client = self.clients[cid]
            client.round = round_
            client._rng = None
            view = client if (task.evaluation or client._supervised) else _TrainingView(client)
            t0 = time.perf_counter()
            try:
                update = task.fn(task.payload, shared[sidx] if sidx >= 0 else None, view)
            except FedrayError as exc:
                out.append(Outcome(cid, error=f"client {client.name or cid}: {exc}", user_error=True))
                continue
            except Exception:  # noqa: BLE001 - reported to the server with the traceback
                out.append(Outcome(cid, error=f"client {cid}: {traceback.format_exc()}"))
                continue
            out.append(Outcome(cid, update, time.perf_counter() - t0, nbytes_of(update)))
        return out

    def get_state(self, client_ids: list[int]) -> dict[int, dict[str, Any]]:
        return {cid: self.clients[cid].state for cid in client_ids}

    def set_state(self, states: dict[int, dict[str, Any]]) -> None:
        for cid, st in states.items():
            self.clients[cid].state = st

    def gather_data(self, labels: bool = True) -> list[tuple[int, np.ndarray, np.ndarray | None]]:
        """The shards themselves — only for central baselines in simulations."""
        return [(cid, c._X, c._y if labels else None) for cid, c in sorted(self.clients.items())]


