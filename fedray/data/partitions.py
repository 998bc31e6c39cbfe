"""Partitions: how a pooled data set is split over clients.

Each partition is ``fn(n_samples, labels, n_clients, rng, **options) -> list of index arrays``
and is chosen by ``data.partition.name``:

* ``iid`` — a uniform random split into near-equal shards (``stratified: true``
  keeps the class proportions, as in Corcuera Bárcena et al.);
* ``dirichlet`` — label skew: class c is spread over clients by Dir(``alpha``);
* ``classes_per_client`` — each client holds ``classes`` labels (a number or a
  ``[lo, hi]`` range); a class's rows are split among the clients that drew it
  (rows of a class no client drew are left out);
* ``quantity_skew`` — shard sizes drawn from Dir(``alpha``), labels uniform;
* ``by_column`` — one client per distinct value of ``data.client_column``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.core.registry import Registry, near_names

# Modules that register federation builders and shard transforms (imported on demand).
_BUILDER_MODULES = ("fedray.data.image_federations", "fedray.data.fedcref_federations",
                    "fedray.data.writer_federations")

PartitionFn = Callable[..., list[np.ndarray]]
#: Index partitions: ``fn(n_samples, labels, n_clients, rng, **options) -> list of index arrays``.
PARTITIONS: Registry[PartitionFn] = Registry("partition")
#: Partition names that build whole federations (per-client transforms, hidden groups):
#: ``fn(dataset, data_config, n_clients, seed, **options) -> Federation``.
FEDERATION_BUILDERS: Registry[Any] = Registry("federation", modules=_BUILDER_MODULES)
#: Shard transforms applied in the client after loading: ``fn(X, y, **kwargs) -> (X, y)``.
TRANSFORMS: Registry[Any] = Registry("transform", modules=_BUILDER_MODULES)


def register_partition(name: str) -> Callable[[PartitionFn], PartitionFn]:
    return PARTITIONS.register(name)


def available_partitions() -> list[str]:
    """Every partition name: index partitions and federation builders (``rotated``, ``class-subsets``...)."""
    return sorted(set(PARTITIONS.names()) | set(FEDERATION_BUILDERS.names()))


def unknown_partition(name: Any) -> ConfigError:
    """The one-line error for an unknown partition name, with the nearest names."""
    names = available_partitions()
    hint = near_names(name, names, cutoff=0.5)
    return ConfigError(f"data.partition.name: unknown partition {name!r}{hint}; choose one of {', '.join(names)}")


def partition_indices(name: str, n_samples: int, labels: np.ndarray | None, n_clients: int,
                      rng: np.random.Generator, **options: Any) -> list[np.ndarray]:
    """Split ``range(n_samples)`` over ``n_clients`` with the named partition."""
    if name not in PARTITIONS:
        raise unknown_partition(name)
    try:
        parts = PARTITIONS[name](n_samples, labels, n_clients, rng, **options)
    except TypeError as exc:
        raise ConfigError(f"data.partition: bad options {sorted(options)} for {name!r}: {exc}") from None
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _need_labels(labels: np.ndarray | None, name: str) -> np.ndarray:
    if labels is None:
        raise DataError(f"data.partition.name: {name!r} needs labels; the data set has none (set data.label_column)")
    return labels


@register_partition("iid")
def iid(n_samples: int, labels: np.ndarray | None, n_clients: int, rng: np.random.Generator,
        stratified: bool = False) -> list[np.ndarray]:
    """IID: a uniform random split into near-equal shards.

    Parameters
    ----------
    stratified : bool
        Deal each class round-robin so that every client keeps the class proportions (Corcuera Bárcena et al.).
    """
    if stratified and labels is not None:
        out: list[list[int]] = [[] for _ in range(n_clients)]
        offset = 0
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            for j, i in enumerate(idx):
                out[(j + offset) % n_clients].append(int(i))
            offset += len(idx)
        return [np.array(o, dtype=np.int64) for o in out]
    perm = rng.permutation(n_samples)
    return list(np.array_split(perm, n_clients))


@register_partition("dirichlet")
def dirichlet(n_samples: int, labels: np.ndarray | None, n_clients: int, rng: np.random.Generator,
              alpha: float = 0.5) -> list[np.ndarray]:
    """Label skew: the rows of each class are spread over the clients by Dir(alpha).

    Parameters
    ----------
    alpha : float
        Concentration alpha of the Dirichlet draw (> 0): small values give few classes per client, large ones IID.
    """
    if not alpha > 0:
        raise ConfigError(f"data.partition.alpha: must be > 0; got {alpha!r}")
    labels = _need_labels(labels, "dirichlet")
    out: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        props = rng.dirichlet(np.full(n_clients, float(alpha)))
        cuts = (np.cumsum(props) * len(idx)).astype(int)[:-1]
        for k, part in enumerate(np.split(idx, cuts)):
            out[k].append(part)
    return [np.concatenate(o) if o else np.zeros(0, np.int64) for o in out]


@register_partition("classes_per_client")
def classes_per_client(n_samples: int, labels: np.ndarray | None, n_clients: int, rng: np.random.Generator,
                       classes: int | list[int] = 2) -> list[np.ndarray]:
    """Each client holds a few classes; a class's rows are split among the clients that drew it.

    Parameters
    ----------
    classes : int or [lo, hi]
        Classes per client, or the range a client's number of classes is drawn from; rows of a class no
        client drew are left out.
    """
    labels = _need_labels(labels, "classes_per_client")
    uniq = np.unique(labels)
    lo, hi = (classes, classes) if isinstance(classes, int) else (int(classes[0]), int(classes[1]))
    if not 1 <= lo <= hi <= len(uniq):
        raise ConfigError(f"data.partition.classes: must lie in [1, {len(uniq)}]; got {classes!r}")
    chosen = [rng.choice(uniq, size=int(rng.integers(lo, hi + 1)), replace=False) for _ in range(n_clients)]
    holders = {c: [k for k in range(n_clients) if c in chosen[k]] for c in uniq}
    out: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c in uniq:
        if not holders[c]:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        for k, part in zip(holders[c], np.array_split(idx, len(holders[c]))):
            out[k].append(part)
    return [np.concatenate(o) if o else np.zeros(0, np.int64) for o in out]


@register_partition("quantity_skew")
def quantity_skew(n_samples: int, labels: np.ndarray | None, n_clients: int, rng: np.random.Generator,
                  alpha: float = 1.0, min_size: int = 1) -> list[np.ndarray]:
    """Quantity skew: shard sizes drawn from Dir(alpha), labels uniform.

    Parameters
    ----------
    alpha : float
        Concentration alpha of the Dirichlet draw of the shard sizes (> 0): small values give very unequal shards.
    min_size : int
        Rows every client gets at least.
    """
    if not alpha > 0:
        raise ConfigError(f"data.partition.alpha: must be > 0; got {alpha!r}")
    if min_size * n_clients > n_samples:
        raise DataError(f"data.partition.min_size: {min_size} x {n_clients} clients exceeds {n_samples} samples")
    props = rng.dirichlet(np.full(n_clients, float(alpha)))
    sizes = min_size + np.floor(props * (n_samples - min_size * n_clients)).astype(int)
    sizes[: n_samples - sizes.sum()] += 1
    perm = rng.permutation(n_samples)
    return list(np.split(perm, np.cumsum(sizes)[:-1]))


@register_partition("by_column")
def by_column(n_samples: int, labels: np.ndarray | None, n_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None = None) -> list[np.ndarray]:
    """One client per distinct value of ``data.client_column`` (or of a scenario's own clients).

    ``groups`` is that column, filled in by fedray; the partition has no options of its own.
    """
    if groups is None:
        raise DataError("data.partition.name: 'by_column' needs data.client_column")
    values = np.unique(groups)
    return [np.flatnonzero(groups == v) for v in values]
