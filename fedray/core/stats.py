"""Statistics objects: summaries that clients send and the server adds up.

A statistics object is a named collection of float64 arrays with ``+`` and
``zero()``. Aggregation of any summed statistic is ``sum(updates, start=zero)``,
which keeps "federated equals central" a single property and makes masking for
secure aggregation a matter of adding vectors.

Array roles: :data:`COUNTS_OF` names the arrays that hold per-cluster sums of rows and the
array of point counts beside each. A count of 1 makes the sum beside it a row, so the privacy
guards and the disclosure counts read these roles, whatever algorithm sent the statistics.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fedray.core.contract import Reply

#: Array roles: per-cluster sums of rows (k-means and the evaluation passes: ``sums``; Federated
#: K-means: ``weighted``) -> the array of the clusters' point counts beside them.
COUNTS_OF: dict[str, str] = {"sums": "counts", "weighted": "counts"}


class Stats(Mapping[str, np.ndarray]):
    """An immutable mapping of names to arrays that adds element-wise.

    Parameters
    ----------
    **arrays
        Named arrays (converted to float64 unless integer-valued arrays are wanted
        by passing them as ``np.int64``).
    """

    __slots__ = ("_a", "_row")

    def __init__(self, **arrays: Any) -> None:
        self._a: dict[str, np.ndarray] | None = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}
        self._row: tuple[StatsBlock, int] | None = None  # (block, row) when this is a row of a StatsBlock

    @property
    def _arrays(self) -> dict[str, np.ndarray]:
        a = self._a
        if a is None:  # a row of a block: its views are made when first read
            block, i = self._row
            narrow = block.narrow
            a = self._a = {k: (v[i].astype(np.float64) if k in narrow else v[i]) for k, v in block.arrays.items()}
        return a

    def names(self) -> Any:
        """The statistics' names (without making a block row's views)."""
        return self._row[0].arrays.keys() if self._a is None else self._a.keys()

    # Mapping interface
    def __getitem__(self, key: str) -> np.ndarray:
        return self._arrays[key]

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def __add__(self, other: Stats) -> Stats:
        if other is None or (isinstance(other, int) and other == 0):
            return self
        if not isinstance(other, Stats):
            return NotImplemented
        if self._arrays.keys() != other._arrays.keys():
            raise ValueError(f"cannot add statistics with names {sorted(self)} and {sorted(other)}")
        return Stats(**{k: self._arrays[k] + other._arrays[k] for k in self._arrays})

    __radd__ = __add__

    def __mul__(self, factor: float) -> Stats:
        return Stats(**{k: v * factor for k, v in self._arrays.items()})

    __rmul__ = __mul__

    def zero(self) -> Stats:
        """Statistics with the same names and shapes, all zero."""
        return Stats(**{k: np.zeros_like(v) for k, v in self._arrays.items()})

    def flat(self) -> np.ndarray:
        """All arrays concatenated into one vector (names in sorted order)."""
        return np.concatenate([self._arrays[k].ravel() for k in sorted(self._arrays)]) if self._arrays else np.zeros(0)

    def with_flat(self, vector: np.ndarray) -> Stats:
        """Statistics of the same layout filled from ``vector`` (inverse of :meth:`flat`)."""
        out, pos = {}, 0
        for k in sorted(self._arrays):
            v = self._arrays[k]
            out[k] = np.asarray(vector[pos : pos + v.size], dtype=np.float64).reshape(v.shape)
            pos += v.size
        return Stats(**out)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{tuple(v.shape)}" for k, v in self._arrays.items())
        return f"Stats({shapes})"

    def __reduce__(self):
        return (_rebuild_stats, (self._arrays,))


def _rebuild_stats(arrays: dict) -> Stats:
    return Stats(**arrays)


class StatsBlock:
    """Statistics of many clients, column-wise: ``arrays[name]`` has shape (n_clients, ...).

    What a batched client function (:func:`fedray.batched`) may return instead of a list
    of :class:`Stats`, so that no per-client object is built where the clients live.
    Row ``i`` is client ``i`` of the batch; :meth:`row` gives it as a :class:`Stats`
    (a view, float64), and :func:`total` sums consecutive rows of a block in one
    vectorised reduction.

    Parameters
    ----------
    **arrays
        Named arrays with the same first dimension (converted to float64).
    """

    __slots__ = ("arrays", "n", "narrow")

    def __init__(self, **arrays: Any) -> None:
        self.narrow: frozenset[str] = frozenset()  # arrays sent as small integers (see narrowed)
        self.arrays = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}
        lengths = {v.shape[0] if v.ndim else -1 for v in self.arrays.values()}
        if len(lengths) > 1 or -1 in lengths:
            raise ValueError(f"StatsBlock: every array needs the same first dimension; got "
                             f"{ {k: v.shape for k, v in self.arrays.items()} }")
        self.n = lengths.pop() if lengths else 0

    def __len__(self) -> int:
        return self.n

    def row(self, i: int) -> Stats:
        """Client ``i`` of the block as a :class:`Stats` (views of the block's arrays)."""
        s = Stats.__new__(Stats)
        s._a = None
        s._row = (self, i)
        return s

    def rows(self) -> list[Stats]:
        new, out = Stats.__new__, []
        append = out.append
        for i in range(self.n):
            s = new(Stats)
            s._a = None
            s._row = (self, i)
            append(s)
        return out

    def nbytes_each(self) -> int:
        """Bytes of one client's statistics (as float64)."""
        return int(sum(v[0].size * 8 for v in self.arrays.values())) if self.n else 0

    def column(self, name: str) -> np.ndarray:
        """Array ``name`` as float64 (a narrowed one is widened: a copy)."""
        v = self.arrays[name]
        return v.astype(np.float64) if name in self.narrow else v

    def take(self, idx: np.ndarray) -> StatsBlock:
        """The rows ``idx`` as a block; the rows are copied only when read (:class:`TakenRows`)."""
        return TakenRows(self, np.asarray(idx, dtype=np.int64))

    def narrowed(self) -> StatsBlock:
        """The same block with each array whose values are all small non-negative integers (counts,
        contingency tables) stored as the smallest unsigned integer type that holds them exactly; every
        read widens them back to the same float64 values. For sending many clients' statistics."""
        out = StatsBlock.__new__(StatsBlock)
        out.arrays, out.n, narrow = dict(self.arrays), self.n, set(self.narrow)
        for k, v in self.arrays.items():
            if k in narrow or v.dtype != np.float64 or v.size < 1024:
                continue
            head = v.ravel()[:1024]
            if np.any(head != np.floor(head)) or np.any(np.signbit(head)):
                continue
            for dt in (np.uint8, np.uint16, np.uint32):
                with np.errstate(invalid="ignore"):  # NaN or inf past the first values: not exact, kept below
                    small = v.astype(dt)
                if np.array_equal(small, v) and not np.signbit(v).any():  # exact, and no -0.0
                    out.arrays[k] = small
                    narrow.add(k)
                    break
                if float(v.max()) <= np.iinfo(dt).max:
                    break  # in range but not integers: keep it
        out.narrow = frozenset(narrow)
        return out

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{tuple(v.shape[1:])}" for k, v in self.arrays.items())
        return f"StatsBlock({self.n} x {shapes})"


class TakenRows(StatsBlock):
    """Rows ``idx`` of a :class:`StatsBlock`, copied out only when first read (:attr:`arrays`).

    A round that drops its late clients keeps most of its rows; :func:`total` sums them straight
    from the source block a chunk at a time (:meth:`sources`), so the kept rows are never copied
    as a whole."""

    __slots__ = ("src", "idx", "_taken")

    def __init__(self, src: StatsBlock, idx: np.ndarray) -> None:  # noqa: D107 - see the class
        if isinstance(src, TakenRows):  # rows of rows: of the first source
            src, idx = src.src, src.idx[idx]
        self.src, self.idx, self._taken = src, idx, None
        self.n, self.narrow = len(idx), src.narrow

    @property  # type: ignore[override]
    def arrays(self) -> dict[str, np.ndarray]:
        if self._taken is None:
            self._taken = {k: np.take(v, self.idx, axis=0) for k, v in self.src.arrays.items()}
        return self._taken

    def sources(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per statistic, (the source's array, the rows taken), nothing copied."""
        return {k: (v, self.idx) for k, v in self.src.arrays.items()}

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (and copied) as the plain block of its rows
        return _plain_block, (self.arrays, self.narrow)


def _plain_block(arrays: dict[str, np.ndarray], narrow: frozenset[str]) -> StatsBlock:
    out = StatsBlock.__new__(StatsBlock)
    out.arrays, out.narrow = dict(arrays), frozenset(narrow)
    out.n = len(next(iter(arrays.values()))) if arrays else 0
    return out


def _reduce(stacked: dict[str, np.ndarray]) -> Stats:
    return Stats(**{k: np.add.reduce(v, axis=0) for k, v in stacked.items()})


#: Rows added at once when a sum continues over a further segment (bounds the copy it makes).
FOLD_ROWS = 1 << 14


def fold_rows(parts: list[Any], start: np.ndarray | None = None) -> np.ndarray:
    """``np.add.reduce(np.concatenate(parts), axis=0)``, the same bits, without stacking every part.

    Along the first axis numpy adds rows one after another whenever a row has two or more
    values (the inner loop runs along the row), so the sum continues over each further part
    from the running total; a row of one value is summed pairwise, which needs the whole
    column (small: one number per client). ``start``: a running total to continue from (rows of two
    or more values only), e.g. the sum of the clients before these. A part may also be a pair
    (array, rows): those rows of the array (:meth:`TakenRows.sources`), taken a chunk at a time."""
    def size(p: Any) -> int:
        return len(p[1]) if isinstance(p, tuple) else len(p)

    def chunk(p: Any, lo: int, hi: int) -> np.ndarray:
        rows = np.take(p[0], p[1][lo:hi], axis=0) if isinstance(p, tuple) else p[lo:hi]
        return rows.astype(np.float64, copy=False)  # narrowed parts widen a chunk at a time

    def whole(p: Any) -> np.ndarray:
        return np.take(p[0], p[1], axis=0) if isinstance(p, tuple) else p

    first = parts[0][0] if isinstance(parts[0], tuple) else parts[0]
    if len(parts) == 1 and start is None and first.dtype == np.float64:
        return np.add.reduce(whole(parts[0]), axis=0)
    if int(np.prod(first.shape[1:])) < 2:
        return np.add.reduce(np.concatenate([whole(p) for p in parts]).astype(np.float64, copy=False), axis=0)
    acc = start
    for part in parts:
        for lo in range(0, size(part), FOLD_ROWS):
            rows = chunk(part, lo, lo + FOLD_ROWS)
            acc = np.add.reduce(rows if acc is None else np.concatenate([acc[None], rows]), axis=0)
    if acc is None:
        return np.add.reduce(np.concatenate([whole(p) for p in parts]).astype(np.float64, copy=False), axis=0)
    return acc


def total(items: Iterable[Stats]) -> Stats:
    """Sum of statistics objects in the given order (raises on an empty input).

    The sum is one reduction over the stacked arrays (``np.add.reduce`` along the
    first axis, items in the given order): its bits depend only on the items and
    their order, not on how they were produced. Runs of consecutive rows of one
    :class:`StatsBlock` are stacked as slices of the block, without a per-row copy.
    Items that are not :class:`Stats` are added with ``+`` in order.

    ``items`` may also be a round's replies (:class:`~fedray.core.contract.Reply` objects,
    or the :class:`~fedray.core.replies.Replies` that ``aggregate`` receives): their
    updates are summed. Replies that hosts sent column-wise are summed straight from
    the columns, with the same bits and no per-client object.
    """
    summed = getattr(items, "summed_total", None)
    if summed is not None:  # a call whose hosts added their clients' updates (Task.summed)
        return summed
    parts_of = getattr(items, "column_sources", None)
    if parts_of is not None:  # a round's Replies kept column-wise: no per-client object
        parts = parts_of()
        if parts is not None:
            return Stats(**{k: fold_rows(v) for k, v in parts.items()})
    items = list(items)
    if not items:
        raise ValueError("cannot sum an empty sequence of statistics")

    if isinstance(items[0], Reply):
        items = [r.update for r in items]
    if len(items) == 1:
        return items[0]
    if not all(type(s) is Stats for s in items):
        return _add_in_order(items)
    parts = _row_slices(items, items[0].names())
    stacked = {}
    for k, ps in parts.items():
        if len({p.shape[1:] for p in ps}) != 1:  # shapes that only broadcast: added one by one, as ``+`` does
            return _add_in_order(items)
        stacked[k] = ps[0] if len(ps) == 1 else np.concatenate(ps)
    return _reduce(stacked)


def _add_in_order(items: list[Any]) -> Any:
    """``items[0] + items[1] + ...``, left to right."""
    acc = items[0]
    for s in items[1:]:
        acc = acc + s
    return acc


def _row_slices(items: list[Stats], names: Any) -> dict[str, list[np.ndarray]]:
    """For each name, the arrays that stack ``items`` in order: a run of consecutive rows of one
    :class:`StatsBlock` as one slice of the block (no per-row copy), any other item as (1, ...)."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
    i, n = 0, len(items)
    while i < n:
        s = items[i]
        if s.names() != names:
            raise ValueError(f"cannot add statistics with names {sorted(names)} and {sorted(s)}")
        src = s._row
        j = i + 1
        if src is not None:
            block, start = src
            while j < n and items[j]._row is not None and items[j]._row[0] is block \
                    and items[j]._row[1] == start + (j - i):
                j += 1
            for k in names:
                parts[k].append(block.arrays[k][start:start + (j - i)])
        else:
            for k in names:
                parts[k].append(s._arrays[k][None])
        i = j
    return parts


class RunningTotal:
    """:func:`total` of replies that arrive in parts (in client-id order), with the same bits as one
    :func:`total` of all of them, holding only the running sum (and one number a client for
    statistics of a single value, which are summed pairwise at the end).

    >>> acc = RunningTotal()
    >>> for part in parts:  # doctest: +SKIP
    ...     acc.add(part)
    >>> acc.result()  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._wide: dict[str, np.ndarray] = {}  # running sums of statistics of two or more values
        self._ones: dict[str, list[np.ndarray]] = {}  # columns of single-value statistics
        self._names: Any = None
        self._other: Any = None  # updates that are not Stats: added with ``+`` in order
        self.n = 0  # updates added

    def add(self, items: Any) -> None:
        """Add the updates of ``items`` (replies or statistics, as :func:`total` takes them)."""
        summed = getattr(items, "summed_total", None)
        parts = items.column_parts() if summed is None and hasattr(items, "column_parts") else None
        if summed is not None:
            stats = [summed]
        elif parts is None:
            stats = [r.update if isinstance(r, Reply) else r for r in items]
            if not stats:
                return
            if not all(type(s) is Stats for s in stats):
                self._other = _add_in_order(stats if self._other is None else [self._other, *stats])
                self.n += len(stats)
                return
        if parts is None:
            parts = _row_slices(stats, stats[0].names())
        if self._names is None:
            self._names = list(parts)
        elif list(parts) != self._names:
            raise ValueError(f"cannot add statistics with names {sorted(self._names)} and {sorted(parts)}")
        for k, ps in parts.items():
            if int(np.prod(ps[0].shape[1:])) < 2:
                self._ones.setdefault(k, []).append(np.concatenate(ps).astype(np.float64, copy=False))
            else:
                self._wide[k] = fold_rows(ps, self._wide.get(k))
        self.n += sum(len(p) for p in next(iter(parts.values()))) if parts else 0

    def result(self) -> Any:
        """The sum of everything added (raises on nothing added)."""
        if self._other is not None:
            return self._other
        if self._names is None:
            raise ValueError("cannot sum an empty sequence of statistics")
        return Stats(**{k: (self._wide[k] if k in self._wide else np.add.reduce(np.concatenate(self._ones[k]), axis=0))
                        for k in self._names})
