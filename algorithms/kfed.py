"""k-FED: one-shot federated k-means (Dennis, Li & Smith, "Heterogeneity for the win", ICML 2021).

In the single round every client runs k-means (k-means++ seeding and Lloyd) with
k' = ``local_clusters`` clusters on its own shard and sends its k' local centres
(with their sizes). The server runs k-means with k = ``n_clusters`` clusters on the
P·k' local centres; the resulting centres are the model. Dennis et al. cluster the
local centres unweighted (``weighted=False``); ``weighted=True`` weights every local
centre by the number of points it represents. A client with fewer distinct points
than k' sends as many centres as it has distinct points.

The same server step is the "k-means averaging" of FedFCM (Stallmann & Wilbik
2022, eq. 14) and the ``init="kfed"`` start of the other centre-based methods.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from fedray.core.centers import CenterAlgorithm, local_centers
from fedray.core.contract import (
    Algorithm,
    FederationInfo,
    Params,
    Reply,
    RoundContext,
    Task,
)
from fedray.core.errors import ConfigError, DataError
from fedray.core.local_start import gathered, n_distinct
from fedray.core.ops import kmeans
from fedray.core.registry import register


class KFedParams(Params):
    """Hyperparameters of k-FED."""

    n_clusters: int = Field(default=3, ge=1, description="k, the number of global clusters")
    local_clusters: int | None = Field(default=None, ge=1,
                                       description="k', the clusters of each client's local k-means (None: k)")
    weighted: bool = Field(default=False, description="weight local centres by their sizes on the server")
    n_init: int = Field(default=10, ge=1, description="k-means++ restarts of the server clustering")


@register
class KFed(CenterAlgorithm):
    """One-shot k-FED (one round: local k-means, server k-means over the local centres)."""

    name = "kfed"
    Params = KFedParams
    description = (
        "one-shot k-FED: local k-means with k' clusters, server k-means over local centres (Dennis et al. 2021)"
    )

    def __init__(self, params: KFedParams, info: FederationInfo, seed: int) -> None:
        Algorithm.__init__(self, params, info, seed)
        self.centers: np.ndarray | None = None
        self.initial_centers: np.ndarray | None = None
        self.rounds_done = 0
        self.converged = False
        self.n_local_centers = 0
        self.phase = "train"

    @property
    def k_local(self) -> int:
        return int(self.params.local_clusters or self.params.n_clusters)

    def validate(self) -> None:
        k, n = self.params.n_clusters, self.info.total_samples
        if k > n:
            raise DataError(f"algorithm.params.n_clusters: n_samples={n} should be >= n_clusters={k}")
        possible = self.k_local * self.info.n_clients
        if k > possible:
            raise ConfigError(
                f"algorithm.params.local_clusters: {self.info.n_clients} clients x local_clusters={self.k_local} "
                f"give at most {possible} local centres, fewer than n_clusters={k}")

    def round_budget(self) -> int | None:
        return 1  # one shot

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        if self.rounds_done >= 1:
            return None
        task = Task(local_centers, {"k": self.k_local})
        return ctx.each(task)

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        C, w = gathered(replies)
        if not len(C):
            raise DataError("kfed: no client returned local centres")
        k = self.params.n_clusters
        distinct = n_distinct(C, k)
        if distinct < k:
            raise DataError(f"kfed: only {distinct} distinct local centres for n_clusters={k}; "
                            "raise algorithm.params.local_clusters or lower n_clusters")
        self.centers = kmeans(C, k, ctx.rng(1), n_init=self.params.n_init,
                              weights=w if self.params.weighted else None)
        self.n_local_centers = int(C.shape[0])
        self.rounds_done = 1
        self.converged = True
        objective = float(np.sum(np.min(((C[:, None, :] - self.centers[None]) ** 2).sum(-1), axis=1)))
        return {"local_centers": float(C.shape[0]), "objective": objective}

    def result(self) -> dict[str, Any]:
        return {"centers": self.centers}
