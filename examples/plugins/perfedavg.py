"""Per-FedAvg (Fallah, Mokhtari & Ozdaglar 2020), first-order variant (Per-FedAvg FO).

Each client i wants the model that is best *after one step of its own gradient
descent*: min_w F_i(w) = f_i(w - alpha grad f_i(w)) (eq. 3). The server averages
(FedAvg) what the sampled clients send after local training, where each local
step t (Algorithm 1, first-order approximation of eq. 8) uses two independent
mini-batches D_t, D'_t of size B:

    w_tmp = w - alpha grad f_i(w; D_t)
    w     = w - beta grad f_i(w_tmp; D'_t)          (beta = algorithm.params.lr)

A client takes as many steps as FedAvg's E epochs of mini-batches B make
(tau = E * ceil(n_i / B)): D'_t runs through E epochs of the client's rows, D_t
through another E epochs in an independent order (two gradients a step).
Evaluation is personalised: a client takes ``personal_steps`` full-batch gradient
steps of size alpha on its training rows from the model it received, scores that
model on its test rows and reloads the received one (the FLACC paper's Table I
reports this personalised accuracy). Written only against the public supervised
base: it overrides ``client_train`` and ``client_evaluate``; the rounds are FedAvg's.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field

import fedray
from fedray.supervised import ClientContext


class PerFedAvgParams(fedray.SupervisedParams):
    alpha: float = Field(default=0.01, gt=0.0, description="step size alpha of the one-step adaptation (eq. 3)")
    personal_steps: int = Field(default=1, ge=0, description="adaptation steps at evaluation (paper: 1)")


def gradients(cls: type, model: Any, xb: Any, yb: Any, ctx: ClientContext) -> tuple[list[Any], float]:
    """Gradients of the client loss on one batch at the current weights, and the loss."""
    import torch

    loss = cls.client_loss(model, model(xb), yb, ctx)
    return list(torch.autograd.grad(loss, list(model.parameters()))), float(loss.detach())


class PerFedAvg(fedray.SupervisedAlgorithm):
    name = "perfedavg"
    Params = PerFedAvgParams
    description = "Per-FedAvg (FO): personalised FL by one-step adaptation (Fallah et al. 2020)"

    def validate(self) -> None:
        super().validate()
        if self.params.optimizer != "sgd":
            raise fedray.ConfigError(f"algorithm.params.optimizer: {self.name!r} takes plain gradient steps "
                                     f"(alpha, then beta = lr); got {self.params.optimizer!r}, use 'sgd'")

    def client_payload(self) -> dict[str, Any]:
        return {"alpha": self.params.alpha, "personal_steps": self.params.personal_steps}

    @classmethod
    def client_train(cls, model: Any, ctx: ClientContext) -> dict[str, Any]:
        import torch

        alpha, beta = ctx.payload["alpha"], ctx.train_cfg["lr"]
        params, losses = list(model.parameters()), []
        model.train()
        # D_t and D'_t: two passes of E epochs in independent orders from the client's seeded rng
        for (x1, y1), (x2, y2) in zip(ctx.batches(), ctx.batches()):
            w = [p.detach().clone() for p in params]
            g, _ = gradients(cls, model, x1, y1, ctx)
            with torch.no_grad():  # w_tmp = w - alpha grad f(w; D)
                for p, gi in zip(params, g):
                    p.sub_(alpha * gi)
            g, loss = gradients(cls, model, x2, y2, ctx)
            with torch.no_grad():  # w = w - beta grad f(w_tmp; D')
                for p, wi, gi in zip(params, w, g):
                    p.copy_(wi - beta * gi)
            losses.append(loss)
        model.eval()
        return {"train_loss": sum(losses) / len(losses) if losses else float("nan"),  # mean over the steps
                "weights": ctx.weights(model)}

    @classmethod
    def client_evaluate(cls, model: Any, ctx: ClientContext) -> dict[str, float]:
        import torch

        X, y = ctx.train_tensors(next(model.parameters()).device)
        for _ in range(ctx.payload["personal_steps"] if len(y) else 0):
            g, _ = gradients(cls, model, X, y, ctx)
            with torch.no_grad():
                for p, gi in zip(model.parameters(), g):
                    p.sub_(ctx.payload["alpha"] * gi)
        out = super().client_evaluate(model, ctx)
        ctx.load(model)  # training (if any) starts from the received model
        return out
