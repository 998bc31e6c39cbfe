"""Where a host's clients' rows are: one block, or one array per client.

A :class:`~fedray.runtime.host.ClientHost` asks its :class:`ClientStore` the same questions
whatever form its clients take: where a client sits (:meth:`~ClientStore.positions`), its name
and recipe facts, its rows (:meth:`~ClientStore.shard`), the rows of many clients one after
another (:meth:`~ClientStore.rows`, where :attr:`~ClientStore.batchable`), how many clients a
batched call may take at once, per-client descriptions, the bytes held, and a scaler to apply.
Three forms answer:

* :class:`RowBlock`: every client's rows in one array (client-id order) with the offsets where
  each client's rows begin: generated shards (``blobs``), or built shards of one shape;
* :class:`RegeneratedRows`: generated shards not kept (``runtime.resident``): the rows of the
  clients a call needs are generated again from the recipe (the same bits) and scaled like
  resident ones;
* :class:`ShardTable`: one array per client, for shards that cannot be one block (shapes that
  differ, a read-only array of the caller's or of the object store, a shard that could not be
  built); its clients run client by client.

:func:`client_store` picks the form from the recipes.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from fedray.core.errors import FedrayError
from fedray.data.checks import Descriptions, describe_block, describe_shard
from fedray.data.federation import generate_rows, materialize_many, regenerable
from fedray.data.recipes import recipe_ids, recipe_meta, recipe_name, recipe_names, recipes_nbytes

Rows = tuple[np.ndarray, np.ndarray | None]


class ClientStore:
    """The clients of one host (recipes ``specs``, ascending client ids) and their rows.

    Attributes
    ----------
    ids : ndarray of int, shape (n_clients,)
    feature_names : tuple of str
    build_errors : dict
        Client id -> why its shard could not be built.
    batchable : bool
        Whether :meth:`rows` gives many clients' rows as one block (batched client functions run).
    resident : bool
        Whether the rows stay in memory (False: generated again whenever clients run).
    """

    batchable = False
    resident = True

    def __init__(self, specs: Any) -> None:
        self.specs = specs  # kept: names, recipe facts, regeneration
        self.ids = recipe_ids(specs)
        if np.any(np.diff(self.ids) <= 0):
            raise ValueError("a host's recipes must be in ascending client-id order")
        self.feature_names: tuple[str, ...] = ()
        self.build_errors: dict[int, str] = {}
        self._first = int(self.ids[0]) if len(self.ids) else 0
        self._contiguous = bool(len(self.ids) == 0 or int(self.ids[-1]) - self._first == len(self.ids) - 1)
        self._index: dict[int, int] | None = None  # client id -> position (only for non-contiguous ids)

    # --- where a client is ----------------------------------------------
    def positions(self, ids: Any) -> np.ndarray:
        """Positions (0 .. n_clients - 1) of client ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._contiguous:
            return ids - self._first
        return np.searchsorted(self.ids, ids)

    def position(self, cid: int) -> int:
        """The position of client ``cid``."""
        if self._contiguous:
            return int(cid) - self._first
        if self._index is None:
            self._index = {c: i for i, c in enumerate(self.ids.tolist())}
        return self._index[int(cid)]

    def __contains__(self, cid: Any) -> bool:
        pos = int(cid) - self._first if self._contiguous else int(np.searchsorted(self.ids, int(cid)))
        return 0 <= pos < len(self.ids) and int(self.ids[pos]) == int(cid)

    def name(self, cid: int) -> str:
        return recipe_name(self.specs, self.position(cid))

    def meta(self, cid: int) -> Any:
        """What :class:`~fedray.runtime.clients.Client` takes as ``meta``: a function giving the recipe's
        facts, or None."""
        return recipe_meta(self.specs, self.position(cid))

    # --- what each form answers -----------------------------------------
    def shard(self, cid: int) -> Rows:
        """Client ``cid``'s rows and labels."""
        raise NotImplementedError

    def rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Rows, labels and offsets (n + 1,) of clients ``ids`` (ascending), one after another."""
        raise NotImplementedError

    def clients_at_once(self, batch_rows: int, regenerate_chunk: int) -> int:
        """Clients a batched call that may be split runs at once: as many as have about ``batch_rows``
        rows (at most ``regenerate_chunk`` where rows are generated again); only where :attr:`batchable`."""
        raise NotImplementedError

    def describe(self, moments: bool, describe_rows: int, regenerate_chunk: int) -> Descriptions:
        """Per-client descriptions (:mod:`fedray.data.checks`), ``moments`` (column sums, sums of squares,
        extremes) or not; at most about ``describe_rows`` rows (and ``regenerate_chunk`` clients where
        rows are generated again) at once."""
        raise NotImplementedError

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> None:
        """Transform every shard to (X - shift) / scale (rows generated again too, from now on)."""
        raise NotImplementedError

    def held(self) -> dict[str, int]:
        """Bytes held, by kind: ``rows``, ``index`` (ids and offsets), ``shards`` (per-client arrays),
        ``recipes`` (see :meth:`fedray.runtime.host.ClientHost.accounting`)."""
        return {"rows": 0, "index": int(self.ids.nbytes), "shards": 0, "recipes": int(recipes_nbytes(self.specs))}


class RowBlock(ClientStore):
    """Every client's rows in one block (client-id order) and the offsets where each begins."""

    batchable = True

    def __init__(self, specs: Any, offsets: np.ndarray, feature_names: tuple[str, ...],
                 X: np.ndarray | None, y: np.ndarray | None) -> None:
        super().__init__(specs)
        self.offsets = offsets  # (n_clients + 1,)
        self.feature_names = tuple(feature_names)
        self.X, self.y = X, y

    def shard(self, cid: int) -> Rows:
        pos = self.position(cid)
        lo, hi = int(self.offsets[pos]), int(self.offsets[pos + 1])
        return self.X[lo:hi], (self.y[lo:hi] if self.y is not None else None)

    def rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        pos = self.positions(ids)
        offs, X, y = self.offsets, self.X, self.y
        if len(pos) and int(pos[-1]) - int(pos[0]) == len(pos) - 1:  # consecutive: a view
            lo, hi = int(offs[pos[0]]), int(offs[pos[-1] + 1])
            return X[lo:hi], (y[lo:hi] if y is not None else None), offs[pos[0]:pos[-1] + 2] - lo
        sizes = offs[pos + 1] - offs[pos]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        rows = np.repeat(offs[pos] - offsets[:-1], sizes) + np.arange(int(offsets[-1]))
        return X[rows], (y[rows] if y is not None else None), offsets

    def clients_at_once(self, batch_rows: int, regenerate_chunk: int) -> int:
        per_client = max(1, int(self.offsets[-1]) // max(1, len(self.ids)))
        return min(max(1, batch_rows // per_client), self._most_clients(regenerate_chunk))

    def _most_clients(self, regenerate_chunk: int) -> int:
        """Clients whose rows one chunk of a call may hold, whatever their rows."""
        return len(self.ids)

    def _chunks(self, describe_rows: int, regenerate_chunk: int) -> Iterator[slice]:
        start, n = 0, len(self.ids)
        most = self._most_clients(regenerate_chunk)
        while start < n:
            stop = int(np.searchsorted(self.offsets, self.offsets[start] + describe_rows, side="right")) - 1
            stop = min(n, max(stop, start + 1), start + most)
            yield slice(start, stop)
            start = stop

    def describe(self, moments: bool, describe_rows: int, regenerate_chunk: int) -> Descriptions:
        names = recipe_names(self.specs)
        parts = []
        for chunk in self._chunks(describe_rows, regenerate_chunk):
            X, y, offsets = self.rows(self.ids[chunk])
            parts.append(describe_block(self.ids[chunk], names[chunk] if names is not None else None, X, y, offsets,
                                        self.feature_names, moments=moments))
        return Descriptions.concat(parts)

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> None:
        self.X -= shift
        self.X /= scale

    def held(self) -> dict[str, int]:
        out = super().held()
        out["rows"] = int(sum(a.nbytes for a in (self.X, self.y) if a is not None))
        out["index"] += int(self.offsets.nbytes)
        return out


class RegeneratedRows(RowBlock):
    """Generated shards not kept: the rows of the clients asked for are generated again from the
    recipes (a :class:`~fedray.data.recipes.RecipeRange`), then scaled as resident rows were."""

    resident = False

    def __init__(self, specs: Any) -> None:
        offsets, names = generate_rows(specs, None)
        super().__init__(specs, offsets, names, None, None)
        self._scaler: tuple[np.ndarray, np.ndarray] | None = None  # applied to the rows generated

    def shard(self, cid: int) -> Rows:
        X, y, _ = self.rows(np.array([cid], dtype=np.int64))
        return X, y

    def rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        X, y, offsets = generate_rows(self.specs, ids)
        if self._scaler is not None:
            X -= self._scaler[0]
            X /= self._scaler[1]
        return X, y, offsets

    def _most_clients(self, regenerate_chunk: int) -> int:
        return regenerate_chunk

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> None:
        self._scaler = (np.asarray(shift), np.asarray(scale))


class ShardTable(ClientStore):
    """One array per client (client-id order), kept as built: read-only arrays are not copied."""

    def __init__(self, specs: Any, shards: list[Rows], feature_names: tuple[str, ...],
                 build_errors: dict[int, str]) -> None:
        super().__init__(specs)
        self.shards = shards
        self.feature_names = tuple(feature_names)
        self.build_errors = build_errors

    def shard(self, cid: int) -> Rows:
        return self.shards[self.position(cid)]

    def rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        raise TypeError("the clients' shards are not one block; they run client by client")

    def describe(self, moments: bool, describe_rows: int, regenerate_chunk: int) -> Descriptions:
        out = []
        for cid, (X, y) in zip(self.ids.tolist(), self.shards):
            name = self.name(cid)
            if cid in self.build_errors:
                out.append({"client_id": cid, "name": name, "n": int(X.shape[0]),
                            "n_features": int(X.shape[1]) if X.ndim == 2 else -1, "error": self.build_errors[cid]})
            else:
                out.append(describe_shard(cid, name, X, y, self.feature_names, moments=moments))
        return Descriptions.from_rows(out)

    def apply_scaler(self, shift: np.ndarray, scale: np.ndarray) -> None:
        self.shards = [((X - shift) / scale, y) for X, y in self.shards]

    def held(self) -> dict[str, int]:
        out = super().held()
        out["shards"] = int(sum(X.nbytes + (y.nbytes if y is not None else 0) for X, y in self.shards))
        return out


def client_store(specs: Any, resident: bool = True) -> ClientStore:
    """The store of the clients of ``specs``: generated rows kept (or, with ``resident=False``, generated
    again), or shards built client by client (files, pooled data sets, arrays), kept as one block when
    they can be."""
    if regenerable(specs):
        if not resident:
            return RegeneratedRows(specs)
        offsets, names = generate_rows(specs, None)
        X, y, _ = generate_rows(specs, recipe_ids(specs))
        return RowBlock(specs, offsets, names, X, y)
    shards: list[Rows] = []
    errors: dict[int, str] = {}
    names: tuple[str, ...] = ()
    for spec, built in zip(specs, materialize_many(list(specs))):
        if isinstance(built, Exception):
            errors[spec.client_id] = (
                str(built) if isinstance(built, FedrayError) else f"{type(built).__name__}: {built}"
            )
            shards.append((np.zeros((0, 0)), None))
            continue
        X, y, feats = built
        shards.append((np.ascontiguousarray(X, dtype=np.float64), y))
        names = names or tuple(feats)
    # A read-only shard is the caller's own array (fedray.from_arrays on the local runtime) or the
    # object store's: it is kept as it is, not copied, and its clients run client by client.
    if (
        errors
        or not shards
        or len({X.shape[1:] for X, _ in shards}) != 1
        or not all(X.flags.writeable for X, _ in shards)
    ):
        return ShardTable(specs, shards, names, errors)
    sizes = np.array([X.shape[0] for X, _ in shards], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    # Always a copy: the scaler works in place, and a shard may be the user's array.
    X = np.concatenate([X for X, _ in shards]) if len(shards) > 1 else np.array(shards[0][0], copy=True)
    y = np.concatenate([np.asarray(y) for _, y in shards]) if all(y is not None for _, y in shards) else None
    return RowBlock(specs, offsets, names, X, y)
