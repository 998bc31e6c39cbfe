"""Autoencoders of FedCRef and a compact DEC (Pisa / IIT-CNR 2025, Section 5.3; Xie et al. 2016).

* :func:`build_autoencoder` — the paper's fully connected autoencoder
  ``d-100-64-32-64-100-d`` (ReLU, sigmoid output), sizes configurable; initial
  weights depend only on the seed.
* :func:`ae_for` — a per-process cached instance (like :func:`fedray.nn.train.model_for`);
  callers ``set_flat`` it before use.
* :func:`train_autoencoder` — MSE training through the project's one loop
  (:func:`fedray.nn.train.fit`).
* :func:`reconstruction_errors` — per-sample mean squared error, shape (n,).
* :func:`dec_cluster` — compact Deep Embedded Clustering: autoencoder
  pre-training, k-means on the codes, then KL(P || Q) self-training of the
  encoder and the centres with Student-t soft assignments (DEC eqs. 1-3), the
  target P refreshed every epoch. Also through :func:`fit`.

Weights travel as flat float32 vectors (:func:`fedray.nn.train.get_flat`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedray.core.ops import kmeans
from fedray.nn.train import (
    fit,
    get_flat,
    predict,
    resolve_device,
    set_flat,
    torch_threads,
)


class Autoencoder(nn.Module):
    """Fully connected autoencoder: ``encoder`` d -> hidden[-1], ``decoder`` back to d."""

    def __init__(self, n_features: int, hidden: Sequence[int] = (100, 64, 32), output: str = "sigmoid") -> None:
        super().__init__()
        sizes = [int(n_features), *map(int, hidden)]
        enc: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            enc += [nn.Linear(a, b), nn.ReLU()]
        self.encoder = nn.Sequential(*enc[:-1]) if len(sizes) > 1 else nn.Identity()
        dec: list[nn.Module] = []
        rev = sizes[::-1]
        for a, b in zip(rev[:-1], rev[1:]):
            dec += [nn.Linear(a, b), nn.ReLU()]
        dec = dec[:-1]
        if output == "sigmoid":
            dec.append(nn.Sigmoid())
        self.decoder = nn.Sequential(*dec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.relu(self.encoder(x)))


def build_autoencoder(n_features: int, hidden: Sequence[int] = (100, 64, 32), output: str = "sigmoid",
                      seed: int = 0) -> Autoencoder:
    """The autoencoder with initial weights drawn from ``seed`` (global torch generator untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return Autoencoder(n_features, hidden, output)


_CACHE: dict[tuple, Autoencoder] = {}


def ae_for(spec: dict[str, Any], device: str | torch.device | None = "auto") -> Autoencoder:
    """A cached autoencoder for ``spec = {"n_features", "hidden", "output", "seed"}`` on ``device``."""
    dev = resolve_device(device)
    key = (int(spec["n_features"]), tuple(spec["hidden"]), spec["output"], int(spec["seed"]), str(dev))
    model = _CACHE.get(key)
    if model is None:
        with torch_threads():
            model = build_autoencoder(spec["n_features"], spec["hidden"], spec["output"], spec["seed"]).to(dev)
        if len(_CACHE) >= 8:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = model
    return model


def initial_ae_weights(spec: dict[str, Any], cache: bool = True) -> np.ndarray:
    """Seeded initial weights of ``spec`` as a float32 vector (P,) (cached per process unless ``cache`` is
    False, for one-off seeds; do not modify)."""
    key = (int(spec["n_features"]), tuple(spec["hidden"]), spec["output"], int(spec["seed"]))
    if not cache and key not in _INIT:
        with torch_threads():
            return get_flat(build_autoencoder(*key))
    if key not in _INIT:
        with torch_threads():
            _INIT[key] = get_flat(build_autoencoder(*key))
    return _INIT[key]


_INIT: dict[tuple, np.ndarray] = {}


def _mse(model: nn.Module, xb: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(xb), xb)


def train_autoencoder(model: nn.Module, X: np.ndarray, *, epochs: int, batch_size: int, lr: float,
                      rng: np.random.Generator) -> list[float]:
    """Adam + MSE on ``X`` (n, d) for ``epochs``; returns the loss of each epoch."""
    return fit(model, (X,), _mse, epochs=epochs, batch_size=batch_size, lr=lr, optimizer="adam", rng=rng)


def reconstruction_errors(model: nn.Module, X: np.ndarray) -> np.ndarray:
    """Per-sample mean squared reconstruction error, float64 of shape (n,)."""
    if len(X) == 0:
        return np.zeros(0)
    R = predict(model, X).astype(np.float64)
    return np.mean((R - np.asarray(X, dtype=np.float64)) ** 2, axis=1)


def errors_matrix(model: nn.Module, weights: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Errors of each of ``weights`` (m, P) on ``X`` (n, d); returns (n, m)."""
    out = np.zeros((len(X), len(weights)))
    for j, w in enumerate(weights):
        set_flat(model, w)
        out[:, j] = reconstruction_errors(model, X)
    return out


# --- compact DEC ------------------------------------------------------------------
class _DEC(nn.Module):
    def __init__(self, encoder: nn.Module, centers: np.ndarray) -> None:
        super().__init__()
        self.encoder = encoder
        self.centers = nn.Parameter(torch.as_tensor(centers, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.encoder(x)
        q = 1.0 / (1.0 + torch.cdist(z, self.centers) ** 2)   # Student t, alpha = 1 (DEC eq. 1)
        return q / q.sum(dim=1, keepdim=True)


def _kl(model: nn.Module, xb: torch.Tensor, pb: torch.Tensor) -> torch.Tensor:
    q = model(xb)
    return F.kl_div(torch.log(q + 1e-10), pb, reduction="batchmean")   # KL(P || Q) (DEC eq. 2)


def _target(q: np.ndarray) -> np.ndarray:
    w = q ** 2 / q.sum(axis=0, keepdims=True)                           # DEC eq. 3
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def dec_cluster(X: np.ndarray, k: int, rng: np.random.Generator, *, hidden: Sequence[int] = (128, 64, 10),
                output: str = "sigmoid", pretrain_epochs: int = 30, dec_epochs: int = 20, batch_size: int = 64,
                lr: float = 1e-3, seed: int = 0) -> np.ndarray:
    """Cluster ``X`` (n, d) into ``k`` groups with a compact DEC; returns labels (n,).

    The encoder is pre-trained as an autoencoder, the centres start from k-means
    on the codes, and encoder and centres are then trained on KL(P || Q) for
    ``dec_epochs`` epochs (target P recomputed before each epoch).
    """

    ae = build_autoencoder(X.shape[1], hidden, output, seed)
    train_autoencoder(ae, X, epochs=pretrain_epochs, batch_size=batch_size, lr=lr, rng=rng)
    Z = predict(ae.encoder, X).astype(np.float64)
    C = kmeans(Z, k, rng, n_init=3)
    dec = _DEC(ae.encoder, C)
    for _ in range(int(dec_epochs)):
        P = _target(predict(dec, X).astype(np.float64))
        fit(dec, (X, P), _kl, epochs=1, batch_size=batch_size, lr=lr * 0.1, optimizer="adam", rng=rng)
    return np.argmax(predict(dec, X), axis=1).astype(np.int64)


def encode(X: np.ndarray, hidden: Sequence[int], rng: np.random.Generator, *, output: str = "sigmoid",
           epochs: int = 30, batch_size: int = 64, lr: float = 1e-3, seed: int = 0) -> np.ndarray:
    """Codes (n, hidden[-1]) of ``X`` from an autoencoder trained on it (for choosing k)."""
    ae = build_autoencoder(X.shape[1], hidden, output, seed)
    train_autoencoder(ae, X, epochs=epochs, batch_size=batch_size, lr=lr, rng=rng)
    return predict(ae.encoder, X).astype(np.float64)


__all__ = ["Autoencoder", "ae_for", "build_autoencoder", "dec_cluster", "encode", "errors_matrix",
           "initial_ae_weights", "reconstruction_errors", "train_autoencoder"]
