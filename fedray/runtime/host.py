"""The host that keeps clients: rows of one block, not objects.

A :class:`ClientHost` owns one or more clients. It keeps them as rows: one contiguous
array of every client's samples (client-id order) with the offsets where each client's
rows begin, the clients' ids as an array, and per-client state and secrets in two
dictionaries holding only the clients that have some. Random streams are keyed by (seed,
client, round, stream) and built only when a client runs; a :class:`~fedray.runtime.clients.Client`
view is built when a client runs and dropped after. So a client that has never been
sampled costs its rows and its offset, and nothing else.

Generated shards (``blobs``) are built in bulk per host; with ``resident=False`` they are
not kept at all: the rows of the clients a call needs are generated again from the recipe
(the same bits) and scaled like the resident ones.

The local runtime uses one host in-process; the Ray runtime wraps hosts in actors. The
host never knows what an algorithm computes: it calls the task's function.
"""
from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from fedray.core.contract import Task, batched_form, batched_shared, batched_split
from fedray.core.errors import FedrayError
from fedray.core.sizes import nbytes_of
from fedray.core.stats import StatsBlock, fold_rows
from fedray.data.checks import Descriptions, describe_block, describe_shard
from fedray.data.federation import generate_rows, materialize_many, regenerable
from fedray.data.recipes import recipe_ids, recipe_name
from fedray.runtime.clients import (  # Client lives there; the names in __all__ stay importable from here
    Client,
    ClientBatch,
    ClientData,
    ClientsView,
    Outcome,
    PackedOutcomes,
    TrainingView,
    UniformTasks,
    pack_outcomes,
    pack_parts,
    task_items,
    unpack_outcomes,
)
from fedray.runtime.messages import HostReply, KeptSum

__all__ = ["ClientData", "ClientHost", "Outcome", "PackedOutcomes", "UniformTasks", "pack_outcomes", "pack_parts",
           "task_items", "unpack_outcomes"]

log = logging.getLogger(__name__)

#: Clients whose rows a non-resident host generates at once (bounds the memory of a call over all of them).
REGENERATE_CHUNK = 1 << 16
#: Bytes of one entry of a dictionary keyed by client id (the key and the slot), for :meth:`ClientHost.accounting`.
_DICT_ENTRY = 100
#: Rows an evaluation (or a non-resident host) hands to a batched client function at once.
BATCH_ROWS = 1 << 18
#: Rows described at once (bounds the temporary arrays of the set-up checks).
DESCRIBE_ROWS = 1 << 21
#: Bytes of replies a host keeps for a summed call (:meth:`ClientHost.run_kept`); past them it sends the
#: rest of the call's replies on as usual, so a call over more clients than fit never piles up here.
KEEP_BYTES = 1 << 29


class ClientHost:
    """Holds clients; runs tasks on them in client-id order.

    Parameters
    ----------
    specs : sequence of ClientSpec
        A list of recipes, or a :class:`~fedray.data.recipes.RecipeRange` (nothing per client).
    seed : int
    supervised : bool
        Whether training tasks may read labels.
    sample_shape : tuple of int
    batched : bool
        Run batched client functions (:func:`fedray.core.contract.batched`) in one call.
    resident : bool
        Keep the shards in memory; False regenerates them from their recipes when clients run
        (only for recipes that can be, see :func:`fedray.data.federation.regenerable`).
    """

    def __init__(self, specs: Any, seed: int, supervised: bool, sample_shape: tuple[int, ...],
                 batched: bool = True, resident: bool = True) -> None:
        self.seed = int(seed)
        self.batched = bool(batched)
        self.supervised = bool(supervised)
        self.sample_shape = tuple(sample_shape)
        self.specs = specs  # kept: names, recipe facts, regeneration
        self.ids = recipe_ids(specs)
        if np.any(np.diff(self.ids) <= 0):
            raise ValueError("a host's recipes must be in ascending client-id order")
        self._first = int(self.ids[0]) if len(self.ids) else 0
        self._contiguous = bool(len(self.ids) == 0 or int(self.ids[-1]) - self._first == len(self.ids) - 1)
        self._index: dict[int, int] | None = None  # client id -> position (only for non-contiguous ids)
        self.states: dict[int, dict[str, Any]] = {}  # client id -> state (only clients that have some)
        self.secrets: dict[int, dict[str, Any]] = {}  # client id -> protocol secrets (idem)
        self.build_errors: dict[int, str] = {}  # client id -> why its shard could not be built
        self.feature_names: tuple[str, ...] = ()
        self._block: np.ndarray | None = None
        self._block_y: np.ndarray | None = None
        self._offsets: np.ndarray | None = None  # (n_clients + 1,): where each client's rows begin
        self._shards: dict[int, tuple[np.ndarray, np.ndarray | None]] | None = None  # per client, when no block
        self._scaler: tuple[np.ndarray, np.ndarray] | None = None  # applied to regenerated rows
        self._sink: Any = None  # where the parts of a chunked call go (run_parts)
        self._kept: list[PackedOutcomes] | None = None  # replies of a summed call, until folded
        self.resident = bool(resident) or not regenerable(specs)
        if regenerable(specs):
            self._offsets, self.feature_names = generate_rows(specs, None)
            if self.resident:
                self._block, self._block_y, _ = generate_rows(specs, self.ids)
        else:
            self._build(specs)

    # --- construction ---------------------------------------------------
    def _build(self, specs: Any) -> None:
        """Shards built client by client (files, pooled data sets, arrays), kept as one block when they can be."""
        shards: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        for spec, built in zip(specs, materialize_many(list(specs))):
            if isinstance(built, Exception):
                msg = str(built) if isinstance(built, FedrayError) else f"{type(built).__name__}: {built}"
                self.build_errors[spec.client_id] = msg
                shards[spec.client_id] = (np.zeros((0, 0)), None)
                continue
            X, y, names = built
            shards[spec.client_id] = (np.ascontiguousarray(X, dtype=np.float64), y)
            self.feature_names = self.feature_names or tuple(names)
        parts = list(shards.values())
        # A read-only shard is the caller's own array (fedray.from_arrays on the local runtime) or the
        # object store's: it is kept as it is, not copied, and its clients run client by client.
        if (self.build_errors or not parts or len({X.shape[1:] for X, _ in parts}) != 1
                or not all(X.flags.writeable for X, _ in parts)):
            self._shards = shards
            return
        sizes = np.array([X.shape[0] for X, _ in parts], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(sizes)])
        # Always a copy: the scaler works in place, and a shard may be the user's array.
        self._block = np.concatenate([X for X, _ in parts]) if len(parts) > 1 else np.array(parts[0][0], copy=True)
        if all(y is not None for _, y in parts):
            self._block_y = np.concatenate([np.asarray(y) for _, y in parts])

    # --- where a client's rows are ---------------------------------------
    def positions(self, ids: Any) -> np.ndarray:
        """Positions (0 .. n_clients - 1) of client ``ids`` in this host."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._contiguous:
            return ids - self._first
        return np.searchsorted(self.ids, ids)

    def _pos(self, cid: int) -> int:
        if self._contiguous:
            return int(cid) - self._first
        if self._index is None:
            self._index = {c: i for i, c in enumerate(self.ids.tolist())}
        return self._index[int(cid)]

    def __contains__(self, cid: Any) -> bool:
        pos = int(cid) - self._first if self._contiguous else int(np.searchsorted(self.ids, int(cid)))
        return 0 <= pos < len(self.ids) and int(self.ids[pos]) == int(cid)

    def name(self, cid: int) -> str:
        return recipe_name(self.specs, self._pos(cid))

    def shard(self, cid: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Client ``cid``'s rows and labels (views of the block; generated again when not resident)."""
        if self._shards is not None:
            return self._shards[int(cid)]
        if self._block is None:
            X, y, _ = self._rows(np.array([cid], dtype=np.int64))
            return X, y
        pos = self._pos(cid)
        lo, hi = int(self._offsets[pos]), int(self._offsets[pos + 1])
        return self._block[lo:hi], (self._block_y[lo:hi] if self._block_y is not None else None)

    def _rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Rows, labels and offsets of clients ``ids`` (ascending), one after another."""
        if self._block is None:  # generated again, then scaled as the resident rows were
            X, y, offsets = generate_rows(self.specs, ids)
            if self._scaler is not None:
                X -= self._scaler[0]
                X /= self._scaler[1]
            return X, y, offsets
        pos = self.positions(ids)
        offs = self._offsets
        if len(pos) and int(pos[-1]) - int(pos[0]) == len(pos) - 1:  # consecutive: a view
            lo, hi = int(offs[pos[0]]), int(offs[pos[-1] + 1])
            y = self._block_y[lo:hi] if self._block_y is not None else None
            return self._block[lo:hi], y, offs[pos[0]:pos[-1] + 2] - lo
        sizes = offs[pos + 1] - offs[pos]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        rows = np.repeat(offs[pos] - offsets[:-1], sizes) + np.arange(int(offsets[-1]))
        return self._block[rows], (self._block_y[rows] if self._block_y is not None else None), offsets

    def client(self, cid: int, round_: int = -1, X: np.ndarray | None = None, y: Any = None) -> Client:
        """A view of client ``cid`` (its rows ``X``/``y`` when the caller has them already)."""
        if X is None:
            X, y = self.shard(cid)
        meta = self._meta_of(int(cid))
        return Client(cid, self.name(cid), X, y, self.seed, self.supervised, self.sample_shape, self.states,
                      self.secrets, meta, round_)

    def _meta_of(self, cid: int) -> Any:
        specs = self.specs
        if isinstance(specs, list):
            return lambda: dict(specs[self._pos(cid)].meta)
        return None

    @property
    def clients(self) -> Mapping[int, Client]:
        """The clients as a mapping id -> view (each access builds a view; state lives in the host)."""
        return ClientsView(self)

    def forget_empty(self, ids: Any) -> None:
        """Drop the empty state and secrets dictionaries of clients ``ids`` (a client that keeps nothing
        costs nothing)."""
        for table in (self.states, self.secrets):
            if table:
                for cid in ids:
                    d = table.get(cid)
                    if d is not None and not d:
                        del table[cid]

    def accounting(self) -> dict[str, int]:
        """Bytes this host holds, by kind, and the clients: ``rows`` (shards and labels kept in memory;
        0 when they are generated again), ``index`` (client ids and offsets), ``state`` and ``secrets``
        (the per-client dictionaries that exist, with what they hold), ``shards`` (per-client arrays of a
        host without a block), ``recipes``, ``clients``. A client that has never run costs its rows and
        its part of ``index``."""
        def held(table: dict[int, dict[str, Any]]) -> int:
            return sum(_DICT_ENTRY + sys.getsizeof(d) + sum(sys.getsizeof(k) + nbytes_of(v) for k, v in d.items())
                       for d in table.values())

        rows = sum(a.nbytes for a in (self._block, self._block_y) if a is not None)
        index = self.ids.nbytes + (self._offsets.nbytes if self._offsets is not None else 0)
        shards = sum(X.nbytes + (y.nbytes if y is not None else 0) for X, y in (self._shards or {}).values())
        recipes = (sys.getsizeof(self.specs) if not isinstance(self.specs, list)
                   else sys.getsizeof(self.specs) + sum(sys.getsizeof(s) + sys.getsizeof(s.__dict__) for s in self.specs))
        return {"clients": len(self.ids), "rows": int(rows), "index": int(index), "state": held(self.states),
                "secrets": held(self.secrets), "shards": int(shards), "recipes": int(recipes)}

    # --- set-up ---------------------------------------------------------
    def describe(self, private: bool = False) -> Descriptions:
        """Per-client facts the server may know: size, dimension, column sums, bounds, bad values.

        With ``private`` (any ``privacy.*`` mechanism on) the per-client column sums, sums of
        squares, minima and maxima are left out: for a small client they are rows (a one-row
        client's sum and a client's extremes); the session then sums moments securely.
        """
        names = None if not isinstance(self.specs, list) else [s.name for s in self.specs]
        if self._shards is not None:
            rows = []
            for cid, (X, y) in self._shards.items():
                name = self.name(cid)
                if cid in self.build_errors:
                    rows.append({"client_id": cid, "name": name, "n": int(X.shape[0]),
                                 "n_features": int(X.shape[1]) if X.ndim == 2 else -1,
                                 "error": self.build_errors[cid]})
                else:
                    rows.append(describe_shard(cid, name, X, y, self.feature_names, moments=not private))
            return Descriptions.from_rows(rows)
        parts = []
        for chunk in self._describe_chunks():
            X, y, offsets = self._rows(self.ids[chunk])
            part_names = names[chunk] if names is not None else None
            parts.append(describe_block(self.ids[chunk], part_names, X, y, offsets, self.feature_names,
                                        moments=not private))
        return Descriptions.concat(parts)

    def _describe_chunks(self) -> Iterator[slice]:
        start, n = 0, len(self.ids)
        while start < n:
            stop = int(np.searchsorted(self._offsets, self._offsets[start] + DESCRIBE_ROWS, side="right")) - 1
            stop = min(n, max(stop, start + 1))
            if not self.resident:
                stop = min(stop, start + REGENERATE_CHUNK)
            yield slice(start, stop)
            start = stop

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> int:
        """Transform every shard to (X - shift) / scale (regenerated rows too, from now on)."""
        self._scaler = (np.asarray(shift), np.asarray(scale))
        if self._block is not None:
            self._block -= shift
            self._block /= scale
        if self._shards is not None:
            self._shards = {cid: ((X - shift) / scale, y) for cid, (X, y) in self._shards.items()}
        return len(self.ids)

    # --- rounds ---------------------------------------------------------
    def run(self, round_: int, tasks: list[tuple[int, Task, int]], *shared: Any) -> list[Outcome]:
        """Run ``tasks`` = [(client_id, task, shared_index)] and return their outcomes (client-id order).

        Tasks whose function has a batched form (:func:`fedray.core.contract.batched`) and share one
        ``shared`` object run in one call; the rest, and every batch whose batched form raises,
        run client by client.
        """
        return unpack_outcomes(self.run_parts(round_, tasks, *shared))

    def run_parts(self, round_: int, tasks: Any, *shared: Any, sink: Any = None) -> list[Any]:
        """:meth:`run`, with the outcomes of a batched form that returned a
        :class:`~fedray.core.stats.StatsBlock` left column-wise (one :class:`PackedOutcomes` each).

        ``sink``: a function given each part of a call run in chunks as soon as it is computed (the
        Ray actor puts it in the object store, so that the chunks' replies are not all held twice);
        what it returns stands for the part in the answer."""
        self._sink = sink
        rows = self._offsets is not None and self._shards is None  # batched forms need the rows as a block
        if isinstance(tasks, UniformTasks) and self.batched and rows:
            many = batched_form(tasks.task.fn)
            if many is not None and len(tasks):
                one: int | list[int] = tasks.shared_index
                if batched_shared(tasks.task.fn) == "each":
                    one = [tasks.shared_index] * len(tasks)
                return self._run_batch(round_, tasks.task.fn, tasks.ids, [tasks.task.payload] * len(tasks), one,
                                       tasks.task.evaluation, shared, tasks)
        tasks = task_items(tasks)
        if not self.batched or not rows:
            return self._run_each(round_, tasks, shared)
        groups: dict[tuple[Any, int, bool], list[tuple[int, Task, int]]] = {}
        single: list[tuple[int, Task, int]] = []
        forms: dict[Any, Any] = {}  # function -> its batched form (looked up once per function)
        each: set[Any] = set()  # functions whose batched form takes each client's shared object
        for item in tasks:
            fn = item[1].fn
            if fn not in forms:
                forms[fn] = batched_form(fn)
                if batched_shared(fn) == "each":
                    each.add(fn)
            if forms[fn] is None:
                single.append(item)
            else:
                # shared="each": one call for every shared object (the key's -1 is never an index)
                groups.setdefault((fn, -1 if fn in each else item[2], item[1].evaluation), []).append(item)
        out: list[Outcome | PackedOutcomes] = self._run_each(round_, single, shared)
        for (fn, sidx, evaluation), items in groups.items():
            # A group of one runs the batched form too: which clients share a host differs between
            # runtimes, and a client must run the same code (the same float rounding) in all of them.
            which: int | list[int] = [item[2] for item in items] if fn in each else sidx
            out += self._run_batch(round_, fn, np.array([item[0] for item in items], dtype=np.int64),
                                   [item[1].payload for item in items], which, evaluation, shared, items)
        return out

    # --- summed calls (Task.summed): the host adds its clients' updates -----------
    def keep(self, round_: int, tasks: Any, *shared: Any, store: Any = None) -> HostReply:
        """Run ``tasks`` and keep their replies here for :meth:`fold_kept`; the answer's ``kept`` holds who
        answered and the statistics of one value a client as columns (summed pairwise by the caller).
        When the replies are not all column-wise statistics, or take more than ``KEEP_BYTES``, the answer
        holds them (``parts``) instead: the parts past ``KEEP_BYTES`` went to ``store`` (the Ray actor's
        object store sink) as they were computed, as in :meth:`run_parts`."""
        held = 0

        def keep(part: Any) -> Any:
            nonlocal held
            if not isinstance(part, PackedOutcomes):
                return part
            part = part.narrowed()  # counts and tables as small integers while they wait
            held += sum(a.nbytes for a in part.arrays.values())
            return store(part) if store is not None and held > KEEP_BYTES else part

        self._kept = None
        parts = self.run_parts(round_, tasks, *shared, sink=keep)
        if not parts or not all(isinstance(p, PackedOutcomes) and not p.others for p in parts):
            return HostReply(pack_parts(parts))
        self._kept = parts
        cat = np.concatenate
        keys = [k for k, v in parts[0].arrays.items() if int(np.prod(v.shape[1:])) < 2]
        return HostReply(kept=KeptSum(cat([p.client_ids for p in parts]), cat([p.seconds for p in parts]),
                                      cat([p.nbytes for p in parts]), {k: cat([p.arrays[k] for p in parts]) for k in keys},
                                      list(parts[0].arrays)))

    def run_kept(self, round_: int, tasks: Any, *shared: Any, store: Any = None) -> tuple[Any, ...]:
        """:meth:`keep` in its earlier tuple form: ``("kept", *KeptSum)`` or ``("plain", parts)``."""
        reply = self.keep(round_, tasks, *shared, store=store)
        return ("kept", *reply.kept) if reply.kept is not None else ("plain", reply.parts)

    def fold_kept(self, acc: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """Continue ``acc`` (the sum over the clients before this host's) with the kept replies, client
        after client (:func:`fedray.core.stats.fold_rows`): statistics of two or more values a client."""
        parts, self._kept = self._kept or [], None
        out = dict(acc or {})
        for k, v in (parts[0].arrays.items() if parts else ()):
            if int(np.prod(v.shape[1:])) >= 2:
                out[k] = fold_rows([p.arrays[k] for p in parts], out.get(k))
        return out

    def take_kept(self) -> HostReply:
        """The kept replies themselves, per client (when another host could not keep its own and the
        call's replies go to the server one by one after all); they are forgotten here."""
        parts, self._kept = self._kept or [], None
        return HostReply(pack_parts(parts))

    def _batch(self, round_: int, ids: np.ndarray, evaluation: bool) -> ClientBatch:
        X, y, offsets = self._rows(ids)
        see_labels = evaluation or self.supervised

        def views() -> list[Any]:
            # Built only when the batched form asks for ``batch.clients``.
            out = []
            for i, cid in enumerate(ids.tolist()):
                lo, hi = int(offsets[i]), int(offsets[i + 1])
                c = self.client(cid, round_, X[lo:hi], y[lo:hi] if y is not None else None)
                out.append(c if see_labels else TrainingView(c))
            return out

        return ClientBatch(ids, views, X, offsets, y if see_labels else None)

    def _run_batch(self, round_: int, fn: Any, ids: np.ndarray, payloads: list[Any], sidx: int | list[int],
                   evaluation: bool, shared: tuple[Any, ...], items: Any) -> list[Outcome | PackedOutcomes]:
        """Run a batched form; ``sidx`` is the index of the shared object, or one index per
        client (a form declared with ``shared="each"``, which receives the list of objects).
        A call over many clients of a form that may be split runs over chunks of clients (each
        chunk's rows generated again where they are not kept), so that its temporary arrays stay
        small; each chunk's replies are one part of the answer."""
        per = self._chunk_clients(ids, fn)
        if per < len(ids):
            out: list[Outcome | PackedOutcomes] = []
            for lo in range(0, len(ids), per):
                part = slice(lo, lo + per)
                sub = items[part]  # the same form: a list of items, or UniformTasks
                got = self._run_batch(round_, fn, ids[part], payloads[part],
                                      sidx[part] if isinstance(sidx, list) else sidx, evaluation, shared, sub)
                sink = self._sink
                out += [sink(p) for p in got] if sink is not None else got
            return out
        batch = self._batch(round_, ids, evaluation)
        t0 = time.perf_counter()
        if isinstance(sidx, list):
            arg: Any = [shared[i] if i >= 0 else None for i in sidx]
        else:
            arg = shared[sidx] if sidx >= 0 else None
        try:
            updates = batched_form(fn)(payloads, arg, batch)
            if len(updates) != len(ids):
                raise ValueError(f"batched client function returned {len(updates)} updates for {len(ids)} clients")
        except Exception:  # noqa: BLE001 - the plain function, client by client, reports who failed and why
            log.debug("batched client function failed; running its clients one by one:\n%s", traceback.format_exc())
            return self._run_each(round_, task_items(items), shared)
        finally:
            if not callable(batch._clients):  # views were built: forget what they left empty
                self.forget_empty(ids.tolist())
        each = (time.perf_counter() - t0) / len(ids)
        if isinstance(updates, StatsBlock):
            n = len(ids)
            return [PackedOutcomes(np.asarray(ids), np.full(n, each), np.full(n, updates.nbytes_each(), dtype=np.int64),
                                   updates.arrays, [])]
        return [Outcome(cid, u, each, nbytes_of(u)) for cid, u in zip(ids.tolist(), updates)]

    def _chunk_clients(self, ids: np.ndarray, fn: Any) -> int:
        """Clients a batched call runs at once: all of them, unless the batched form may be split
        (:func:`fedray.core.contract.batched`) and their rows exceed :data:`BATCH_ROWS`; a
        non-resident host generates the rows of at most :data:`REGENERATE_CHUNK` clients at once."""
        if len(ids) < 2 or not batched_split(fn):
            return len(ids)
        rows = int(self._offsets[-1]) if self._offsets is not None else 0
        per_client = max(1, rows // max(1, len(self.ids)))
        per = max(1, BATCH_ROWS // per_client)
        return min(per, REGENERATE_CHUNK) if not self.resident else per

    def _run_each(self, round_: int, tasks: list[tuple[int, Task, int]], shared: tuple[Any, ...]) -> list[Outcome]:
        out = []
        for cid, task, sidx in tasks:
            client = self.client(cid, round_)
            view = client if (task.evaluation or self.supervised) else TrainingView(client)
            t0 = time.perf_counter()
            try:
                update = task.fn(task.payload, shared[sidx] if sidx >= 0 else None, view)
            except FedrayError as exc:
                out.append(Outcome(cid, error=f"client {client.name or cid}: {exc}", user_error=True))
                continue
            except Exception:  # noqa: BLE001 - reported to the server with the traceback
                out.append(Outcome(cid, error=f"client {cid}: {traceback.format_exc()}"))
                continue
            finally:
                self.forget_empty((cid,))
            out.append(Outcome(cid, update, time.perf_counter() - t0, nbytes_of(update)))
        return out

    def get_state(self, client_ids: list[int]) -> dict[int, dict[str, Any]]:
        """The state of each of ``client_ids`` that has one (a client missing from the answer has none)."""
        return {cid: self.states[cid] for cid in client_ids if self.states.get(cid)}

    def set_state(self, states: dict[int, dict[str, Any]]) -> None:
        for cid, st in states.items():
            self.states[int(cid)] = st
        self.forget_empty(list(states))

    def gather_data(self, labels: bool = True) -> list[tuple[int, np.ndarray, np.ndarray | None]]:
        """The shards themselves — only for central baselines in simulations."""
        out = []
        for cid in self.ids.tolist():
            X, y = self.shard(cid)
            out.append((cid, X, y if labels else None))
        return out
