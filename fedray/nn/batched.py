"""Batched local training: the copies of one network that many clients train in a round, trained together.

The clients of one host that train the same architecture in a round keep one
stacked copy of its parameters each (leading dimension: the client) and take
their optimizer steps together: one forward and backward pass per step computes
every client's gradient on its own mini-batch — written out layer by layer for the
built-in layers, else by ``torch.func.vmap`` of ``grad_and_value(functional_call(...))``.
The written-out forward is made of batched matrix products: linear layers directly,
convolutions on their patches (im2col; the input layer's patches are cut once per
call, not per step), with channels-last activations between a convolution and the
next dense layer so that max pooling runs on contiguous channels; a ReLU right
before a max pooling is applied after it (the same values and gradients, on a
fraction of the values). Each client runs exactly the steps of
:func:`fedray.nn.train.fit`:

* epoch e visits its rows in the order ``rng.permutation(n_i)`` of its own
  generator (drawn epoch after epoch, as the loop draws them), in mini-batches of
  B; the last one of an epoch may be smaller;
* the loss of a step is the mean loss over the client's rows of that batch;
* SGD (momentum, weight decay as in ``torch.optim.SGD``) or Adam (as ``torch.optim.Adam``).

Clients hold different numbers of rows, so they take different numbers of steps
(``E * ceil(n_i / B)``): a step's batches are padded to B rows with a mask, and a
client whose steps are done no longer moves (its parameter and optimizer updates
are masked). The results equal the loop's up to float rounding (the order of the
sums inside the batched kernels differs; tests hold them to 1e-5 relative).

Only networks without buffers and without random or batch-dependent layers
(dropout, batch normalisation) are batched (:func:`can_batch`): the built-in
models all qualify; others train client by client.

On the CPU, stacking pays for small networks (per-step overhead dominates their
loop); a network whose activations for one client's batch are large (``cnn28``)
already keeps the CPU busy client by client, and stacking only spills the caches,
so :func:`clients_per_chunk` sends it to the loop (on a GPU everything is stacked).
The choice depends only on the network, B and the device, so a client trains the
same way whichever clients share its host.

The pieces live beside this module: :mod:`fedray.nn.batch_plan` (which networks stack,
how many clients at once, the steps' rows), :mod:`fedray.nn.stacked` (the written-out
stacked forward) and :mod:`fedray.nn.stacked_step` (a step's gradients and the optimizer
updates); this module holds the driver, :func:`fit_many`.

API: ``can_batch(model) -> bool``; ``clients_per_chunk(model, sample_shape,
batch_size) -> int`` (0: the loop); ``fit_many(model, starts, data, rngs, *, epochs,
batch_size, lr, optimizer, momentum, weight_decay, path, loss, chunk) ->
(weights (C, P) float32, last-epoch losses (C,))``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from fedray.core.errors import ConfigError
from fedray.nn.batch_plan import (
    CPU_CHUNK,
    CPU_CLIENT_LIMIT,
    activation_size,
    batch_schedule,
    can_batch,
    clients_per_chunk,
)
from fedray.nn.stacked import flat_layers
from fedray.nn.stacked_step import explicit_step, run_steps, vmap_step
from fedray.nn.train import tensor, torch_threads

#: The input convolution's patches are cut once per :func:`fit_many` for all rows when they take at most
#: this many values (``cnn8``: 576 a row); larger ones (``cnn28``: 19 600 a row) are cut step by step.
INPUT_PATCHES_MAX = 32_000_000


def fit_many(model: nn.Module, starts: np.ndarray, data: Sequence[tuple[np.ndarray, np.ndarray]],
             rngs: Sequence[np.random.Generator], *, epochs: int, batch_size: int, lr: float,
             optimizer: str = "sgd", momentum: float = 0.0, weight_decay: float = 0.0,
             path: str = "auto", loss: str = "cross_entropy",
             chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Train one copy of ``model`` per client, all at once, with cross-entropy (or reconstruction MSE).

    Parameters
    ----------
    model : nn.Module
        The architecture (its own weights are not used or changed), on the device the
        clients train on; :func:`can_batch` must hold.
    starts : ndarray of shape (C, P)
        Each client's start weights (flat, ``model.parameters()`` order).
    data : sequence of C pairs ``(X_i (n_i, *sample_shape), y_i (n_i,))``
        (with ``loss="mse"``: ``(X_i,)``, the targets are the inputs)
    rngs : sequence of C numpy Generators
        Client i's batch order: ``rngs[i].permutation(n_i)`` for each epoch, drawn in epoch order
        (clients with no rows draw nothing), as :func:`fedray.nn.train.fit` draws it.
    epochs, batch_size, lr, optimizer, momentum, weight_decay
        As :func:`fedray.nn.train.fit`.
    path : {"auto", "explicit", "vmap"}
        How the clients' gradients are computed: ``explicit``, one forward of the stacked
        networks written out layer by layer (linear layers and convolutions as batched
        matrix products; the built-in models' layers), or ``vmap``
        (``torch.func``: any batchable network, slower for small networks). ``auto``:
        explicit where every layer is known.
    loss : {"cross_entropy", "mse"}
        ``F.cross_entropy(model(xb), yb)`` or, for autoencoders, ``F.mse_loss(model(xb), xb)``,
        the mean over a client's rows of its batch.
    chunk : int or None
        Train at most this many clients at once (default: all); see :func:`clients_per_chunk`.

    Returns
    -------
    weights : ndarray of shape (C, P), float32
    losses : ndarray of shape (C,)
        Each client's mean loss over its last epoch (``nan`` for a client without rows).
    """
    C = len(data)
    _check_inputs(model, starts, data, rngs, epochs, batch_size, loss, optimizer)
    settings = dict(epochs=epochs, batch_size=batch_size, lr=lr, optimizer=optimizer, momentum=momentum,
                    weight_decay=weight_decay, path=path, loss=loss)
    chunk = max(2, int(chunk)) if chunk else C
    if C > chunk:  # a client's bits do not depend on the clients beside it, so chunks change nothing
        parts = [fit_many(model, np.asarray(starts)[a:a + chunk], data[a:a + chunk], rngs[a:a + chunk], **settings)
                 for a in range(0, C, chunk)]
        return np.concatenate([w for w, _ in parts]), np.concatenate([loss for _, loss in parts])
    if C == 1:
        # One client trains beside an empty one: a single client may get other kernels (a matrix product
        # instead of a batched one), and a client's bits must not depend on how many clients share its host.
        empty = (np.zeros((0, *np.shape(data[0][0])[1:]), dtype=np.float32),
                 np.zeros(0, dtype=np.int64))[:len(data[0])]
        w, losses = fit_many(model, np.concatenate([np.asarray(starts)] * 2), [data[0], empty], [rngs[0], rngs[0]],
                             **settings)
        return w[:1], losses[:1]
    return _fit_stacked(model, starts, data, rngs, **settings)


def _check_inputs(model: nn.Module, starts: np.ndarray, data: Sequence[tuple[np.ndarray, ...]],
                  rngs: Sequence[np.random.Generator], epochs: int, batch_size: int, loss: str,
                  optimizer: str) -> None:
    """Raise on inputs :func:`fit_many` cannot train, before anything is drawn or stacked."""
    C = len(data)
    if len(rngs) != C or np.shape(starts)[0] != C:
        raise ValueError(f"fit_many: {C} clients' data, {len(rngs)} generators, {np.shape(starts)[0]} start vectors")
    if epochs < 1 or batch_size < 1:
        raise ConfigError(f"epochs and batch_size must be >= 1; got epochs={epochs}, batch_size={batch_size}")
    if loss not in ("cross_entropy", "mse"):
        raise ValueError(f"fit_many: loss must be 'cross_entropy' or 'mse'; got {loss!r}")
    if optimizer not in ("sgd", "adam"):
        raise ConfigError(f"algorithm.params.optimizer: must be 'sgd' or 'adam'; got {optimizer!r}")
    if not can_batch(model):
        raise ValueError("fit_many: the model has buffers, dropout or batch normalisation; train it client by client")


def _fit_stacked(model: nn.Module, starts: np.ndarray, data: Sequence[tuple[np.ndarray, ...]],
                 rngs: Sequence[np.random.Generator], *, epochs: int, batch_size: int, lr: float, optimizer: str,
                 momentum: float, weight_decay: float, path: str, loss: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fit_many` for C >= 2 clients in one stacked batch (inputs checked by :func:`_check_inputs`)."""
    C = len(data)
    dev = next(model.parameters()).device
    n_params = sum(p.numel() for p in model.parameters())
    if np.ndim(starts) != 2 or np.shape(starts)[1] != n_params:
        raise ValueError(f"fit_many: the model has {n_params} parameters; "
                         f"got start vectors of shape {np.shape(starts)}")
    names = [name for name, _ in model.named_parameters()]
    sizes = [int(len(d[0])) for d in data]
    perms = [[rng.permutation(n) for _ in range(epochs)] if n else [] for rng, n in zip(rngs, sizes)]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    idx, mask, last = batch_schedule(sizes, perms, offsets, int(batch_size), int(offsets[-1]))
    explicit = _explicit_path(model, path)
    with torch_threads():
        X, Y = _stacked_rows(data, dev, loss)
        params = _stacked_params(model, starts, dev)
        schedule = tuple(torch.from_numpy(a).to(dev) for a in
                         (idx, mask.astype(np.float32), last.astype(np.float32), mask.any(axis=2)))
        step_fn = explicit_step(model, names, loss, patches_max=INPUT_PATCHES_MAX) if explicit \
            else vmap_step(model, loss)
        if explicit:
            X = step_fn.prepare(X)  # type: ignore[attr-defined]
        total = run_steps(model, step_fn, params, names, X, Y, schedule, lr=lr, optimizer=optimizer,
                           momentum=momentum, weight_decay=weight_decay)
        weights = torch.cat([params[name].reshape(C, -1) for name in names], dim=1)
        out_losses = np.where(np.array(sizes) > 0, total.to("cpu", torch.float64).numpy(), np.nan)
        return weights.detach().to("cpu", torch.float32).numpy(), out_losses


def _explicit_path(model: nn.Module, path: str) -> bool:
    """Whether the clients' gradients come from the written-out stacked forward (else from vmap)."""
    if path not in ("auto", "explicit", "vmap"):
        raise ValueError(f"fit_many: path must be 'auto', 'explicit' or 'vmap'; got {path!r}")
    known = flat_layers(model) is not None
    if path == "explicit" and not known:
        raise ValueError("fit_many: the network has layers the explicit stacked forward does not know; use path='vmap'")
    return known and path != "vmap"


def _stacked_rows(data: Sequence[tuple[np.ndarray, ...]], dev: torch.device,
                  loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """All clients' rows in one tensor (N + 1, *sample_shape), a zero row last (what padding indexes),
    and their targets (N + 1,): the labels, or with ``loss="mse"`` the rows themselves."""
    sample_shape = tuple(np.shape(data[0][0])[1:]) if len(data) else ()
    X = torch.cat([tensor(d[0], dev) for d in data] + [torch.zeros((1, *sample_shape), device=dev)])
    Y = X if loss == "mse" else torch.cat([tensor(d[1], dev).reshape(-1) for d in data]
                                          + [torch.zeros(1, dtype=torch.int64, device=dev)])
    return X, Y


def _stacked_params(model: nn.Module, starts: np.ndarray, dev: torch.device) -> dict[str, torch.Tensor]:
    """The clients' start weights (C, P) as stacked parameters ``{name: (C, *shape)}``, own memory each."""
    C = np.shape(starts)[0]
    flat = torch.from_numpy(np.array(starts, dtype=np.float32, copy=True)).to(dev)
    params, at = {}, 0
    for name, p in model.named_parameters():
        k = math.prod(p.shape)
        params[name] = flat[:, at:at + k].reshape(C, *p.shape).clone()
        at += k
    return params


__all__ = ["CPU_CHUNK", "CPU_CLIENT_LIMIT", "INPUT_PATCHES_MAX", "activation_size", "can_batch",
           "clients_per_chunk", "fit_many"]
