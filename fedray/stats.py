"""Statistics objects: summaries that clients send and the server adds up.

A statistics object is a named collection of float64 arrays with ``+`` and
``zero()``. Aggregation of any summed statistic is ``sum(updates, start=zero)``,
which keeps "federated equals central" a single property and makes masking for
secure aggregation a matter of adding vectors.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


class Stats(Mapping[str, np.ndarray]):
    """An immutable mapping of names to arrays that adds element-wise.

    Parameters
    ----------
    **arrays
        Named arrays (converted to float64 unless integer-valued arrays are wanted
        by passing them as ``np.int64``).
    """

    __slots__ = ("_arrays",)

    def __init__(self, **arrays: Any) -> None:
        self._arrays = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}

    # Mapping interface
    def __getitem__(self, key: str) -> np.ndarray:
        return self._arrays[key]

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def __add__(self, other: "Stats") -> "Stats":
        if other is None or (isinstance(other, int) and other == 0):
            return self
        if not isinstance(other, Stats):
            return NotImplemented
        if self._arrays.keys() != other._arrays.keys():
            raise ValueError(f"cannot add statistics with names {sorted(self)} and {sorted(other)}")
        return Stats(**{k: self._arrays[k] + other._arrays[k] for k in self._arrays})

    __radd__ = __add__

    def __mul__(self, factor: float) -> "Stats":
        return Stats(**{k: v * factor for k, v in self._arrays.items()})

    __rmul__ = __mul__

    def zero(self) -> "Stats":
        """Statistics with the same names and shapes, all zero."""
        return Stats(**{k: np.zeros_like(v) for k, v in self._arrays.items()})

    def flat(self) -> np.ndarray:
        """All arrays concatenated into one vector (names in sorted order)."""
        return np.concatenate([self._arrays[k].ravel() for k in sorted(self._arrays)]) if self._arrays else np.zeros(0)

    def with_flat(self, vector: np.ndarray) -> "Stats":
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


def total(items: Iterable[Stats]) -> Stats:
    """Sum of statistics objects in the given order (raises on an empty input)."""
    it = iter(items)
    try:
        acc = next(it)
    except StopIteration:
        raise ValueError("cannot sum an empty sequence of statistics") from None
    for s in it:
        acc = acc + s
    return acc
