"""Which networks train stacked, how many clients at once, and which rows each step takes.

This module holds the planning side of batched training (:mod:`fedray.nn.batched`):
:func:`can_batch` says whether a network can be stacked at all (no buffers, dropout or batch
normalisation); :func:`clients_per_chunk` says how many clients train in one stacked batch
(0: client by client), from the network's activation size (:func:`activation_size`), B and
the device only, so that a client trains the same way whichever clients share its host;
:func:`batch_schedule` lays out every client's mini-batches, epoch after epoch, as padded row
indices and masks, one step after another.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

#: Layers whose forward draws random numbers or depends on the whole batch: trained client by client.
_UNBATCHABLE = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase, nn.LocalResponseNorm)


def can_batch(model: nn.Module) -> bool:
    """Whether ``model`` can train in the batched path: no buffers, no dropout or batch normalisation."""
    if any(True for _ in model.buffers()):
        return False
    return not any(isinstance(m, _UNBATCHABLE) for m in model.modules())


def batch_schedule(sizes: Sequence[int], perms: list[list[np.ndarray]], offsets: np.ndarray, batch_size: int,
              pad: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices (C, T, B) into the stacked rows (``pad`` where a batch is shorter), the mask
    (C, T, B), and for each client and step the weight of its loss in the last epoch's mean (C, T)."""
    C = len(sizes)
    steps = [len(p) * math.ceil(n / batch_size) if n else 0 for n, p in zip(sizes, perms)]
    T = max(steps) if steps else 0
    idx = np.full((C, T, batch_size), pad, dtype=np.int64)
    last = np.zeros((C, T), dtype=np.float64)
    for i, (n, client_perms) in enumerate(zip(sizes, perms)):
        if not n:
            continue
        s = math.ceil(n / batch_size)
        for e, perm in enumerate(client_perms):
            rows = np.full(s * batch_size, pad, dtype=np.int64)
            rows[:n] = perm + offsets[i]
            idx[i, e * s:(e + 1) * s] = rows.reshape(s, batch_size)
        counts = np.minimum(batch_size, n - batch_size * np.arange(s))
        last[i, (len(client_perms) - 1) * s:len(client_perms) * s] = counts / n
    return idx, idx != pad, last


#: On the CPU, a network whose activations for one client's mini-batch exceed this many values trains
#: client by client: its loop already keeps the CPU busy, and stacking clients only moves the working
#: set out of the caches. Stacked clients are cut into chunks of at most CPU_CHUNK values of activations.
CPU_CLIENT_LIMIT = 1_000_000
CPU_CHUNK = 8_000_000


def activation_size(model: nn.Module, sample_shape: Sequence[int]) -> int:
    """Values of all the layers' outputs for one sample (what a step keeps for the backward pass)."""
    memo = model.__dict__.setdefault("_fedray_activations", {})
    key = (tuple(int(d) for d in sample_shape), str(next(model.parameters()).device))
    if key not in memo:
        memo[key] = _count_activations(model, key[0])
    return memo[key]


def _count_activations(model: nn.Module, sample_shape: tuple[int, ...]) -> int:
    total = 0

    def count(_m: nn.Module, _inp: object, out: object) -> None:
        nonlocal total
        if isinstance(out, torch.Tensor):
            total += out.numel()

    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    hooks = [m.register_forward_hook(count) for m in leaves]
    dev = next(model.parameters()).device
    try:
        with torch.no_grad():
            model(torch.zeros((1, *sample_shape), device=dev))
    finally:
        for h in hooks:
            h.remove()
    return max(1, total)


def clients_per_chunk(model: nn.Module, sample_shape: Sequence[int], batch_size: int,
                      stack: str = "always") -> int:
    """How many clients train in one stacked batch: 0 (train client by client: ``stack`` is
    "never", or "gpu" and the network is on the CPU, or a large network on the CPU, see
    :data:`CPU_CLIENT_LIMIT`), else at least 2. Depends only on the network, the sample shape,
    B, the device and ``stack``, never on which clients share a host."""
    if stack not in ("gpu", "always", "never"):
        raise ValueError(f"stack: must be 'gpu', 'always' or 'never'; got {stack!r}")
    if stack == "never" or not can_batch(model):
        return 0
    on_cpu = next(model.parameters()).device.type == "cpu"
    if stack == "gpu" and on_cpu:
        return 0
    if not on_cpu:
        return 1 << 30
    per_client = int(batch_size) * activation_size(model, sample_shape)
    if per_client > CPU_CLIENT_LIMIT:
        return 0
    return max(2, CPU_CHUNK // per_client)


__all__ = ["CPU_CHUNK", "CPU_CLIENT_LIMIT", "activation_size", "can_batch", "clients_per_chunk"]
