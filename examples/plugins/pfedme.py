"""pFedMe (Dinh, Tran & Nguyen, NeurIPS 2020): personalised FL with Moreau envelopes.

Each client i keeps a personalised model theta_i near the global model w. The
problem is bi-level (eq. 2): min_w 1/N sum_i F_i(w), where F_i, the Moreau envelope
of f_i, is F_i(w) = min_theta f_i(theta) + lam/2 ||theta - w||^2, and
theta_i(w) = argmin of that (eq. 3) is the personalised model. Algorithm 1, with
f_i on one mini-batch D of the client's rows per local round r = 0..R-1:

    theta <- theta - personal_lr (grad f_i(theta; D) + lam (theta - w_r))   K times (inner_steps)
    w_{r+1} = w_r - eta lam (w_r - theta)                                    (eta = algorithm.params.lr)

theta starts each round from the received w and is carried over between local
rounds (warm start, as in the authors' code). The server takes
w <- (1 - beta) w + beta avg_i w_{i,R} (n_i-weighted average; beta = 1 is FedAvg's).

Mapping to fedray: one local round per mini-batch of ``ctx.batches()``, so R =
E * ceil(n_i / B) as FedAvg's E epochs of batches B make (K gradients each). The
client keeps its last theta_i in ``ctx.state`` and ``client_evaluate`` scores it
(the paper evaluates the personalised models); a client that has not trained yet
in this run has no theta_i and scores the received global model. Randomness:
only ``ctx.rng`` (through ``ctx.batches()``), so ``local`` and ``ray`` agree bit for bit.
"""
from __future__ import annotations

import secrets
from typing import Any

import numpy as np
from pydantic import Field

import fedray
from fedray.supervised import ClientContext

KEY = "pfedme_theta"  # ctx.state[KEY] = (run token, theta_i (P,) float32)


class PFedMeParams(fedray.SupervisedParams):
    lam: float = Field(default=15.0, gt=0.0, description="regularisation lambda of the Moreau envelope (eq. 2)")
    beta: float = Field(default=1.0, gt=0.0, description="global update weight beta (Algorithm 1; 1 = averaging)")
    inner_steps: int = Field(default=5, ge=1, description="K gradient steps solving for theta_i per local round")
    personal_lr: float = Field(default=0.09, gt=0.0, description="step size of the K inner steps; they are stable "
                               "while personal_lr * (L + lam) < 2, L the loss's curvature: with lam = 15 on a CNN "
                               "take 0.01-0.03")


class PFedMe(fedray.SupervisedAlgorithm):
    name = "pfedme"
    Params = PFedMeParams
    description = "pFedMe: personalised FL with Moreau envelopes (Dinh et al. 2020)"

    def __init__(self, params: PFedMeParams, info: fedray.FederationInfo, seed: int) -> None:
        super().__init__(params, info, seed)
        self.token = secrets.token_hex(8)  # names this run's theta_i in client state (sessions reuse clients)

    def validate(self) -> None:
        super().validate()
        p = self.params
        if p.optimizer != "sgd":
            raise fedray.ConfigError(f"algorithm.params.optimizer: {self.name!r} takes plain gradient steps; "
                                     f"got {p.optimizer!r}, use 'sgd'")
        for key, step in (("personal_lr", p.personal_lr), ("lr", p.lr)):
            if step * p.lam >= 2:  # the lam-smooth proximal term alone makes these steps diverge
                raise fedray.ConfigError(f"algorithm.params.{key}: {key} * lam must be below 2 for the steps to "
                                         f"converge; got {step:g} * {p.lam:g} = {step * p.lam:g}")

    def client_payload(self) -> dict[str, Any]:
        p = self.params
        return {"lam": p.lam, "inner_steps": p.inner_steps, "personal_lr": p.personal_lr, "keep": self.token}

    def aggregate(self, ctx: fedray.RoundContext, replies: list[fedray.Reply]) -> dict[str, float]:
        w = np.asarray(self.models[0], dtype=np.float64)
        if self.average_into(replies):  # models[0] = n-weighted average of the w_{i,R}
            avg = np.asarray(self.models[0], dtype=np.float64)
            self.models[0] = ((1 - self.params.beta) * w + self.params.beta * avg).astype(np.float32)
        self.rounds_done += 1
        return self.round_metrics(ctx, replies)

    @classmethod
    def client_train(cls, model: Any, ctx: ClientContext) -> dict[str, Any]:
        import torch

        lam, K, plr, eta = (ctx.payload["lam"], ctx.payload["inner_steps"], ctx.payload["personal_lr"],
                            ctx.train_cfg["lr"])
        theta = list(model.parameters())  # the model holds theta; it starts at the received w
        w = [p.detach().clone() for p in theta]
        losses = []
        model.train()
        for xb, yb in ctx.batches():  # one local round per mini-batch
            for _ in range(K):  # theta ~ argmin f_i(theta; D) + lam/2 ||theta - w||^2
                loss = cls.client_loss(model, model(xb), yb, ctx)
                grads = torch.autograd.grad(loss, theta)
                with torch.no_grad():
                    for t, g, wi in zip(theta, grads, w):
                        t.sub_(plr * (g + lam * (t - wi)))
            with torch.no_grad():  # w <- w - eta lam (w - theta)
                for wi, t in zip(w, theta):
                    wi.sub_(eta * lam * (wi - t))
            losses.append(float(loss.detach()))
        model.eval()
        ctx.state[KEY] = (ctx.payload["keep"], ctx.weights(model))
        with torch.no_grad():
            for t, wi in zip(theta, w):
                t.copy_(wi)
        return {"train_loss": float(np.mean(losses)) if losses else float("nan"),  # f_i(theta; D), last inner step
                "weights": ctx.weights(model)}

    @classmethod
    def client_evaluate(cls, model: Any, ctx: ClientContext) -> dict[str, float]:
        kept = ctx.state.get(KEY)
        if kept is None or kept[0] != ctx.payload["keep"]:  # not trained yet in this run: no theta_i
            return super().client_evaluate(model, ctx)
        ctx.load(model, kept[1])
        out = super().client_evaluate(model, ctx)
        ctx.load(model)  # training (if any) starts from the received w
        return out
