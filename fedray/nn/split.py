"""Each client's own train/test split for supervised federated learning (torch-free).

Mehta & Shao 2023, Section V-B: "each client's data are randomly partitioned into
an 85%-15% train-test split"; a client's test accuracy is measured on its own
test part. Every supervised method (FedAvg, local, IFCA, CFL, FL+HC, FLACC) calls
:func:`client_split` inside its client functions, so all of them train and test
on the same rows.

* Federations built by :mod:`fedray.data.image_federations` fix the split in the
  recipe: the last ``client.meta["n_test"]`` rows of the shard are the test rows
  (chosen so that no client's test image is in any client's training rows).
* Otherwise the split is a permutation drawn from ``(seed, client id)``; it does
  not depend on the round, the method or the runtime.

The split is computed once per client and cached in ``client.state["_split"]``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedray.core.errors import DataError
from fedray.core.seeding import SPLIT_STREAM, data_rng

DEFAULT_TEST_FRACTION = 0.15


@dataclass(frozen=True)
class Split:
    """A client's split; features float32, labels int64.

    Attributes
    ----------
    X_train : ndarray of shape (n_train, *sample_shape)
    y_train : ndarray of shape (n_train,)
    X_test : ndarray of shape (n_test, *sample_shape)
    y_test : ndarray of shape (n_test,)

    The rows have the shape of one sample (``(C, H, W)`` for images, ``(d,)`` for tables), as a
    model ``(input_shape, n_classes)`` of :mod:`fedray.nn` takes them: the training loops, the
    evaluation and a user's model see batches ``(b, *sample_shape)``.
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray

    @property
    def n_train(self) -> int:
        return int(self.y_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.y_test.shape[0])


def split_rows(n: int, test_fraction: float, seed: int, client_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Row positions ``(train, test)`` of a random split of ``n`` rows (sorted).

    ``n_test = round(test_fraction * n)``, at least 1 when ``n >= 2``, 0 when ``n < 2``.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise DataError(f"test_fraction: must lie in [0, 1); got {test_fraction!r}")
    n_test = int(round(test_fraction * n))
    if n >= 2 and test_fraction > 0:
        n_test = min(max(n_test, 1), n - 1)
    else:
        n_test = 0
    perm = data_rng(seed, SPLIT_STREAM, client_id).permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def client_split(client: Any, test_fraction: float = DEFAULT_TEST_FRACTION) -> Split:
    """The client's train/test split (cached in ``client.state``).

    Parameters
    ----------
    client : fedray.core.client_view.ClientView
        Must have labels (supervised algorithms see ``client.data.y``).
    test_fraction : float
        Used only where the federation did not fix the split (``meta["n_test"]``).

    Raises
    ------
    DataError
        When the client has no labels.
    """
    cached = client.state.get("_split")
    fixed = client.meta.get("n_test")
    key = ("fixed", int(fixed)) if fixed is not None else ("random", float(test_fraction))
    if cached is not None and cached[0] == key:
        return cached[1]
    data = client.data
    y = data.y if data.y is not None else client.labels
    if y is None:
        raise DataError("supervised training needs labels; this client's data have none (set data.label_column)")
    X = as_samples(np.asarray(data.X), getattr(data, "sample_shape", None), client.id)
    n = X.shape[0]
    if fixed is not None:
        n_test = int(fixed)
        if not 0 <= n_test < n:
            raise DataError(f"client {client.id}: meta n_test={n_test} but the shard has {n} rows")
        train, test = np.arange(n - n_test), np.arange(n - n_test, n)
    else:
        train, test = split_rows(n, test_fraction, client.seed, client.id)
    y = np.asarray(y, dtype=np.int64)
    split = Split(np.ascontiguousarray(X[train], dtype=np.float32), y[train],
                  np.ascontiguousarray(X[test], dtype=np.float32), y[test])
    client.state["_split"] = (key, split)
    return split


def as_samples(X: np.ndarray, sample_shape: Any, client_id: int) -> np.ndarray:
    """The rows ``X`` (n, n_features), flat as a shard holds them, as samples (n, *sample_shape) (a view);
    ``X`` as it is when ``sample_shape`` is None or already its rows' shape.

    Raises
    ------
    DataError
        When a sample of ``sample_shape`` does not hold the shard's number of features.
    """
    shape = X.shape[1:] if sample_shape is None else tuple(int(s) for s in sample_shape)
    if X.shape[1:] == shape:
        return X
    if math.prod(X.shape[1:]) != math.prod(shape):
        raise DataError(f"client {client_id}: rows of shape {X.shape[1:]} do not hold samples of shape {shape}")
    return X.reshape(X.shape[0], *shape)


__all__ = ["DEFAULT_TEST_FRACTION", "Split", "as_samples", "client_split", "split_rows"]
