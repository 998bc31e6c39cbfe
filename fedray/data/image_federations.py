"""Federations with a hidden cluster structure (Mehta & Shao 2023, Section V-A).

Each builder turns a labelled pooled data set (``sklearn:digits``, ``mnist``, ...)
into client recipes whose true group is known to the evaluation only
(``ClientSpec.meta["group"]``, ``Federation.extras["true_groups"]``):

``rotated``
    IID clients; rotations ``[0, 90, 180, 270]`` degrees for ``[10, 20, 30, 40] %``
    of the clients (concept drift, P(x|y) differs). Options ``rotations``, ``proportions``.
``grouped``
    ``n_groups`` (5) groups of clients, each group holding only ``labels_per_group``
    (2) labels (label distribution skew). Disjoint label sets where they fit.
``label-swapped``
    IID clients in ``n_groups`` (5) groups; each group swaps two labels (concept
    shift, P(y|x) differs). Disjoint pairs where they fit.
``grouped+rotated``
    Labels split into ``n_groups`` (2) disjoint sets, clients split evenly over
    them; ``rotated_fraction`` (0.3) of each set's clients see images rotated by
    ``rotation`` (90) degrees: ``2 * n_groups`` true groups.

Common options (``data.partition``): ``samples: [lo, hi]`` — each client draws
its number of samples uniformly from this range (paper: 200-800);
``test_fraction`` (0.15) — the last ``meta["n_test"]`` rows of a shard are its
test rows (see :func:`fedray.nn.split.client_split`).

Test rows never train anybody: every label's pool is split once into a test
reserve (``test_fraction`` of it) and a training pool; test rows are drawn from
the reserves only, training rows from the training pools only. Clients draw
without replacement until a pool runs out; only then do they share samples (a
small pool such as the 1797 digits), which emits a
:class:`~fedray.core.errors.SharedSamplesWarning` and a note in ``Federation.notes``.
A client never holds the same sample twice; a client that asks for more rows of
its labels than the pool has gets the whole pool (noted as well).

Rotations and label swaps are applied in the client when the shard is built
(shard transforms ``rotate`` and ``swap_labels``).
"""
from __future__ import annotations

import logging
import math
import warnings
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError, SharedSamplesWarning
from fedray.core.seeding import IMAGE_FEDERATIONS_STREAM, data_rng
from fedray.data.datasets import Dataset, resolve_data_dir
from fedray.data.federation import (
    ClientSpec,
    Federation,
    federation_builder,
    register_transform,
)

log = logging.getLogger(__name__)

COMMON = {"samples": (200, 800), "test_fraction": 0.15}


# --- shard transforms (run in the client) -------------------------------------------
@register_transform("rotate")
def rotate(X: np.ndarray, y: np.ndarray | None, k: int, shape: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
    """Rotate flattened images ``X`` (n, C*H*W) by ``k`` quarter turns counter-clockwise."""
    n = X.shape[0]
    imgs = X.reshape(n, *shape)
    return np.ascontiguousarray(np.rot90(imgs, int(k), axes=(-2, -1))).reshape(n, -1), y


@register_transform("swap_labels")
def swap_labels(X: np.ndarray, y: np.ndarray | None, pairs: list[list[int]]) -> tuple[np.ndarray, np.ndarray | None]:
    """Exchange labels a and b for every ``[a, b]`` in ``pairs``."""
    if y is None:
        return X, y
    out = y.copy()
    for a, b in pairs:
        out[y == a] = b
        out[y == b] = a
    return X, out


# --- drawing rows -------------------------------------------------------------
class _Pool:
    """Rows of one label in one part (train or test), drawn without replacement until exhausted."""

    def __init__(self, rows: np.ndarray, rng: np.random.Generator) -> None:
        self.rows = rows
        self.rng = rng
        self.order = rng.permutation(rows)
        self.pos = 0
        self.wraps = 0
        self.drawn = 0

    def take(self, k: int) -> np.ndarray:
        """``k`` distinct rows (``k <= len(rows)``)."""
        got: list[int] = []
        seen: set[int] = set()
        while len(got) < k:
            if self.pos == len(self.order):
                self.order = self.rng.permutation(self.rows)
                self.pos = 0
                self.wraps += 1
            r = int(self.order[self.pos])
            self.pos += 1
            if r not in seen:
                seen.add(r)
                got.append(r)
        self.drawn += k
        return np.array(got, dtype=np.int64)


def _allocate(n: int, labels: list[int], pools: dict[int, _Pool], rng: np.random.Generator) -> dict[int, int]:
    """Split ``n`` rows over ``labels`` in proportion to pool sizes, none above its pool."""
    sizes = np.array([len(pools[c].rows) for c in labels], dtype=np.int64)
    n = int(min(n, sizes.sum()))
    counts = rng.multinomial(n, sizes / sizes.sum()) if n else np.zeros(len(labels), dtype=np.int64)
    counts = np.minimum(counts, sizes)
    while counts.sum() < n:  # give the excess to labels with room
        room = np.flatnonzero(counts < sizes)
        counts[room[int(rng.integers(len(room)))]] += 1
    return {c: int(k) for c, k in zip(labels, counts)}


def _draw(groups: np.ndarray, group_labels: list[list[int]], y: np.ndarray, samples: tuple[int, int],
          test_fraction: float, rng: np.random.Generator) -> tuple[list[np.ndarray], list[int], list[str]]:
    """Rows of every client (training rows first, then test rows), test counts and notes."""
    classes = np.unique(y)
    train_pools, test_pools = {}, {}
    for c in classes:
        rows = rng.permutation(np.flatnonzero(y == c))
        n_res = int(math.ceil(test_fraction * len(rows))) if test_fraction > 0 else 0
        n_res = min(n_res, len(rows) - 1)
        test_pools[int(c)] = _Pool(rows[:n_res], rng)
        train_pools[int(c)] = _Pool(rows[n_res:], rng)
    lo, hi = samples
    sizes = rng.integers(lo, hi + 1, size=len(groups))
    out, n_tests, capped = [], [], []
    for cid, (g, n) in enumerate(zip(groups, sizes)):
        labels = group_labels[int(g)]
        n_test = max(1, int(round(test_fraction * n))) if test_fraction > 0 else 0
        n_train = int(n) - n_test
        tr = _allocate(n_train, labels, train_pools, rng)
        te = _allocate(n_test, labels, test_pools, rng) if n_test else {}
        if sum(tr.values()) < n_train or sum(te.values()) < n_test:
            capped.append(cid)
        train_rows = np.concatenate([train_pools[c].take(k) for c, k in tr.items()] or [np.zeros(0, np.int64)])
        test_rows = np.concatenate([test_pools[c].take(k) for c, k in te.items()] or [np.zeros(0, np.int64)])
        out.append(np.concatenate([rng.permutation(train_rows), rng.permutation(test_rows)]))
        n_tests.append(int(test_rows.shape[0]))
    notes = []
    demand = sum(p.drawn for p in train_pools.values())
    supply = sum(len(p.rows) for p in train_pools.values())
    shared_train = [c for c, p in train_pools.items() if p.wraps]
    shared_test = [c for c, p in test_pools.items() if p.wraps]
    if shared_train or shared_test:
        notes.append(
            f"clients share samples: they asked for {demand} training rows but the training pool holds {supply} "
            f"(labels {shared_train} reused), and {sum(p.drawn for p in test_pools.values())} test rows from a "
            f"reserve of {sum(len(p.rows) for p in test_pools.values())} (labels {shared_test} reused); "
            "no client's test row is in any client's training rows")
    if capped:
        notes.append(f"{len(capped)} client(s) asked for more rows of their labels than the pools hold and got "
                     f"fewer (first: client {capped[0]})")
    return out, n_tests, notes


# --- group assignment ----------------------------------------------------------------
def _counts_from_proportions(n: int, proportions: list[float]) -> np.ndarray:
    p = np.asarray(proportions, dtype=np.float64)
    raw = p / p.sum() * n
    counts = np.floor(raw).astype(np.int64)
    for i in np.argsort(-(raw - counts), kind="stable")[: n - counts.sum()]:
        counts[i] += 1
    return counts


def _groups_of(n: int, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random assignment of ``n`` clients to groups of the given sizes."""
    groups = np.repeat(np.arange(len(counts)), counts)
    return groups[np.argsort(rng.permutation(n), kind="stable")]


def _check_common(samples: Any, test_fraction: Any) -> tuple[tuple[int, int], float]:
    try:
        lo, hi = (int(samples), int(samples)) if np.isscalar(samples) else (int(samples[0]), int(samples[1]))
    except (TypeError, ValueError, IndexError):
        raise ConfigError(f"data.partition.samples: expected [lo, hi]; got {samples!r}") from None
    if not 2 <= lo <= hi:
        raise ConfigError(f"data.partition.samples: need 2 <= lo <= hi; got {samples!r}")
    tf = float(test_fraction)
    if not 0.0 <= tf < 1.0:
        raise ConfigError(f"data.partition.test_fraction: must lie in [0, 1); got {test_fraction!r}")
    return (lo, hi), tf


def _square_image(ds: Dataset, name: str) -> tuple[int, ...]:
    shape = ds.sample_shape if len(ds.sample_shape) == 3 else (1, *ds.sample_shape)
    if len(shape) != 3 or shape[-1] != shape[-2]:
        raise ConfigError(f"data.partition.name: {name!r} rotates images; {ds.name or 'the data set'} has samples "
                          f"of shape {ds.sample_shape} (need square images, e.g. sklearn:digits or mnist)")
    return tuple(int(s) for s in shape)


def _pairs(classes: np.ndarray, n_groups: int, size: int, rng: np.random.Generator) -> list[list[int]]:
    """``n_groups`` label sets of ``size``: disjoint where they fit, else each drawn at random."""
    if n_groups * size <= len(classes):
        perm = rng.permutation(classes)
        return [sorted(int(c) for c in perm[g * size : (g + 1) * size]) for g in range(n_groups)]
    return [sorted(int(c) for c in rng.choice(classes, size=size, replace=False)) for _ in range(n_groups)]


def _federation(ds: Dataset, data: Any, seed: int, groups: np.ndarray, group_labels: list[list[int]],
                transforms: list[list], group_names: list[str], samples: tuple[int, int], tf: float,
                rng: np.random.Generator, kind: str) -> Federation:
    if ds.y is None:
        raise DataError(f"data.partition.name: {kind!r} needs labels; {ds.name or 'the data set'} has none")
    rows, n_tests, notes = _draw(groups, group_labels, ds.y, samples, tf, rng)
    ddir = str(resolve_data_dir(data.data_dir) or "") or None
    source = {"kind": "pooled", "dataset": data.dataset, "data_dir": ddir, "seed": seed,
              "options": dict(data.options or {})}
    specs = [ClientSpec(i, source, r, f"client-{i}",
                        {"group": int(groups[i]), "n_test": n_tests[i], "transforms": transforms[int(groups[i])]})
             for i, r in enumerate(rows)]
    for note in notes:  # once, as a warning (no log line repeating it): it is in Federation.notes too
        warnings.warn(f"{kind} federation of {data.dataset}: {note}", SharedSamplesWarning, stacklevel=3)
    extras = {**ds.meta, "true_groups": [int(g) for g in groups], "group_names": group_names, "partition": kind,
              "shared_samples": any(n.startswith("clients share") for n in notes)}
    return Federation(specs, ds.feature_names, ds.sample_shape, True, ds.n_classes,
                      notes=tuple(notes), extras=extras)


def _n(n_clients: int | None) -> int:
    n = 10 if n_clients is None else int(n_clients)
    if n < 1:
        raise ConfigError(f"federation.n_clients: must be >= 1; got {n_clients!r}")
    return n


def _groups_and_labels(ds: Dataset, n_clients: int | None, n_groups: Any, name: str,
                       min_labels: int = 0) -> tuple[int, np.ndarray]:
    """The number of clients and the data set's labels for a builder of ``n_groups`` true groups."""
    n = _n(n_clients)
    classes = np.unique(ds.y) if ds.y is not None else np.zeros(0, np.int64)
    if len(classes) < min_labels:
        raise DataError(f"data.partition.name: {name!r} needs at least {min_labels} labels")
    if not 1 <= int(n_groups) <= n:
        raise ConfigError(f"data.partition.n_groups: must lie in [1, n_clients={n}]; got {n_groups!r}")
    return n, classes


# --- builders ------------------------------------------------------------------------
@federation_builder("rotated")
def rotated(ds: Dataset, data: Any, n_clients: int | None, seed: int, rotations: list[int] = (0, 90, 180, 270),
            proportions: list[float] = (0.1, 0.2, 0.3, 0.4), samples: Any = COMMON["samples"],
            test_fraction: float = COMMON["test_fraction"]) -> Federation:
    """Rotated images: group g sees every image rotated by ``rotations[g]`` degrees.

    Parameters
    ----------
    rotations : list of int
        Rotation of each group in degrees (multiples of 90); one true group per entry.
    proportions : list of float
        Share of the clients in each group (one per rotation; normalised).
    samples : [lo, hi]
        Each client draws its number of samples uniformly from this range (paper: 200-800).
    test_fraction : float
        Share of each client's shard kept as its test rows (never used for training).
    """
    samples, tf = _check_common(samples, test_fraction)
    shape = _square_image(ds, "rotated")
    rot = [int(r) for r in rotations]
    if any(r % 90 for r in rot):
        raise ConfigError(f"data.partition.rotations: multiples of 90 degrees only; got {list(rotations)!r}")
    if len(proportions) != len(rot) or any(p < 0 for p in proportions) or not sum(proportions) > 0:
        raise ConfigError(f"data.partition.proportions: {len(rot)} non-negative shares (one per rotation); "
                          f"got {list(proportions)!r}")
    n = _n(n_clients)
    rng = data_rng(seed, IMAGE_FEDERATIONS_STREAM, 1)
    groups = _groups_of(n, _counts_from_proportions(n, list(proportions)), rng)
    classes = [int(c) for c in np.unique(ds.y)] if ds.y is not None else []
    transforms = [[["rotate", {"k": (r // 90) % 4, "shape": list(shape)}]] if r % 360 else [] for r in rot]
    return _federation(ds, data, seed, groups, [classes] * len(rot), transforms, [f"rot{r}" for r in rot],
                       samples, tf, rng, "rotated")


@federation_builder("grouped")
def grouped(ds: Dataset, data: Any, n_clients: int | None, seed: int, n_groups: int = 5, labels_per_group: int = 2,
            samples: Any = COMMON["samples"], test_fraction: float = COMMON["test_fraction"]) -> Federation:
    """Label skew: the clients of group g hold only the labels of group g.

    Parameters
    ----------
    n_groups : int
        Number of true groups (clients are split evenly over them).
    labels_per_group : int
        Labels each group holds (disjoint sets where they fit).
    samples : [lo, hi]
        Each client draws its number of samples uniformly from this range (paper: 200-800).
    test_fraction : float
        Share of each client's shard kept as its test rows (never used for training).
    """
    samples, tf = _check_common(samples, test_fraction)
    n, classes = _groups_and_labels(ds, n_clients, n_groups, "grouped")
    if not 1 <= int(labels_per_group) <= len(classes):
        raise ConfigError(f"data.partition.labels_per_group: must lie in [1, {len(classes)}]; got {labels_per_group!r}")
    rng = data_rng(seed, IMAGE_FEDERATIONS_STREAM, 2)
    sets = _pairs(classes, int(n_groups), int(labels_per_group), rng)
    groups = _groups_of(n, _counts_from_proportions(n, [1.0] * int(n_groups)), rng)
    return _federation(ds, data, seed, groups, sets, [[] for _ in sets],
                       ["labels " + ",".join(map(str, s)) for s in sets], samples, tf, rng, "grouped")


@federation_builder("label-swapped")
def label_swapped(ds: Dataset, data: Any, n_clients: int | None, seed: int, n_groups: int = 5,
                  samples: Any = COMMON["samples"], test_fraction: float = COMMON["test_fraction"]) -> Federation:
    """Concept shift: the clients of group g have two labels swapped.

    Parameters
    ----------
    n_groups : int
        Number of true groups, each swapping its own pair of labels (disjoint pairs where they fit).
    samples : [lo, hi]
        Each client draws its number of samples uniformly from this range (paper: 200-800).
    test_fraction : float
        Share of each client's shard kept as its test rows (never used for training).
    """
    samples, tf = _check_common(samples, test_fraction)
    n, classes = _groups_and_labels(ds, n_clients, n_groups, "label-swapped", min_labels=2)
    rng = data_rng(seed, IMAGE_FEDERATIONS_STREAM, 3)
    pairs = _pairs(classes, int(n_groups), 2, rng)
    groups = _groups_of(n, _counts_from_proportions(n, [1.0] * int(n_groups)), rng)
    all_labels = [int(c) for c in classes]
    return _federation(ds, data, seed, groups, [all_labels] * len(pairs),
                       [[["swap_labels", {"pairs": [p]}]] for p in pairs],
                       [f"swap {a}<->{b}" for a, b in pairs], samples, tf, rng, "label-swapped")


def _case_sets(ds: Dataset) -> list[list[int]]:
    """Upper-case labels against lower-case labels (by the data set's class names)."""
    names = list(ds.meta.get("class_names") or [])
    sets = [[i for i, c in enumerate(names) if len(c) == 1 and c.isupper()],
            [i for i, c in enumerate(names) if len(c) == 1 and c.islower()]]
    if not all(sets):
        what = ds.name or "the data set"
        raise ConfigError(f"data.partition.label_sets: 'case' needs upper and lower case letters; {what} has none "
                          "of one case (use femnist or emnist:byclass, e.g. with data.options.classes: letters)")
    return sets


def _label_sets(ds: Dataset, label_sets: Any, n_groups: int, classes: np.ndarray, n: int,
                rng: np.random.Generator) -> list[list[int]]:
    """The disjoint label sets of ``grouped+rotated``: random, by case, or given."""
    if isinstance(label_sets, str) and label_sets == "random":
        if not 1 <= n_groups <= min(len(classes), n):
            raise ConfigError(f"data.partition.n_groups: must lie in [1, {min(len(classes), n)}]; got {n_groups!r}")
        return [sorted(int(c) for c in part) for part in np.array_split(rng.permutation(classes), n_groups)]
    if isinstance(label_sets, str) and label_sets == "case":
        sets = _case_sets(ds)
    elif isinstance(label_sets, (list, tuple)) and label_sets and all(isinstance(g, (list, tuple)) and g
                                                                      for g in label_sets):
        sets = [sorted(int(c) for c in g) for g in label_sets]
        flat = [c for g in sets for c in g]
        if len(set(flat)) != len(flat) or not set(flat) <= {int(c) for c in classes}:
            raise ConfigError(f"data.partition.label_sets: disjoint lists of the data set's labels "
                              f"({int(classes.min())}-{int(classes.max())}); got {label_sets!r}")
    else:
        raise ConfigError(f"data.partition.label_sets: 'random', 'case' or a list of label lists; got {label_sets!r}")
    if n_groups not in (2, len(sets)) or len(sets) > n:
        raise ConfigError(f"data.partition.n_groups: {len(sets)} label sets given, so n_groups is {len(sets)} (and "
                          f"n_clients at least that); got n_groups={n_groups!r}, n_clients={n}")
    return sets


@federation_builder("grouped+rotated")
def grouped_rotated(ds: Dataset, data: Any, n_clients: int | None, seed: int, n_groups: int = 2,
                    rotated_fraction: float = 0.3, rotation: int = 90, samples: Any = COMMON["samples"],
                    test_fraction: float = COMMON["test_fraction"], label_sets: str | list[list[int]] = "random",
                    rotated_clients: int | None = None) -> Federation:
    """Disjoint label sets, and within each a share of clients with rotated images.

    Parameters
    ----------
    n_groups : int
        Number of disjoint label sets (2 * n_groups true groups: each set with and without rotation).
    rotated_fraction : float
        Share of each label set's clients whose images are rotated.
    rotation : int
        Rotation in degrees of those clients (a multiple of 90 other than 0).
    samples : [lo, hi]
        Each client draws its number of samples uniformly from this range (paper: 200-800).
    test_fraction : float
        Share of each client's shard kept as its test rows (never used for training).
    label_sets : 'random', 'case' or list of label lists
        How labels are split: at random into n_groups sets; 'case': upper case against lower case (the paper's
        EMNIST letters; femnist or emnist:byclass); or the given disjoint lists.
    rotated_clients : int or None
        Clients of each label set whose images are rotated (paper: 15 of 50); overrides rotated_fraction.
    """
    samples, tf = _check_common(samples, test_fraction)
    shape = _square_image(ds, "grouped+rotated")
    n = _n(n_clients)
    classes = np.unique(ds.y) if ds.y is not None else np.zeros(0, np.int64)
    if not 0.0 <= float(rotated_fraction) <= 1.0:
        raise ConfigError(f"data.partition.rotated_fraction: must lie in [0, 1]; got {rotated_fraction!r}")
    if int(rotation) % 90 or int(rotation) % 360 == 0:
        raise ConfigError(f"data.partition.rotation: a multiple of 90 degrees other than 0; got {rotation!r}")
    rng = data_rng(seed, IMAGE_FEDERATIONS_STREAM, 4)
    sets = _label_sets(ds, label_sets, int(n_groups), classes, n, rng)
    groups = _rotated_groups(_groups_of(n, _counts_from_proportions(n, [1.0] * len(sets)), rng), len(sets),
                             float(rotated_fraction), rotated_clients, rng)
    k = (int(rotation) // 90) % 4
    group_labels, transforms, names = [], [], []
    for g in range(len(sets)):
        group_labels += [sets[g], sets[g]]
        transforms += [[], [["rotate", {"k": k, "shape": list(shape)}]]]
        label = _set_name(ds, sets[g], label_sets)
        names += [label, f"{label} rot{rotation}"]
    return _federation(ds, data, seed, groups, group_labels, transforms, names, samples, tf, rng, "grouped+rotated")


def _set_name(ds: Dataset, labels: list[int], label_sets: Any) -> str:
    if isinstance(label_sets, str) and label_sets == "case":
        return "upper case" if ds.meta["class_names"][labels[0]].isupper() else "lower case"
    return f"labels {','.join(map(str, labels))}"


def _rotated_groups(base: np.ndarray, n_sets: int, fraction: float, count: int | None,
                    rng: np.random.Generator) -> np.ndarray:
    """True group 2g (label set g) or 2g + 1 (label set g, rotated) of each client."""
    groups = np.empty(len(base), dtype=np.int64)
    for g in range(n_sets):
        members = np.flatnonzero(base == g)
        n_rot = int(round(fraction * len(members))) if count is None else int(count)
        if not 0 <= n_rot <= len(members):
            raise ConfigError(f"data.partition.rotated_clients: label set {g} has {len(members)} clients; got "
                              f"{count!r}")
        rot = set(rng.choice(members, size=n_rot, replace=False).tolist()) if n_rot else set()
        for c in members:
            groups[c] = 2 * g + (1 if int(c) in rot else 0)
    return groups
