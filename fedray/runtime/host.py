"""The host that keeps clients: rows of one block, not objects.

A :class:`ClientHost` owns one or more clients. It keeps them as rows: one contiguous
array of every client's samples (client-id order) with the offsets where each client's
rows begin, the clients' ids as an array, and per-client state and secrets in two
dictionaries holding only the clients that have some. Random streams are keyed by (seed,
client, round, stream) and built only when a client runs; a :class:`~fedray.runtime.clients.Client`
view is built when a client runs and dropped after. So a client that has never been
sampled costs its rows and its offset, and nothing else.

Where the rows are is the host's :class:`~fedray.runtime.storage.ClientStore`: one block
(generated ``blobs`` shards, built in bulk per host, or built shards of one shape), generated
shards not kept at all (``resident=False``: the rows of the clients a call needs are generated
again from the recipe, the same bits, and scaled like the resident ones), or one array per
client. The host asks it the same questions whatever the form; the tasks, too, come in two
forms that :func:`~fedray.runtime.tasks.task_batches` turns into the same batches.

The local runtime uses one host in-process; the Ray runtime wraps hosts in actors. The
host never knows what an algorithm computes: it calls the task's function.
"""
from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedray.core.contract import Task, batched_form, batched_split
from fedray.core.errors import FedrayError
from fedray.core.sizes import nbytes_of
from fedray.core.stats import fold_rows
from fedray.data.checks import Descriptions
from fedray.runtime.clients import (
    Client,
    ClientBatch,
    ClientsView,
    Outcome,
    PackedOutcomes,
    TrainingView,
    batch_outcomes,
    pack_parts,
    unpack_outcomes,
)
from fedray.runtime.messages import HostReply, KeptSum
from fedray.runtime.storage import client_store
from fedray.runtime.tasks import Batch, task_batches, task_items

__all__ = ["ClientHost"]

log = logging.getLogger(__name__)

#: Clients whose rows a non-resident host generates at once (bounds the memory of a call over all of them).
REGENERATE_CHUNK = 1 << 16
#: Bytes of one entry of a dictionary keyed by client id (the key and the slot), for :meth:`ClientHost.accounting`.
_DICT_ENTRY = 100
#: Rows an evaluation (or a non-resident host) hands to a batched client function at once.
BATCH_ROWS = 1 << 18
#: Rows described at once (bounds the temporary arrays of the set-up checks).
DESCRIBE_ROWS = 1 << 21
#: Bytes of replies a host keeps for a summed call (:meth:`ClientHost.keep`); past them it sends the
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
        self.store = client_store(specs, resident)  # the rows, wherever they are
        self.ids = self.store.ids
        self.resident = self.store.resident
        self.feature_names = self.store.feature_names
        self.build_errors = self.store.build_errors  # client id -> why its shard could not be built
        self.states: dict[int, dict[str, Any]] = {}  # client id -> state (only clients that have some)
        self.secrets: dict[int, dict[str, Any]] = {}  # client id -> protocol secrets (idem)
        self._sink: Any = None  # where the parts of a chunked call go (run_parts)
        self._kept: list[PackedOutcomes] | None = None  # replies of a summed call, until folded

    # --- where a client's rows are ---------------------------------------
    def positions(self, ids: Any) -> np.ndarray:
        """Positions (0 .. n_clients - 1) of client ``ids`` in this host."""
        return self.store.positions(ids)

    def __contains__(self, cid: Any) -> bool:
        return cid in self.store

    def name(self, cid: int) -> str:
        return self.store.name(cid)

    def shard(self, cid: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Client ``cid``'s rows and labels (views of the block; generated again when not resident)."""
        return self.store.shard(cid)

    def client(self, cid: int, round_: int = -1, X: np.ndarray | None = None, y: Any = None) -> Client:
        """A view of client ``cid`` (its rows ``X``/``y`` when the caller has them already)."""
        if X is None:
            X, y = self.shard(cid)
        store = self.store
        return Client(cid, store.name(cid), X, y, self.seed, self.supervised, self.sample_shape, self.states,
                      self.secrets, store.meta(cid), round_)

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
        def table(held: dict[int, dict[str, Any]]) -> int:
            return sum(_DICT_ENTRY + sys.getsizeof(d) + sum(sys.getsizeof(k) + nbytes_of(v) for k, v in d.items())
                       for d in held.values())

        held = self.store.held()
        return {"clients": len(self.ids), "rows": held["rows"], "index": held["index"], "state": table(self.states),
                "secrets": table(self.secrets), "shards": held["shards"], "recipes": held["recipes"]}

    # --- set-up ---------------------------------------------------------
    def describe(self, private: bool = False) -> Descriptions:
        """Per-client facts the server may know: size, dimension, column sums, bounds, bad values.

        With ``private`` (any ``privacy.*`` mechanism on) the per-client column sums, sums of
        squares, minima and maxima are left out: for a small client they are rows (a one-row
        client's sum and a client's extremes); the session then sums moments securely.
        """
        return self.store.describe(not private, DESCRIBE_ROWS, REGENERATE_CHUNK)

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> int:
        """Transform every shard to (X - shift) / scale (regenerated rows too, from now on)."""
        self.store.apply_scaler(shift, scale)
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
        if not (self.batched and self.store.batchable):  # batched forms need the rows as a block
            return self._run_each(round_, task_items(tasks), shared)
        single, batches = task_batches(tasks)
        out: list[Outcome | PackedOutcomes] = self._run_each(round_, single, shared) if single else []
        for batch in batches:
            out += self._run_batch(round_, batch, shared)
        return out

    # --- summed calls (Task.summed): the host adds its clients' updates -----------
    def keep(self, round_: int, tasks: Any, *shared: Any, store: Any = None) -> HostReply:
        """Run ``tasks`` and keep their replies here for :meth:`fold_kept`; the answer's ``kept`` holds who
        answered and the statistics of one value a client as columns (summed pairwise by the caller).
        When the replies are not all column-wise statistics, or take more than ``KEEP_BYTES``, the answer
        holds them (``parts``) instead: the parts past ``KEEP_BYTES`` went to ``store`` (the Ray actor's
        object store sink) as they were computed, as in :meth:`run_parts`."""
        held, stored = 0, False

        def keep(part: Outcome | PackedOutcomes) -> Any:
            nonlocal held, stored
            if not part.column_wise:
                return part
            part = part.narrowed()  # counts and tables as small integers while they wait
            held += sum(a.nbytes for a in part.arrays.values())
            if store is None or held <= KEEP_BYTES:
                return part
            stored = True
            return store(part)

        self._kept = None
        parts = self.run_parts(round_, tasks, *shared, sink=keep)
        if stored or not parts or not all(p.column_wise and not p.others for p in parts):
            return HostReply(pack_parts(parts))
        self._kept = parts
        cat = np.concatenate
        keys = [k for k, v in parts[0].arrays.items() if int(np.prod(v.shape[1:])) < 2]
        return HostReply(
            kept=KeptSum(
                cat([p.client_ids for p in parts]),
                cat([p.seconds for p in parts]),
                cat([p.nbytes for p in parts]),
                {k: cat([p.arrays[k] for p in parts]) for k in keys},
                list(parts[0].arrays),
            )
        )

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
        X, y, offsets = self.store.rows(ids)
        see_labels = evaluation or self.supervised

        def views() -> list[Any]:
            # Built only when the batched form asks for ``batch.clients``.
            out = []
            for i, cid in enumerate(ids.tolist()):
                lo, hi = int(offsets[i]), int(offsets[i + 1])
                c = self.client(cid, round_, X[lo:hi], y[lo:hi] if y is not None else None)
                out.append(c if see_labels else TrainingView(c))
            return out

        return ClientBatch(ids, views, X, offsets, y if see_labels else None, self.seed, round_)

    def _run_batch(self, round_: int, batch: Batch, shared: tuple[Any, ...]) -> list[Outcome | PackedOutcomes]:
        """Run a batched form over the clients of ``batch``. A call over many clients of a form that
        may be split runs over chunks of clients (each chunk's rows generated again where they are
        not kept), so that its temporary arrays stay small; each chunk's replies are one part of the
        answer."""
        ids = batch.ids
        per = self._chunk_clients(ids, batch.fn)
        if per < len(ids):
            out: list[Outcome | PackedOutcomes] = []
            for lo in range(0, len(ids), per):
                got = self._run_batch(round_, batch.part(slice(lo, lo + per)), shared)
                sink = self._sink
                out += [sink(p) for p in got] if sink is not None else got
            return out
        view = self._batch(round_, ids, batch.evaluation)
        t0 = time.perf_counter()
        arg = batch.shared.pick(shared)
        try:
            updates = batched_form(batch.fn)(batch.payloads, arg, view)
            if len(updates) != len(ids):
                raise ValueError(f"batched client function returned {len(updates)} updates for {len(ids)} clients")
        except Exception:  # noqa: BLE001 - the plain function, client by client, reports who failed and why
            log.debug("batched client function failed; running its clients one by one:\n%s", traceback.format_exc())
            return self._run_each(round_, task_items(batch.items), shared)
        finally:
            if view.views_built:  # forget what the views left empty
                self.forget_empty(ids.tolist())
        return batch_outcomes(ids, updates, (time.perf_counter() - t0) / len(ids))

    def _chunk_clients(self, ids: np.ndarray, fn: Any) -> int:
        """Clients a batched call runs at once: all of them, unless the batched form may be split
        (:func:`fedray.core.contract.batched`) and their rows exceed :data:`BATCH_ROWS`; a
        non-resident host generates the rows of at most :data:`REGENERATE_CHUNK` clients at once."""
        if len(ids) < 2 or not batched_split(fn):
            return len(ids)
        return self.store.clients_at_once(BATCH_ROWS, REGENERATE_CHUNK)

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

    def gather_data(self, labels: bool = True, rows: dict[int, np.ndarray] | None = None
                    ) -> list[tuple[int, np.ndarray, np.ndarray | None]]:
        """The shards themselves — only for central baselines in simulations.

        ``rows``: only these clients, and of each only the rows at these positions (a subsample)."""
        out = []
        for cid in self.ids.tolist() if rows is None else [c for c in sorted(rows) if c in self]:
            X, y = self.shard(cid)
            if rows is not None:
                X, y = X[rows[cid]], (None if y is None else y[rows[cid]])
            out.append((cid, X, y if labels else None))
        return out
