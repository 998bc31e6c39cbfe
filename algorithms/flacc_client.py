"""The client side of FLACC's gradient similarity (``similarity: gradients``; Mehta & Shao 2023, eq. 8, Table VI).

In the merging phase with ``similarity: gradients`` a sampled client trains as always and also
sends the gradient of its empirical risk (eq. 1) at the model it received,
grad F_i(theta^(t)) = (1/n_i) sum_l grad l(theta^(t); x_i^l, y_i^l), over all its training
rows: the quantity of eq. (8), where the paper's default (eq. 19) compares the weight updates
Delta theta_i instead. The loss is the algorithm's ``client_loss`` (cross-entropy for FLACC), so
the gradient is that of the objective the client's local training minimises. Computing it draws
nothing from the client's generator, so the training, and the weights sent, are those of
``similarity: updates``. torch is imported only when a client runs.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedray.core.contract import batched
from fedray.nn.split import client_split
from fedray.nn.supervised_client import ClientContext, client_round, client_round_many

#: rows a forward pass of the gradient takes at once (the gradient of the mean does not depend on it)
GRADIENT_CHUNK = 256


def risk_gradient(algorithm: Any, model: Any, ctx: ClientContext) -> np.ndarray:
    """grad F_i at the weights loaded in ``model``: the mean of ``algorithm.client_loss`` over all of the
    client's training rows, differentiated; a float32 vector (P,) in the order of ``ctx.weights``."""
    import torch

    X, y = ctx.train_tensors()
    n = int(y.shape[0])
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    model.train()
    for s in range(0, n, GRADIENT_CHUNK):
        xb, yb = X[s:s + GRADIENT_CHUNK], y[s:s + GRADIENT_CHUNK]
        loss = algorithm.client_loss(model, model(xb), yb, ctx) * (int(yb.shape[0]) / n)
        for t, g in zip(total, torch.autograd.grad(loss, params)):
            t += g
    with torch.no_grad():
        flat = torch.cat([t.reshape(-1) for t in total]) if n else torch.zeros(sum(p.numel() for p in params))
    return flat.detach().to("cpu", torch.float32).numpy().copy()


def _gradient_at_start(payload: Mapping[str, Any], shared: Any, client: Any) -> np.ndarray:
    """The client's risk gradient at the model it starts from (the one :func:`client_round` trains)."""
    from fedray.nn.train import model_for, torch_threads

    algorithm = payload["algorithm"]
    split = client_split(client, float(payload.get("test_fraction", 0.15)))
    model = model_for(payload["spec"], payload.get("device", "auto"))
    ctx = ClientContext(client, payload, split)
    with torch_threads():
        ctx.start = algorithm.choose_model(model, shared, ctx)
        ctx.load(model)
        return risk_gradient(algorithm, model, ctx)


def client_round_gradient_many(payloads: list[Mapping[str, Any]], shared: list[Any],
                               batch: Any) -> list[dict[str, Any]]:
    """The batched form of :func:`client_round_gradient`: :func:`client_round_many`, then each trained
    client's gradient."""
    outs = client_round_many(payloads, shared, batch)
    for i, (payload, client) in enumerate(zip(payloads, batch.clients)):
        if payload.get("train"):
            outs[i]["gradient"] = _gradient_at_start(payload, shared[i], client)
    return outs


@batched(client_round_gradient_many, shared="each", split=False)
def client_round_gradient(payload: Mapping[str, Any], shared: Any, client: Any) -> dict[str, Any]:
    """:func:`client_round` (choose, evaluate, train), and for a training task also ``gradient``:
    float32 (P,), the gradient of the client's empirical risk at the model it received (eq. 8)."""
    out = client_round(payload, shared, client)
    if payload.get("train"):
        out["gradient"] = _gradient_at_start(payload, shared, client)
    return out


__all__ = ["client_round_gradient", "risk_gradient"]
