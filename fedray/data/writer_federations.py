"""Natural federations: one client per writer of a data set that records its writers (``femnist``).

``data.partition.name: by_writer`` (the default of ``femnist``) makes each writer a
client, as in LEAF and in FLACC's FEMNIST experiment (Mehta & Shao 2023, Section V-A:
195 writers of 40 to 525 samples each). A client's shard is its writer's training
rows followed by its test rows; ``ClientSpec.meta["n_test"]`` keeps the data set's own
split, so every supervised method trains on the writer's training rows and tests on
its test rows (see :func:`fedray.nn.split.client_split`).
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.core.seeding import WRITERS_STREAM, data_rng
from fedray.data.datasets import Dataset, resolve_data_dir
from fedray.data.federation import ClientSpec, Federation, register_federation_builder

log = logging.getLogger(__name__)


def writer_rows(groups: np.ndarray, is_test: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Writers (sorted), each writer's rows (training rows first, each part in data set order), test counts."""
    writers, inverse = np.unique(groups, return_inverse=True)
    order = np.argsort(inverse * 2 + is_test.astype(np.int64), kind="stable")
    counts = np.bincount(inverse, minlength=len(writers))
    rows = np.split(order, np.cumsum(counts)[:-1])
    n_test = np.bincount(inverse, weights=is_test.astype(np.float64), minlength=len(writers)).astype(np.int64)
    return writers, rows, n_test


def _choose(n_eligible: int, n_clients: int | None, writer_seed: int) -> np.ndarray:
    if n_clients is None or n_clients == n_eligible:
        return np.arange(n_eligible)
    if not 1 <= n_clients <= n_eligible:
        raise DataError(f"federation.n_clients: {n_clients} writers asked for but {n_eligible} writers qualify "
                        "(each with training and test rows, and data.partition.min_samples); use at most "
                        f"{n_eligible}, or n_clients: null for all of them")
    return np.sort(data_rng(int(writer_seed), WRITERS_STREAM).choice(n_eligible, size=n_clients, replace=False))


def _checked(fn: Any) -> Any:
    """Unknown ``data.partition`` keys are a ConfigError naming them (not a TypeError)."""
    allowed = ("min_samples", "writer_seed")

    def wrapper(ds: Dataset, data: Any, n_clients: int | None, seed: int, **options: Any) -> Federation:
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ConfigError(f"data.partition: unknown option(s) {unknown} for 'by_writer'; allowed: {list(allowed)}")
        return fn(ds, data, n_clients, seed, **options)

    wrapper.__doc__, wrapper.__wrapped__ = fn.__doc__, fn  # type: ignore[attr-defined]
    return wrapper


@register_federation_builder("by_writer")
@_checked
def by_writer(ds: Dataset, data: Any, n_clients: int | None, seed: int, min_samples: int = 0,
              writer_seed: int | None = None) -> Federation:
    """One client per writer, with the writer's own training and test rows (femnist; FLACC's FEMNIST case).

    Parameters
    ----------
    min_samples : int
        Writers with fewer rows (training and test together) are left out (the paper's writers hold 40 to 525).
    writer_seed : int or None
        Seed of the choice of ``federation.n_clients`` writers among those that qualify (None: the run's seed);
        ``n_clients: null`` takes every writer that qualifies.
    """
    if ds.groups is None or ds.is_test is None:
        raise DataError(f"data.partition.name: 'by_writer' needs a data set that records its writers and their "
                        f"train/test rows (femnist); {ds.name or 'this data set'} does not")
    if int(min_samples) < 0:
        raise ConfigError(f"data.partition.min_samples: must be >= 0; got {min_samples!r}")
    writers, rows, n_test = writer_rows(ds.groups, ds.is_test)
    sizes = np.array([len(r) for r in rows], dtype=np.int64)
    ok = (n_test > 0) & (sizes - n_test > 0) & (sizes >= int(min_samples))
    eligible = np.flatnonzero(ok)
    notes = []
    if (~ok).any():
        few = f", or fewer than {int(min_samples)} rows" if int(min_samples) > 0 else ""
        notes.append(f"{int((~ok).sum())} of {len(writers)} writers left out: no training rows or no test rows{few}")
        log.info("by_writer: %s", notes[-1])
    chosen = eligible[_choose(len(eligible), n_clients, seed if writer_seed is None else int(writer_seed))]
    ddir = str(resolve_data_dir(data.data_dir) or "") or None
    source = {"kind": "pooled", "dataset": data.dataset, "data_dir": ddir, "seed": seed,
              "options": dict(data.options or {})}
    specs = [ClientSpec(i, source, rows[w], str(writers[w]), {"n_test": int(n_test[w]), "writer": str(writers[w])})
             for i, w in enumerate(chosen)]
    extras = {**ds.meta, "partition": "by_writer", "writers": [str(writers[w]) for w in chosen]}
    return Federation(specs, ds.feature_names, ds.sample_shape, True, ds.n_classes, notes=tuple(notes),
                      extras=extras)
