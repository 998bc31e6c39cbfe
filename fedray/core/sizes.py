"""Byte counts of messages (what the server would receive on a wire)."""
from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np


def nbytes_of(obj: Any) -> int:
    """Bytes of the arrays and numbers in ``obj`` (recursing into containers).

    Classes count 0: like a task's client function they name code (by module and
    name), they are not data (the supervised algorithms send their class so the
    client finds its hooks).
    """
    if obj is None or isinstance(obj, type):
        return 0
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (bool, int, float, np.generic)):
        return 8
    if isinstance(obj, (str, bytes)):
        return len(obj)
    if isinstance(obj, Mapping):
        return sum(nbytes_of(v) for v in obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sum(nbytes_of(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(nbytes_of(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    if hasattr(obj, "numel") and hasattr(obj, "element_size"):  # torch tensor, without importing torch
        return int(obj.numel() * obj.element_size())
    try:
        return len(pickle.dumps(obj, protocol=5))
    except Exception:  # noqa: BLE001
        return 0


def leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(name, leaf) for every leaf of a nested message: mappings, sequences and dataclasses
    are walked; torch tensors and modules (recognised without importing torch) become numpy
    arrays; ``None`` is skipped."""
    if obj is None:
        return
    if isinstance(obj, np.ndarray):
        yield prefix or "value", obj
    elif hasattr(obj, "detach") and hasattr(obj, "numpy"):  # a torch tensor
        yield prefix or "value", obj.detach().cpu().numpy()
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from leaves(v, f"{prefix}[{i}]")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from leaves(getattr(obj, f.name), f"{prefix}.{f.name}" if prefix else f.name)
    elif hasattr(obj, "state_dict") and callable(obj.state_dict):  # a torch module
        yield from leaves(dict(obj.state_dict()), prefix)
    else:
        yield prefix or "value", obj


def describe_message(obj: Any, prefix: str = "") -> list[tuple[str, tuple[int, ...], str, int]]:
    """(name, shape, dtype, bytes) of every leaf in ``obj``."""
    return [(name, tuple(v.shape), str(v.dtype), int(v.nbytes)) if isinstance(v, np.ndarray)
            else (name, (), type(v).__name__, nbytes_of(v)) for name, v in leaves(obj, prefix)]


#: Per-client bytes beside the rows (an estimate for refusing a federation that cannot fit):
#: the driver's bookkeeping (set-up checks, counters, the results table), and the host's with the
#: object store's share of an evaluation over every client (k-means with 8 clusters of 8 features).
RECIPE_BYTES = 300
CLIENT_BYTES = 700


