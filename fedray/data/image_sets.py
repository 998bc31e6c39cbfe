"""The image data sets of the papers, read in their authors' distribution formats.

Each loader reads a folder under ``data.data_dir`` (or ``$FEDRAY_DATA_DIR``) and
never downloads; each gives the same :class:`~fedray.data.datasets.Dataset` as
``mnist``: images flattened to float64 in [0, 1], ``sample_shape`` ``(C, H, W)``,
integer labels, and ``meta["class_names"]``.

==================  ==========================================================================
``femnist``         LEAF's FEMNIST JSON shards (``train/``, ``test/``); writers are the clients
                    (partition ``by_writer``), with LEAF's own train/test split per writer
``cifar10``         CIFAR-10, binary version (``cifar-10-batches-bin/``) or Python version
                    (``cifar-10-batches-py/``, read by a loader that cannot execute code)
``emnist:SPLIT``    EMNIST IDX files (``emnist-SPLIT-test-images-idx3-ubyte.gz``...), un-transposed
``fashion-mnist``   Fashion-MNIST IDX files (MNIST's file names, in ``fashion-mnist/``)
``kmnist``, ``k49`` Kuzushiji-MNIST and Kuzushiji-49 ``.npz`` files (key ``arr_0``)
``images:FOLDER``   a user's images: one sub-folder of PNG or JPEG files per class
==================  ==========================================================================
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.data.datasets import IMAGE_SETS, Dataset, ImageSet, require_dir
from fedray.data.femnist import CLASS_SUBSETS, read_femnist

PART_OPTION = {"part": "which of the distributed parts to read: 'test' (default, as mnist), 'train' or 'all' "
                       "(train then test)"}


def _names(d: int) -> tuple[str, ...]:
    return tuple(f"px{i}" for i in range(d))


def _part(options: dict[str, Any]) -> tuple[str, ...]:
    part = options.get("part", "test")
    if part not in ("train", "test", "all"):
        raise ConfigError(f"data.options.part: must be 'train', 'test' or 'all'; got {part!r}")
    return ("train", "test") if part == "all" else (part,)


def _images(images: np.ndarray, labels: np.ndarray, name: str, class_names: tuple[str, ...],
            meta: dict[str, Any] | None = None) -> Dataset:
    """A Dataset of uint8 images (n, H, W) or (n, C, H, W) scaled to [0, 1]."""
    shape = tuple(int(s) for s in images.shape[1:])
    shape = (1, *shape) if len(shape) == 2 else shape
    X = images.reshape(images.shape[0], -1).astype(np.float64) / 255.0
    return Dataset(X, np.asarray(labels, dtype=np.int64), _names(X.shape[1]), shape, name,
                   meta={"class_names": list(class_names), **(meta or {})})


def _sub(root: Path, names: tuple[str, ...], probe: str, what: str, hint: str) -> Path:
    """The first of ``root/NAME`` (or ``root`` itself) that holds ``probe``."""
    for cand in (*(root / n for n in names), root):
        if list(cand.glob(probe)):
            return cand
    raise DataError(f"data.dataset: {what}: no {hint} under {str(root)!r} (nor in its {names[0]}/ sub-folder)")


# --- femnist -----------------------------------------------------------------------------
def load_femnist(arg: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    """LEAF's FEMNIST: every writer's rows, LEAF's split kept in ``is_test``, writers in ``groups``."""
    root = require_dir(ddir, "femnist")
    data = read_femnist(root, str(options.get("classes", "all")))
    return Dataset(data.X, data.y, _names(784), (1, 28, 28), "femnist", groups=data.writers,
                   meta={"class_names": list(data.class_names)}, is_test=data.is_test)


IMAGE_SETS.register("femnist", ImageSet(
    load_femnist,
    "FEMNIST (LEAF): 28x28 handwritten characters by writer, 62 classes (0-9, A-Z, a-z); one client per writer "
    "(partition by_writer) with LEAF's own train/test rows",
    "femnist/train/*.json and femnist/test/*.json (LEAF's JSON shards: users, num_samples, user_data)",
    "https://github.com/TalwalkarLab/leaf (data/femnist: ./preprocess.sh -s niid --sf 0.05 -k 0 -t sample)",
    {"classes": f"labels kept, renumbered from 0: {', '.join(CLASS_SUBSETS)} (letters: 52 classes, A-Z then "
                "a-z; default all)"}))
