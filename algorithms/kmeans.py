"""Exact federated k-means (federated Lloyd).

Each round every sampled client assigns its points to the nearest current
centre and sends, per cluster, the sum of its points and their count (a
:class:`~fedray.core.stats.Stats`); the server sets each centre to
sum(sums) / sum(counts). With every client taking part, a round is exactly one
Lloyd step on the union of the shards. An empty cluster keeps its centre and
raises :class:`~fedray.core.errors.EmptyClusterWarning`; under differential privacy a
cluster whose noisy count is below one half counts as empty, and a round in which
every cluster looks empty does not stop the run as "converged".
"""
from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from fedray.core.centers import CenterAlgorithm, CenterParams
from fedray.core.contract import Reply, RoundContext, Task, batched
from fedray.core.kernels import lloyd_stats as lloyd_kernel
from fedray.core.ops import lloyd, warn_empty
from fedray.core.registry import register
from fedray.core.stats import Stats, StatsBlock, total


class KMeansParams(CenterParams):
    tol: float = Field(default=1e-6, gt=0, description="stop when ‖C_t − C_{t−1}‖_F ≤ tol")
    settle_window: int = Field(default=5, ge=0, description="W: with federation.fraction < 1, stop when the mean "
                               "centre shift of the last W rounds no longer falls and average their centres "
                               "(fedray.core.settle); 0: only tol (never used at fraction 1)")


def lloyd_stats_many(payloads: list[Any], centers: np.ndarray, batch: Any) -> StatsBlock:
    """:func:`lloyd_stats` for all of a host's clients in one fused pass over their rows.

    Every client is a segment of the host's block (``batch.offsets``); its sums add its
    rows in order, as :func:`lloyd_stats` does, so the bits are the same. The result is
    one column-wise block (row ``i`` = client ``i``): no per-client object is built.
    """
    sums, counts, sse = lloyd_kernel(batch.X, centers, batch.offsets)
    return StatsBlock(sums=sums, counts=counts, sse=sse)


@batched(lloyd_stats_many)
def lloyd_stats(payload: Any, centers: np.ndarray, client: Any) -> Stats:
    """Per-cluster sums (k, d), counts (k,) and the sum of squared distances for ``centers``
    (one fused pass over the shard, :func:`fedray.core.kernels.lloyd_stats`)."""
    sums, counts, sse = lloyd_kernel(client.data.X, centers)
    return Stats(sums=sums[0], counts=counts[0], sse=sse[0])


@register
class FederatedKMeans(CenterAlgorithm):
    """Federated Lloyd k-means (exact)."""

    name = "kmeans"
    Params = KMeansParams
    description = "exact federated Lloyd k-means (per-cluster sums and counts)"

    def round_task(self) -> Task:
        return Task(lloyd_stats, None, self.centers, summed=True)  # update reads total(replies) only

    def update(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        t = total(replies)
        counts = t["counts"]
        new = self.centers.copy()
        # At least half a point: exact counts are integers, so this is "non-empty"; noisy
        # (differentially private) counts near zero do not move a centre to noise / noise.
        nz = counts >= 0.5
        new[nz] = t["sums"][nz] / counts[nz, None]
        warn_empty(~nz, ctx.round, seen=self._warned)
        shift = float(np.linalg.norm(new - self.centers))
        self.centers = new
        self.rounds_done += 1
        # A round that moved no centre because every cluster looked empty is no convergence.
        self.converged = shift <= self.params.tol and bool(nz.any())
        return {"center_shift": shift, "objective": float(t["sse"]), "empty_clusters": float((~nz).sum())}

    @staticmethod
    def central(X: np.ndarray, C0: np.ndarray, params: KMeansParams, rounds: int) -> np.ndarray:
        """The central algorithm on the union from the same start (for baselines)."""

        return lloyd(X, C0, max_iter=rounds, tol=params.tol ** 2)[0]
