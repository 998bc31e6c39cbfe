"""Federated k-medians: a plug-in written only against fedray's public contract.

Each centre is the geometric (spatial) median of its cluster: the point that
minimises the sum of Euclidean distances to the cluster's points, which is less
pulled by outliers than the mean. One round is one Weiszfeld step for every
cluster, over the points nearest to it on the sampled clients:

    c_k <- sum_i w_i x_i / sum_i w_i,   w_i = 1 / max(||x_i - c_k||, eps).

Clients send only the per-cluster sums ``sum_i w_i x_i`` (k, d) and ``sum_i w_i``
(k,) as a :class:`fedray.Stats`, so the server aggregates by adding them, and
secure aggregation and differential privacy apply unchanged. With every client
taking part a round is exactly one step on the union (``central`` below, which
``evaluation.central_baseline`` compares with). The k-FED start, evaluation
(ARI, NMI, accuracy, Davies-Bouldin) and ``predict`` come from
:class:`fedray.CenterAlgorithm`.

Run it from the repository root::

    fedray run --set algorithm.name=examples.plugins.kmedians:FederatedKMedians \\
               --set algorithm.params.n_clusters=3 --set evaluation.central_baseline=true
"""
from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

import fedray


class KMediansParams(fedray.CenterParams):
    tol: float = Field(default=1e-6, gt=0, description="stop when the centres move less than tol (Frobenius norm)")
    eps: float = Field(default=1e-9, gt=0, description="floor of a point's distance in the Weiszfeld weights")


def weiszfeld_sums(X: np.ndarray, centers: np.ndarray, eps: float) -> dict[str, np.ndarray]:
    """Per-cluster Weiszfeld sums of the rows of ``X`` (n, d) for ``centers`` (k, d)."""
    dist = np.linalg.norm(X[:, None, :] - centers[None, :, :], axis=2)  # (n, k)
    labels = dist.argmin(axis=1)
    d = dist[np.arange(X.shape[0]), labels]
    w = 1.0 / np.maximum(d, eps)
    wx = np.zeros_like(centers)
    np.add.at(wx, labels, w[:, None] * X)
    return {"wx": wx, "w": np.bincount(labels, weights=w, minlength=centers.shape[0]), "dist": np.array(d.sum())}


def client_weiszfeld(payload: dict[str, float], centers: np.ndarray, client: Any) -> fedray.Stats:
    """Client function: the sums for the client's own shard."""
    return fedray.Stats(**weiszfeld_sums(client.data.X, centers, payload["eps"]))


def weiszfeld_step(centers: np.ndarray, wx: np.ndarray, w: np.ndarray) -> np.ndarray:
    """New centres from summed statistics; a cluster with no point keeps its centre."""
    new = centers.copy()
    nz = w > 0
    new[nz] = wx[nz] / w[nz, None]
    return new


class FederatedKMedians(fedray.CenterAlgorithm):
    """Federated k-medians by Weiszfeld steps on summed statistics."""

    name = "kmedians"
    Params = KMediansParams
    description = "federated k-medians (geometric medians, one Weiszfeld step a round)"

    def round_task(self) -> fedray.Task:
        return fedray.Task(client_weiszfeld, {"eps": self.params.eps}, self.centers)

    def update(self, ctx: fedray.RoundContext, replies: list[fedray.Reply]) -> dict[str, float]:
        t = fedray.total(r.update for r in replies)
        new = weiszfeld_step(self.centers, t["wx"], t["w"])
        shift = float(np.linalg.norm(new - self.centers))
        self.centers, self.rounds_done = new, self.rounds_done + 1
        self.converged = shift <= self.params.tol
        return {"center_shift": shift, "objective": float(t["dist"]), "empty_clusters": float((t["w"] == 0).sum())}

    @staticmethod
    def central(X: np.ndarray, start: np.ndarray, params: KMediansParams, rounds: int) -> np.ndarray:
        """The same iteration on the pooled rows ``X`` from ``start``, for at most ``rounds`` steps."""
        C = np.asarray(start, dtype=np.float64)
        for _ in range(rounds):
            s = weiszfeld_sums(X, C, params.eps)
            new = weiszfeld_step(C, s["wx"], s["w"])
            done = np.linalg.norm(new - C) <= params.tol
            C = new
            if done:
                break
        return C
