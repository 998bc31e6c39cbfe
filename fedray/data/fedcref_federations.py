"""Federations of FedCRef's experiments (Pisa / IIT-CNR 2025, Sections 5.2 and 6.4).

``data.partition.name: class-subsets`` gives each client a random subset of the
data set's classes (a number drawn uniformly from ``classes = [lo, hi]``, the
paper's 2 to 5) and ``samples_per_class`` (S) samples of each. ``overlap``
(the paper's overlap fraction) is the share of each client's S samples of a class
that is common to every client holding that class; the remaining samples are
drawn without replacement from the rest of the class.

When a class has fewer samples than its holders need (MNIST's 10,000 test images
with 20 clients and S = 300, or ``sklearn:digits``), the draw wraps around the
class's samples and clients share samples: a :class:`~fedray.core.errors.SharedSamplesWarning`
is issued and ``Federation.notes`` says how many draws were repeats.

Each client's classes are recorded in ``ClientSpec.meta["classes"]``, for
evaluation only.
"""
from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError, SharedSamplesWarning
from fedray.core.seeding import CLASS_SUBSETS_STREAM, data_rng
from fedray.data.datasets import Dataset, resolve_data_dir
from fedray.data.federation import ClientSpec, Federation, federation_builder

log = logging.getLogger(__name__)


def class_subsets_indices(y: np.ndarray, n_clients: int, rng: np.random.Generator, classes: Any = (2, 5),
                          samples_per_class: int = 500,
                          overlap: float = 0.0) -> tuple[list[np.ndarray], list[list[int]], int]:
    """Indices of each client's shard.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Labels of the pooled data set.
    n_clients : int
    rng : numpy Generator
    classes : int or [lo, hi]
        Classes per client (inclusive range).
    samples_per_class : int
        S, samples of each of a client's classes.
    overlap : float in [0, 1)
        Share of the S samples common to all holders of a class.

    Returns
    -------
    parts : list of ndarray
        Row indices of each client (sorted; may repeat rows other clients hold).
    chosen : list of list of int
        Classes of each client.
    repeats : int
        Draws that reused a sample already given out (0 when the pool sufficed).
    """
    uniq = np.unique(y)
    lo, hi = (int(classes), int(classes)) if np.isscalar(classes) else (int(classes[0]), int(classes[1]))
    if not 1 <= lo <= hi <= len(uniq):
        raise ConfigError(f"data.partition.classes: must be a range [lo, hi] within [1, {len(uniq)}]; got {classes!r}")
    if int(samples_per_class) < 1:
        raise ConfigError(f"data.partition.samples_per_class: must be >= 1; got {samples_per_class!r}")
    if not 0.0 <= float(overlap) < 1.0:
        raise ConfigError(f"data.partition.overlap: must lie in [0, 1); got {overlap!r}")
    S = int(samples_per_class)
    chosen = [sorted(int(c) for c in rng.choice(uniq, size=int(rng.integers(lo, hi + 1)), replace=False))
              for _ in range(n_clients)]
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    repeats = 0
    for c in uniq:
        holders = [k for k in range(n_clients) if int(c) in chosen[k]]
        if not holders:
            continue
        idx = rng.permutation(np.flatnonzero(y == c))
        n_shared = int(round(float(overlap) * S)) if len(holders) > 1 else 0
        n_shared = min(n_shared, idx.size)
        shared, rest = idx[:n_shared], idx[n_shared:]
        if rest.size == 0:
            rest = idx
        need = (S - n_shared) * len(holders)
        repeats += max(0, need - rest.size)
        take = rest[np.arange(need) % rest.size]
        for j, k in enumerate(holders):
            parts[k].append(np.concatenate([shared, take[j * (S - n_shared):(j + 1) * (S - n_shared)]]))
    return [np.sort(np.concatenate(p)) for p in parts], chosen, repeats


@federation_builder("class-subsets")
def class_subsets(ds: Dataset, data: Any, n_clients: int | None, seed: int, classes: Any = (2, 5),
                  samples_per_class: int = 500, overlap: float = 0.0) -> Federation:
    """Each client holds a random subset of the classes, S samples of each (FedCRef, Section 5.2).

    Parameters
    ----------
    classes : int or [lo, hi]
        Classes per client, or the range a client's number of classes is drawn from (paper: 2 to 5).
    samples_per_class : int
        S, the samples a client holds of each of its classes (paper: 500).
    overlap : float
        Share of a client's S samples of a class common to every client holding that class (paper: 0).
    """
    if ds.y is None:
        raise DataError("data.partition.name: 'class-subsets' needs labels; the data set has none")
    n_clients = 25 if n_clients is None else int(n_clients)
    parts, chosen, repeats = class_subsets_indices(ds.y, n_clients, data_rng(seed, CLASS_SUBSETS_STREAM), classes,
                                                   samples_per_class, overlap)
    notes: tuple[str, ...] = ()
    if repeats:
        total = sum(p.size for p in parts)
        msg = (f"class-subsets: {ds.name} has too few samples for {n_clients} clients x "
               f"{samples_per_class} samples per class; clients share samples ({repeats} of {total} draws repeat "
               "a sample another client holds)")
        warnings.warn(msg, SharedSamplesWarning, stacklevel=2)  # once: no log line repeating it
        notes = (msg,)
    source = {"kind": "pooled", "dataset": data.dataset, "data_dir": str(resolve_data_dir(data.data_dir) or "") or None,
              "seed": seed, "options": dict(data.options or {})}
    specs = [ClientSpec(i, source, p, f"client-{i}", {"classes": chosen[i]}) for i, p in enumerate(parts)]
    return Federation(specs, ds.feature_names, ds.sample_shape, True, ds.n_classes, notes,
                      extras={**dict(ds.meta), "client_classes": chosen, "shared_draws": repeats})
