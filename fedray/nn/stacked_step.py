"""The steps of batched training: every client's gradient in one pass, and the optimizer steps.

This module holds what :func:`fedray.nn.batched.fit_many` runs at each step: the gradient
and loss of every stacked client, from one explicit forward of the stacked networks
(:func:`explicit_step`, on :func:`fedray.nn.stacked.stacked_forward`) or from
``vmap(grad_and_value(functional_call))`` (:func:`vmap_step`); the loop over the steps
(:func:`run_steps`); and the clients' parameter updates, SGD with momentum and weight
decay as ``torch.optim.SGD`` or Adam as ``torch.optim.Adam``, masked for a client whose
steps are done (:func:`_optimizer_step`, :func:`_adam`).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional as F

from fedray.nn.stacked import flat_layers, input_conv, input_patches, stacked_forward

#: What a step function returns: each client's gradients by parameter name (C, *shape), and losses (C,).
StepFn = Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]]


def vmap_step(model: nn.Module, loss: str = "cross_entropy") -> StepFn:
    """Every client's gradient and loss by ``vmap(grad_and_value(functional_call))`` (any batchable network)."""

    def loss_one(p: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor, mb: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xb,))
        rows = F.cross_entropy(out, yb, reduction="none") if loss == "cross_entropy" \
            else (out - yb).pow(2).reshape(out.shape[0], -1).mean(1)
        return (rows * mb).sum() / mb.sum().clamp_min(1.0)

    return vmap(grad_and_value(loss_one))


def explicit_step(model: nn.Module, names: list[str], loss: str = "cross_entropy", *,
                  patches_max: int) -> StepFn:
    """Every client's gradient and loss from one explicit forward of the stacked networks (no vmap):
    the sum of the clients' losses has, for each client's parameters, that client's gradient.
    ``step.prepare(X)`` gives the rows the steps gather from: the input convolution's patches when
    they take at most ``patches_max`` values (:data:`fedray.nn.batched.INPUT_PATCHES_MAX`)."""
    layers = flat_layers(model)
    if layers is None:  # callers choose this path only for models flat_layers can write out
        raise RuntimeError(f"no explicit stacked forward for {type(model).__name__}")
    conv_at = input_conv(layers)
    start = 0  # set by prepare: the rows are the input convolution's patches

    def prepare(X: torch.Tensor) -> torch.Tensor:
        """The rows the steps gather from: ``X``, or its patches for the input convolution when
        they fit in ``patches_max`` values."""
        nonlocal start
        start = 0
        if conv_at and len(X) and len(X) * input_patches(layers, conv_at, X[:1]).numel() <= patches_max:
            start = conv_at
            return input_patches(layers, conv_at, X)
        return X

    def step(params: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor,
             mb: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        with torch.enable_grad():
            out = stacked_forward(layers, leaves, xb, start)
            C, B = out.shape[:2]
            if loss == "cross_entropy":
                rows = F.cross_entropy(out.reshape(C * B, -1), yb.reshape(-1), reduction="none").reshape(C, B)
            else:
                rows = (out - yb).pow(2).reshape(C, B, -1).mean(2)
            value = (rows * mb).sum(1) / mb.sum(1).clamp_min(1.0)
            grads = torch.autograd.grad(value.sum(), [leaves[k] for k in names])
        return dict(zip(names, grads)), value.detach()

    step.prepare = prepare  # type: ignore[attr-defined]
    return step


def run_steps(model: nn.Module, step_fn: StepFn, params: dict[str, torch.Tensor], names: list[str],
               X: torch.Tensor, Y: torch.Tensor, schedule: tuple[torch.Tensor, ...], *, lr: float,
               optimizer: str, momentum: float, weight_decay: float) -> torch.Tensor:
    """Take every step of the schedule, updating ``params`` in place; each client's last-epoch mean loss (C,).

    ``schedule`` is ``(idx, mask, last, live)``: the rows of each client's batch at each step
    (C, T, B) into ``X`` and ``Y``, their mask (C, T, B), the weight of each step's loss in the
    last epoch's mean (C, T), and whether the client takes the step (C, T).
    """
    idx_t, mask_t, last_t, live_t = schedule
    state: dict[str, list[torch.Tensor]] = {}
    plain = optimizer == "sgd" and not momentum and not weight_decay
    total = torch.zeros(idx_t.shape[0], device=idx_t.device)
    was_training = model.training
    model.train()
    try:
        for t in range(idx_t.shape[1]):
            rows = idx_t[:, t]
            grads, step_loss = step_fn(params, X[rows], Y[rows], mask_t[:, t])
            total += step_loss.detach() * last_t[:, t]
            if plain:
                # a client without rows in step t has a zero loss, so zero gradients: p - lr * 0 = p
                torch._foreach_add_([params[name] for name in names], [grads[name] for name in names],
                                    alpha=-lr)
                continue
            _optimizer_step(params, grads, names, state, live_t[:, t], t, lr=lr, optimizer=optimizer,
                            momentum=momentum, weight_decay=weight_decay)
    finally:
        model.train(was_training)
    return total


def _optimizer_step(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], names: list[str],
                    state: dict[str, list[torch.Tensor]], live: torch.Tensor, t: int, *, lr: float,
                    optimizer: str, momentum: float, weight_decay: float) -> None:
    """Step ``t`` of SGD (momentum, weight decay as ``torch.optim.SGD``) or Adam on the stacked
    parameters, in ``params``; a client that does not take the step (``live`` (C,) false) keeps its values."""
    C = live.shape[0]
    for name in names:
        p, g = params[name], grads[name]
        if weight_decay:
            g = g.add(p, alpha=weight_decay)
        if optimizer == "sgd":
            if momentum:
                if t == 0:
                    state[name] = [g.clone()]
                else:
                    state[name][0].mul_(momentum).add_(g)
                g = state[name][0]
            upd = p.add(g, alpha=-lr)
        else:
            moments = state.setdefault(name, [torch.zeros_like(p), torch.zeros_like(p)])
            upd = _adam(p, g, moments, t + 1, lr)
        params[name] = torch.where(live.view(C, *([1] * (p.dim() - 1))), upd, p)


def _adam(p: torch.Tensor, g: torch.Tensor, st: list[torch.Tensor], step: int, lr: float,
          betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> torch.Tensor:
    """One step of ``torch.optim.Adam`` (defaults, no amsgrad) on stacked parameters; the new values."""
    m, v = st
    m.lerp_(g, 1 - betas[0])
    v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
    bc1 = 1 - betas[0] ** step
    bc2_sqrt = math.sqrt(1 - betas[1] ** step)
    denom = (v.sqrt() / bc2_sqrt).add_(eps)
    return p.addcdiv(m, denom, value=-lr / bc1)
