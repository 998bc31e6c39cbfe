"""FedCRef's pieces for scripts that study it outside the round loop (the reproductions of the paper).

The same functions the client actors run, for one process and no Ray: the paper's class-subset draw,
the initial local clustering, Phase 1 training of one autoencoder per local cluster from the seeded
initial weights, and the matrix of per-sample reconstruction errors. It trains networks, so it imports
torch (the round loop's modules do not import it).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from fedray.algorithms.fedcref_client import initial_labels
from fedray.data.fedcref_federations import class_subsets_indices
from fedray.nn.autoencoder import ae_for, errors_matrix, initial_ae_weights, train_autoencoder
from fedray.nn.train import get_flat, set_flat, torch_threads

__all__ = ["class_subsets_indices", "cluster_errors", "compact_labels", "initial_labels", "n_weights",
           "one_thread", "train_cluster_model"]


def compact_labels(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..K-1 in the order of their values (as a client renumbers them)."""
    _, inv = np.unique(labels, return_inverse=True)
    return inv.astype(np.int64)


def n_weights(spec: dict[str, Any]) -> int:
    """Number of weights of the autoencoder of ``spec`` (``{"n_features", "hidden", "output", "seed"}``)."""
    return int(initial_ae_weights(spec).size)


def train_cluster_model(spec: dict[str, Any], X: np.ndarray, *, epochs: int, rng: np.random.Generator,
                        batch_size: int = 32, lr: float = 1e-3) -> np.ndarray:
    """One autoencoder of ``spec`` from its seeded initial weights, trained on ``X`` as Phase 1 trains a
    cluster's (Adam, MSE); its weights as a float32 vector (P,)."""
    model = ae_for(spec, device="cpu")
    set_flat(model, initial_ae_weights(spec))
    train_autoencoder(model, X, epochs=epochs, batch_size=batch_size, lr=lr, rng=rng)
    return get_flat(model)


def cluster_errors(spec: dict[str, Any], weights: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Per-sample reconstruction MSE of each of ``weights`` (m, P) on ``X`` (n, d): (n, m)."""
    return errors_matrix(ae_for(spec, device="cpu"), weights, X)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread for the duration (a shared machine)."""
    with torch_threads(1):
        yield
