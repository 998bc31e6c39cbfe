"""The one training loop of fedray, and what client functions need around it.

Clients train torch models inside their actors (Mehta & Shao 2023, Algorithm 1,
``ClientUpdate``: E local epochs of mini-batch SGD with batch size B and rate eta).
Weights travel between server and clients as flat float32 numpy arrays, so the
server never imports torch.

API (everything takes and returns numpy; torch stays inside):

``get_flat(model) -> ndarray (P,) float32`` / ``set_flat(model, vec)``
    The model's trainable parameters as one vector, in ``model.parameters()`` order.
``fit(model, arrays, loss_fn, *, epochs, batch_size, lr, optimizer, rng, device) -> list[float]``
    The generic loop: ``arrays`` is a tuple of equally long arrays (``(X, y)`` or
    ``(X,)``); each epoch visits them in the order ``rng.permutation(n)`` (a numpy
    ``Generator``, normally ``client.rng``: per client, per round, seeded) in
    mini-batches; ``loss_fn(model, *batch_tensors) -> scalar tensor``. Returns the
    mean loss of each epoch. FedCRef's autoencoders use it with
    ``loss_fn=lambda m, xb: F.mse_loss(m(xb), xb)``.
``train(model, X, y, *, epochs, batch_size, lr, optimizer="sgd", rng, device=None) -> float``
    ``fit`` with cross-entropy; returns the mean loss of the last epoch.
``evaluate(model, X, y) -> (loss, accuracy)``
    Mean cross-entropy and accuracy, no gradient.
``tensor(a, device) -> Tensor``
    A numpy array as float32 (floats) or int64 (integers) on the device.
``predict(model, X) -> ndarray``
    Outputs (logits, or reconstructions for an autoencoder), float32, batched.
``model_for(spec, device=None) -> nn.Module``
    A per-process cached instance of the model ``spec`` (:func:`fedray.nn.model_spec`)
    on the device; callers must ``set_flat`` it before use.
``resolve_device(pref="auto")``, ``default_threads()``, ``torch_threads(n)``
    Device: the GPU Ray assigned to the actor (``ray.get_gpu_ids()``; set
    ``runtime.client_resources.num_gpus``, fractions allowed), CUDA if available
    outside Ray, else CPU. Threads: ``fit``/``evaluate``/``predict`` run with
    ``torch.set_num_threads(default_threads())`` — the whole CPUs Ray assigned to
    the actor (at least 1), 1 outside Ray, or ``$FEDRAY_TORCH_THREADS`` — and
    restore the previous count afterwards, so actors packed on a node do not fight
    over cores.

Determinism: on CPU, the same weights, data, ``rng`` state and thread count give
the same bits. The thread count matters (torch's reductions split work by
thread), which is why it is 1 per actor CPU in both runtimes by default; GPU
kernels are not guaranteed bitwise reproducible.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedray.core.errors import ConfigError
from fedray.nn.models import build_model

THREADS_ENV = "FEDRAY_TORCH_THREADS"


# --- placement ----------------------------------------------------------------
def _ray_worker() -> Any | None:
    """The ``ray`` module when this process is a Ray worker (actor), else None."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    try:
        if ray.get_runtime_context().worker.mode == ray.WORKER_MODE:
            return ray
    except Exception:  # noqa: BLE001 - an older or unusual Ray; treat as not a worker
        return None
    return None


def default_threads() -> int:
    """Torch threads for this process: ``$FEDRAY_TORCH_THREADS``, else the whole CPUs Ray
    assigned to this actor (at least 1), else 1."""
    env = os.environ.get(THREADS_ENV)
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ConfigError(f"${THREADS_ENV}: must be a positive integer; got {env!r}") from None
    ray = _ray_worker()
    if ray is not None:
        try:
            cpus = float(ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0))
        except Exception:  # noqa: BLE001
            cpus = 1.0
        return max(1, int(math.floor(cpus + 1e-9)))
    return 1


@contextlib.contextmanager
def torch_threads(n: int | None = None) -> Iterator[int]:
    """Run the block with ``n`` torch threads (default :func:`default_threads`), then restore."""
    n = default_threads() if n is None else max(1, int(n))
    old = torch.get_num_threads()
    if old != n:
        torch.set_num_threads(n)
    try:
        yield n
    finally:
        if old != n:
            torch.set_num_threads(old)


def resolve_device(pref: str | torch.device | None = "auto") -> torch.device:
    """The device to train on.

    ``"auto"``: inside a Ray actor, ``cuda`` when Ray assigned it a GPU (Ray sets
    ``CUDA_VISIBLE_DEVICES``, so it is ``cuda:0`` of what the actor sees), else
    CPU; outside Ray, ``cuda`` when available. ``"cpu"`` / ``"cuda"`` force it.
    """
    if isinstance(pref, torch.device):
        return pref
    pref = pref or "auto"
    if pref == "cpu":
        return torch.device("cpu")
    if pref.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"algorithm.params.device: {pref!r} but no CUDA device is visible here "
                              "(set runtime.client_resources.num_gpus, or use 'auto' / 'cpu')")
        return torch.device(pref)
    if pref != "auto":
        raise ConfigError(f"algorithm.params.device: must be 'auto', 'cpu' or 'cuda'; got {pref!r}")
    return _auto_device()


def _auto_device() -> torch.device:
    ray = _ray_worker()
    if ray is not None:
        gpus = ray.get_gpu_ids()
        return torch.device("cuda") if gpus and torch.cuda.is_available() else torch.device("cpu")
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


# --- flat weights ---------------------------------------------------------------
def get_flat(model: nn.Module) -> np.ndarray:
    """Trainable parameters as one float32 vector of shape (P,) (a copy, on the CPU)."""
    with torch.no_grad():
        vec = torch.nn.utils.parameters_to_vector(model.parameters())
    return vec.detach().to("cpu", torch.float32).numpy().copy()


def set_flat(model: nn.Module, vec: np.ndarray) -> None:
    """Load a float vector of shape (P,) into the model's trainable parameters."""
    vec = np.asarray(vec)
    n = sum(p.numel() for p in model.parameters())
    if vec.ndim != 1 or vec.shape[0] != n:
        raise ValueError(f"set_flat: the model has {n} parameters; got a vector of shape {vec.shape}")
    dev = next(model.parameters()).device
    t = torch.from_numpy(np.array(vec, dtype=np.float32, copy=True)).to(dev)  # copy: shared arrays are read-only
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(t, model.parameters())


_MODELS: dict[tuple, nn.Module] = {}


def model_for(spec: dict[str, Any], device: str | torch.device | None = "auto") -> nn.Module:
    """A cached instance of the model described by ``spec`` on ``device`` (one per process).

    The instance is shared by every client the process hosts: always
    :func:`set_flat` it before training or evaluating.
    """

    dev = resolve_device(device)
    key = (spec["name"], tuple(spec["sample_shape"]), int(spec["n_classes"]), int(spec["seed"]), str(dev))
    model = _MODELS.get(key)
    if model is None:
        with torch_threads():
            model = build_model(spec["name"], tuple(spec["sample_shape"]), int(spec["n_classes"]), int(spec["seed"]))
        model = model.to(dev)
        if len(_MODELS) >= 8:
            _MODELS.pop(next(iter(_MODELS)))
        _MODELS[key] = model
    return model


def initial_weights(spec: dict[str, Any]) -> np.ndarray:
    """The seeded initial weights of ``spec`` as a float32 vector (P,) (built on the CPU)."""

    with torch_threads():
        return get_flat(
            build_model(spec["name"], tuple(spec["sample_shape"]), int(spec["n_classes"]), int(spec["seed"]))
        )


# --- the loop ---------------------------------------------------------------
LossFn = Callable[..., torch.Tensor]


def _make_optimizer(model: nn.Module, optimizer: str, lr: float, momentum: float,
                    weight_decay: float) -> torch.optim.Optimizer:
    if optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    if optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    raise ConfigError(f"algorithm.params.optimizer: must be 'sgd' or 'adam'; got {optimizer!r}")


def tensor(a: np.ndarray, device: str | torch.device | None = None) -> torch.Tensor:
    """``a`` as a tensor on ``device`` (default CPU): floats become float32, integers int64 (a copy
    where ``a`` is read-only)."""
    a = np.asarray(a)
    if np.issubdtype(a.dtype, np.floating):
        a = np.ascontiguousarray(a, dtype=np.float32)
    elif np.issubdtype(a.dtype, np.integer):
        a = np.ascontiguousarray(a, dtype=np.int64)
    if not a.flags.writeable:
        a = a.copy()
    return torch.from_numpy(a).to(device if device is not None else "cpu")


_tensor = tensor


def fit(model: nn.Module, arrays: Sequence[np.ndarray], loss_fn: LossFn, *, epochs: int, batch_size: int,
        lr: float, optimizer: str = "sgd", rng: np.random.Generator, device: str | torch.device | None = None,
        momentum: float = 0.0, weight_decay: float = 0.0) -> list[float]:
    """Train ``model`` in place for ``epochs`` passes of mini-batches.

    Parameters
    ----------
    model : nn.Module
        Already on the device (``model_for`` does that).
    arrays : sequence of ndarray, each of shape (n, ...)
        Float arrays become float32 tensors, integer arrays int64.
    loss_fn : callable
        ``loss_fn(model, *batch) -> scalar tensor``.
    epochs, batch_size : int
        E and B; the last mini-batch of an epoch may be smaller.
    lr : float
    optimizer : {"sgd", "adam"}
    rng : numpy.random.Generator
        Batch order (``rng.permutation(n)`` each epoch).
    device : str, torch.device or None
        Where the data go (default: the model's device).

    Returns
    -------
    list of float
        Mean loss of each epoch (sample-weighted).
    """
    n = int(len(arrays[0]))
    if any(len(a) != n for a in arrays):
        raise ValueError(f"fit: arrays of different lengths {[len(a) for a in arrays]}")
    if epochs < 1 or batch_size < 1:
        raise ConfigError(f"epochs and batch_size must be >= 1; got epochs={epochs}, batch_size={batch_size}")
    dev = resolve_device(device) if device is not None else next(model.parameters()).device
    losses: list[float] = []
    if n == 0:
        return [float("nan")] * epochs
    with torch_threads():
        tensors = [_tensor(a, dev) for a in arrays]
        opt = _make_optimizer(model, optimizer, float(lr), momentum, weight_decay)
        model.train()
        for _ in range(int(epochs)):
            perm = torch.from_numpy(rng.permutation(n)).to(dev)
            total = torch.zeros((), device=dev)
            for start in range(0, n, int(batch_size)):
                idx = perm[start : start + int(batch_size)]
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model, *(t[idx] for t in tensors))
                loss.backward()
                opt.step()
                total += loss.detach() * idx.shape[0]
            losses.append(float(total.item()) / n)
        model.eval()
    return losses


def _cross_entropy(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(xb), yb)


def train(model: nn.Module, X: np.ndarray, y: np.ndarray, *, epochs: int, batch_size: int, lr: float,
          optimizer: str = "sgd", rng: np.random.Generator, device: str | torch.device | None = None) -> float:
    """Supervised local training with cross-entropy (``ClientUpdate`` of Algorithm 1).

    Parameters
    ----------
    X : ndarray of shape (n, n_features) or (n, *sample_shape)
    y : ndarray of shape (n,), integer labels in [0, n_classes)

    Returns
    -------
    float
        Mean training loss of the last epoch.
    """
    return fit(model, (X, y), _cross_entropy, epochs=epochs, batch_size=batch_size, lr=lr, optimizer=optimizer,
               rng=rng, device=device)[-1]


def predict(model: nn.Module, X: np.ndarray, batch_size: int = 1024) -> np.ndarray:
    """Model outputs for ``X`` (n, ...) as float32 of shape (n, n_outputs...), no gradient."""
    dev = next(model.parameters()).device
    outs = []
    with torch_threads(), torch.no_grad():
        model.eval()
        Xt = _tensor(X, dev)
        for start in range(0, Xt.shape[0], batch_size):
            outs.append(model(Xt[start : start + batch_size]).to("cpu", torch.float32))
    if not outs:
        return np.zeros((0,), dtype=np.float32)
    return torch.cat(outs).numpy()


def evaluate(model: nn.Module, X: np.ndarray, y: np.ndarray, batch_size: int = 1024) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on ``(X, y)``; ``(nan, nan)`` for no samples."""
    n = int(len(y))
    if n == 0:
        return float("nan"), float("nan")
    logits = torch.from_numpy(predict(model, X, batch_size))
    yt = torch.from_numpy(np.asarray(y, dtype=np.int64))
    with torch_threads():
        loss = float(F.cross_entropy(logits, yt, reduction="mean").item())
        acc = float((logits.argmax(dim=1) == yt).double().mean().item())
    return loss, acc


__all__ = ["default_threads", "evaluate", "fit", "get_flat", "initial_weights", "model_for", "predict",
           "resolve_device", "set_flat", "tensor", "torch_threads", "train"]
