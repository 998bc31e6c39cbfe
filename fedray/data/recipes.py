"""Recipes in bulk: the clients of a federation as one range, not one object each.

A generated federation (``blobs``) gives every client the same source and the name
``client-<id>``; :class:`RecipeRange` stands for ``[ClientSpec(i, source, None, f"client-{i}")
for i in range(start, stop)]`` at the cost of one object, so that a population of 10^7
clients costs the driver nothing per client. It is a sequence of
:class:`~fedray.data.federation.ClientSpec` (built on access); slicing gives a range again.
The helpers below take either form (a list of recipes, or a range).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ClientSpec:
    """Recipe for one client's shard.

    Attributes
    ----------
    client_id : int
    source : dict
        ``{"kind": "blobs" | "pooled" | "table" | "arrays", ...}`` — how to build the shard.
    indices : ndarray or None
        Rows of the pooled data set (kind ``pooled``).
    name : str
        A display name (the value of the client column for ``by_column``).
    meta : dict
        Facts of the recipe (a test split's size, a hidden group, transforms).
    """

    client_id: int
    source: dict[str, Any]
    indices: np.ndarray | None = None
    name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


class RecipeRange(Sequence):
    """Recipes of clients ``start`` .. ``stop - 1``, all built from ``source`` (named ``client-<id>``)."""

    __slots__ = ("source", "start", "stop")

    def __init__(self, source: dict[str, Any], start: int, stop: int) -> None:
        self.source, self.start, self.stop = source, int(start), max(int(start), int(stop))

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(lo, hi, step)]
            return RecipeRange(self.source, self.start + lo, self.start + max(lo, hi))
        j = int(i)
        if j < 0:
            j += len(self)
        if not 0 <= j < len(self):
            raise IndexError(f"recipe {i} of {len(self)}")
        cid = self.start + j
        return ClientSpec(cid, self.source, None, f"client-{cid}")

    @property
    def ids(self) -> np.ndarray:
        return np.arange(self.start, self.stop, dtype=np.int64)

    def __reduce__(self) -> Any:
        return (RecipeRange, (self.source, self.start, self.stop))

    def __repr__(self) -> str:
        return f"RecipeRange({self.source.get('kind')!r}, clients {self.start}..{self.stop - 1})"


def recipe_ids(specs: Sequence[Any]) -> np.ndarray:
    """The client ids of ``specs`` (a list of recipes or a :class:`RecipeRange`), in order."""
    if isinstance(specs, RecipeRange):
        return specs.ids
    return np.fromiter((s.client_id for s in specs), dtype=np.int64, count=len(specs))


def recipe_kinds(specs: Sequence[Any]) -> set[str]:
    """The kinds of shard recipe among ``specs`` (``blobs``, ``pooled``, ``table``, ``arrays``)."""
    if isinstance(specs, RecipeRange):
        return {specs.source["kind"]} if len(specs) else set()
    return {s.source.get("kind") for s in specs}


def recipe_name(specs: Sequence[Any], position: int) -> str:
    """The display name of the client at ``position`` of ``specs``."""
    if isinstance(specs, RecipeRange):
        return f"client-{specs.start + int(position)}"
    return specs[int(position)].name


def recipe_names(specs: Sequence[Any]) -> list[str] | None:
    """The display names of ``specs`` in order; None for a :class:`RecipeRange` (``client-<id>``: the
    ids say them)."""
    if isinstance(specs, RecipeRange):
        return None
    return [s.name for s in specs]


def recipe_meta(specs: Sequence[Any], position: int) -> Any:
    """A function giving (a copy of) the facts of the recipe at ``position`` (built only when a client
    function reads ``client.meta``); None for a :class:`RecipeRange`, whose recipes have none."""
    if isinstance(specs, RecipeRange):
        return None
    spec = specs[int(position)]
    return lambda: dict(spec.meta)


def recipes_nbytes(specs: Sequence[Any]) -> int:
    """Bytes the recipes ``specs`` take in memory (a range: the one object)."""
    if isinstance(specs, RecipeRange):
        return sys.getsizeof(specs)
    return sys.getsizeof(specs) + sum(sys.getsizeof(s) + sys.getsizeof(s.__dict__) for s in specs)
