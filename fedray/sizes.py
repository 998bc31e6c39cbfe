"""Byte counts of messages (what the server would receive on a wire)."""
from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np


def nbytes_of(obj: Any) -> int:
    """Bytes of the arrays and numbers in ``obj`` (recursing into containers)."""
    if obj is None:
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


def describe_message(obj: Any, prefix: str = "") -> list[tuple[str, tuple[int, ...], str, int]]:
    """(name, shape, dtype, bytes) of every array-like leaf in ``obj``."""
    rows: list[tuple[str, tuple[int, ...], str, int]] = []
    if isinstance(obj, np.ndarray):
        rows.append((prefix or "value", tuple(obj.shape), str(obj.dtype), int(obj.nbytes)))
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            rows.extend(describe_message(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            rows.extend(describe_message(v, f"{prefix}[{i}]"))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            rows.extend(describe_message(getattr(obj, f.name), f"{prefix}.{f.name}" if prefix else f.name))
    elif obj is not None:
        rows.append((prefix or "value", (), type(obj).__name__, nbytes_of(obj)))
    return rows
