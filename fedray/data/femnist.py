"""FEMNIST as LEAF distributes it: handwritten characters grouped by writer (Caldas et al. 2018).

LEAF writes each part (``train/``, ``test/``) as JSON shards, each an object
``{"users": [...], "num_samples": [...], "user_data": {writer: {"x": [[784 floats]], "y": [labels]}}}``;
pixels lie in [0, 1] with background 1.0, labels in 0-61 (0-9 digits, 10-35 upper
case, 36-61 lower case). LEAF's own split is kept: a writer's rows from ``train/``
are its training rows, those from ``test/`` its test rows.

The images are returned in MNIST's convention (ink 1, background 0: ``1 - x``),
flattened to 784 values of a ``(1, 28, 28)`` sample, writers in sorted order, each
writer's training rows first. This module reads files only; it never downloads.
"""
from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedray.core.errors import DataError

#: The 62 class names, in LEAF's label order.
FEMNIST_CLASS_NAMES: tuple[str, ...] = tuple(string.digits + string.ascii_uppercase + string.ascii_lowercase)
#: ``data.options.classes`` of ``femnist``: which labels are kept (renumbered from 0 in this order).
CLASS_SUBSETS: dict[str, range] = {"all": range(62), "digits": range(10), "letters": range(10, 62),
                                   "upper": range(10, 36), "lower": range(36, 62)}
PARTS = ("train", "test")


@dataclass(frozen=True)
class WriterData:
    """Rows of all writers: ``X`` (n, 784) float64, ``y`` (n,) int64, ``writers`` (n,) str, ``is_test`` (n,) bool."""

    X: np.ndarray
    y: np.ndarray
    writers: np.ndarray
    is_test: np.ndarray
    class_names: tuple[str, ...]


def find_femnist(root: Path) -> Path:
    """The folder holding ``train/`` and ``test/``: ``root/femnist`` or ``root`` itself."""
    for cand in (root / "femnist", root):
        if (cand / "train").is_dir() and (cand / "test").is_dir():
            return cand
    raise DataError(f"data.dataset: femnist needs LEAF's train/ and test/ folders of JSON shards under "
                    f"{str(root)!r} (or its femnist/ sub-folder)")


def _read_shard(path: Path) -> dict[str, tuple[list, list]]:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a LEAF JSON shard ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
                        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("user_data"), dict):
        raise DataError(f"{path}: not a LEAF JSON shard (no 'user_data' object)")
    out = {}
    for writer, rows in doc["user_data"].items():
        if not isinstance(rows, dict) or not isinstance(rows.get("x"), list) or not isinstance(rows.get("y"), list):
            raise DataError(f"{path}: writer {writer!r} has no 'x' and 'y' lists")
        if len(rows["x"]) != len(rows["y"]):
            raise DataError(f"{path}: writer {writer!r} has {len(rows['x'])} images but {len(rows['y'])} labels")
        out[str(writer)] = (rows["x"], rows["y"])
    return out


def _read_part(folder: Path) -> dict[str, tuple[list, list]]:
    shards = sorted(folder.glob("*.json"))
    if not shards:
        raise DataError(f"data.dataset: femnist: no JSON shards in {str(folder)!r}")
    rows: dict[str, tuple[list, list]] = {}
    for shard in shards:
        for writer, (x, y) in _read_shard(shard).items():
            old = rows.get(writer, ([], []))
            rows[writer] = (old[0] + x, old[1] + y)
    return rows


def _to_arrays(x: list, y: list, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        X = np.asarray(x, dtype=np.float64).reshape(len(x), -1) if x else np.zeros((0, 784))
        labels = np.asarray(y, dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where}: images must be lists of 784 numbers and labels integers ({exc})") from None
    if X.shape[1] != 784:
        raise DataError(f"{where}: images of {X.shape[1]} values; FEMNIST images have 784 (28x28)")
    if labels.size and (labels.min() < 0 or labels.max() > 61):
        raise DataError(f"{where}: labels must lie in 0-61; got {int(labels.min())} to {int(labels.max())}")
    return X, labels


def read_femnist(root: Path, classes: str = "all") -> WriterData:
    """Every writer's rows from LEAF's ``train/`` and ``test/`` shards, keeping the labels of ``classes``.

    Parameters
    ----------
    root : Path
        The data directory (``femnist/`` inside it, or the folder itself).
    classes : {"all", "digits", "letters", "upper", "lower"}
        Labels kept, renumbered from 0 in LEAF's order (``letters``: 52 classes, A-Z then a-z).
    """
    if classes not in CLASS_SUBSETS:
        raise DataError(f"data.options.classes: {classes!r} is not one of {', '.join(CLASS_SUBSETS)}")
    keep = CLASS_SUBSETS[classes]
    folder = find_femnist(root)
    parts = {p: _read_part(folder / p) for p in PARTS}
    Xs, ys, ws, ts = [], [], [], []
    for writer in sorted(set(parts["train"]) | set(parts["test"])):
        for p in PARTS:
            x, y = parts[p].get(writer, ([], []))
            X, labels = _to_arrays(x, y, f"femnist {p}/ writer {writer!r}")
            mask = (labels >= keep.start) & (labels < keep.stop)
            Xs.append(1.0 - X[mask])
            ys.append(labels[mask] - keep.start)
            ws.append(np.full(int(mask.sum()), writer, dtype=object))
            ts.append(np.full(int(mask.sum()), p == "test"))
    X = np.concatenate(Xs) if Xs else np.zeros((0, 784))
    if X.shape[0] == 0:
        raise DataError(f"data.dataset: femnist under {str(folder)!r} has no images of the classes {classes!r}")
    return WriterData(X, np.concatenate(ys), np.concatenate(ws).astype(str), np.concatenate(ts),
                      FEMNIST_CLASS_NAMES[keep.start:keep.stop])
