"""Replies in columns: the transport of a round's replies (:class:`Replies`), which keeps the
clients' packed outcomes as arrays and builds a :class:`~fedray.core.contract.Reply` only when read."""
from __future__ import annotations

from collections.abc import MutableSequence
from typing import Any

import numpy as np

from fedray.core.contract import Reply
from fedray.core.errors import FedrayError


class Replies(MutableSequence):
    """A round's replies, in client-id order: a list of :class:`Reply` to its users.

    Hosts that answer column-wise (a :class:`~fedray.core.stats.StatsBlock` per host) are kept
    as columns: no per-client object exists until one is read. :func:`fedray.total`
    of a ``Replies`` sums the updates straight from the columns (the same bits as
    summing the :class:`Reply` objects), and :meth:`columns` gives the client ids,
    seconds and bytes as arrays. Anything else (indexing, iterating, changing) turns
    it into an ordinary list of :class:`Reply` first.
    """

    __slots__ = ("_segs", "_list", "summed_total")

    def __init__(self, items: Any = ()) -> None:
        self._segs: list[tuple[np.ndarray, Any, np.ndarray, np.ndarray]] = []
        self._list: list[Reply] | None = list(items) if items else None
        self.summed_total: Any = None  # the sum of the updates, when hosts added them (Task.summed)

    @classmethod
    def summed(cls, client_ids: np.ndarray, seconds: np.ndarray, nbytes: np.ndarray, total: Any) -> Replies:
        """Replies of a ``Task(summed=True)`` call whose hosts added the updates: the clients' ids,
        seconds and bytes, and the sum (what :func:`fedray.total` returns); no update of its own."""
        out = cls()
        out._segs.append((np.asarray(client_ids, dtype=np.int64), None, np.asarray(seconds, dtype=np.float64),
                          np.asarray(nbytes, dtype=np.int64)))
        out.summed_total = total
        return out

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

    def column_parts(self) -> dict[str, list[np.ndarray]] | None:
        """Per statistic, its column segments in order (one per host part), when all replies are
        columns of one layout; nothing is copied (see :func:`fedray.core.stats.total`)."""
        if self._list is not None or not self._segs or self.summed_total is not None:
            return None
        first = self._segs[0][1].arrays
        if any(seg[1].arrays.keys() != first.keys()
               or any(seg[1].arrays[k].shape[1:] != first[k].shape[1:] for k in first) for seg in self._segs):
            return None
        return {k: [seg[1].arrays[k] for seg in self._segs] for k in first}

    def column_sources(self) -> dict[str, list[Any]] | None:
        """As :meth:`column_parts`, each segment of rows taken from a larger block given as (the block's
        array, the rows) instead of a copy (:meth:`fedray.core.stats.TakenRows.sources`); for
        :func:`fedray.core.stats.fold_rows`."""
        if self._list is not None or not self._segs or self.summed_total is not None:
            return None
        srcs = [b.sources() if hasattr(b, "sources") else b.arrays for b in (seg[1] for seg in self._segs)]

        def rest(v: Any) -> tuple[int, ...]:  # the shape of one client's statistic
            return (v[0] if isinstance(v, tuple) else v).shape[1:]

        first = srcs[0]
        if any(s.keys() != first.keys() or any(rest(s[k]) != rest(first[k]) for k in first) for s in srcs):
            return None
        return {k: [s[k] for s in srcs] for k in first}

    def where(self, keep: np.ndarray) -> Replies:
        """These replies less those where ``keep`` (bool, one per reply, in the order of :meth:`columns`)
        is False; column-wise where they are columns, without searching for ids."""
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (len(self),):
            raise ValueError(f"Replies.where: {keep.shape} flags for {len(self)} replies")
        if self.summed_total is not None:
            raise FedrayError(
                "these replies hold only their sum (Task(summed=True)): no client's reply can be taken out"
            )
        out = Replies()
        if self._list is not None:
            out._list = [r for r, k in zip(self._list, keep.tolist()) if k]
            return out
        lo = 0
        for ids, block, seconds, nbytes in self._segs:
            part = keep[lo:lo + len(ids)]
            lo += len(ids)
            if part.all():
                out.add_columns(ids, block, seconds, nbytes)
                continue
            idx = np.flatnonzero(part)
            out.add_columns(ids[idx], block.take(idx), seconds[idx], nbytes[idx])
        return out

    # --- the list protocol ---
    def _materialize(self) -> list[Reply]:
        if self.summed_total is not None:
            raise FedrayError("these replies hold only their sum: the task was declared Task(summed=True), so the "
                              "hosts added the clients' updates; read them with fedray.total, or drop summed=True")
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
        if self.summed_total is not None:
            return (Replies.summed, (*self.columns(), self.summed_total))
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
