"""FedProx (Li et al. 2020, eq. 2): FedAvg whose clients minimise F_k(w) + mu/2 ||w - w^t||^2,
w^t the global model they received. mu = 0 is FedAvg's per-client loop (runtime.batched: false) bit for bit.
Run: fedray run --set algorithm.name=examples.plugins.fedprox:FedProx --set algorithm.params.mu=0.1
"""
from __future__ import annotations

from typing import Any

from pydantic import Field

import fedray
from fedray.supervised import ClientContext


class FedProxParams(fedray.SupervisedParams):
    mu: float = Field(default=0.01, ge=0.0, description="proximal weight mu (eq. 2)")


class FedProx(fedray.SupervisedAlgorithm):  # rounds: the base's FedAvg
    name = "fedprox"
    Params = FedProxParams
    description = "FedProx: FedAvg with a proximal term in the client loss (Li et al. 2020)"

    def client_payload(self) -> dict[str, Any]:
        return {"mu": self.params.mu}

    @classmethod
    def client_loss(cls, model: Any, outputs: Any, targets: Any, ctx: ClientContext) -> Any:
        prox = sum(((w - w0) ** 2).sum() for w, w0 in zip(model.parameters(), ctx.start_tensors(model)))
        return super().client_loss(model, outputs, targets, ctx) + ctx.payload["mu"] / 2 * prox
