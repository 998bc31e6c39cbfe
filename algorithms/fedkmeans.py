"""Federated K-means (Triebe & Rajagopal, 2019, Algorithm 1).

Every sampled client runs ``epochs`` (E) epochs of mini-batch k-means on its
shard, starting from the global centroids Γ_{t-1}. In an epoch the cluster sizes
Λ start at zero; for each mini-batch b (size ``batch_size`` = B, ``None`` = the
whole shard, the paper's B = ∞) the client assigns the batch's points to the
nearest centroid, computes the batch means Γ^b and sizes Λ^b and moves

    Λ ← Λ + Λ^b,      Γ ← Γ + β · (Λ^b / Λ) · (Γ^b − Γ)            (client rate β)

It returns the sizes of its last epoch Λ^(i) and its centroids Γ^(i), sent as the
summed statistics Λ^(i) and Λ^(i)·Γ^(i). The server forms the count-weighted mean
Γ*_t = Σ_i Λ^(i) Γ^(i) / Σ_i Λ^(i) and updates

    Γ_t = Γ_{t-1} + α · (Γ*_t − Γ_{t-1})                            (server rate α)

With ``momentum`` μ > 0 (the authors' code uses 0.5) the step is
v_t = μ v_{t-1} + (1 − μ) α (Γ*_t − Γ_{t-1}), Γ_t = Γ_{t-1} + v_t.
A cluster that held less than ``reassign_min`` (1 %) of all points, 0.01 · Σ_i |P_i|
over every client (the paper's rule; ``reassign_of="round"``: of the points the
round's sampled clients hold), for ``reassign_after`` (20) consecutive rounds is
re-initialised uniformly in the federated bounding box (from the server's seeded
stream). A cluster that no
sampled client's points reach in a round keeps its centroid; with non-IID clients
and partial participation that is the normal case, so it is counted in the
``empty_clusters`` metric rather than warned about.

With α = β = 1, E = 1, B = ∞ and every client taking part one round is exactly one
Lloyd step on the union (the ``kmeans`` algorithm), up to rounding.
"""
from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedray.core.centers import CenterAlgorithm, CenterParams
from fedray.core.contract import FederationInfo, Reply, RoundContext, Task, batched
from fedray.core.ops import assign, cluster_sums, lloyd
from fedray.core.registry import register
from fedray.core.stats import Stats, StatsBlock, total


class FedKMeansParams(CenterParams):
    """Hyperparameters of Federated K-means (names of Algorithm 1 in brackets)."""

    alpha: float = Field(default=1.0, gt=0.0, le=2.0, description="α, the server learning rate")
    beta: float = Field(default=1.0, gt=0.0, le=1.0, description="β, the client learning rate")
    epochs: int = Field(default=1, ge=1, description="E, local epochs per round")
    batch_size: int | None = Field(default=None, ge=1, description="B, the mini-batch size; None = full batch (B = ∞)")
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0, description="μ, server momentum (0 = none, as in the paper)")
    reassign_min: float = Field(default=0.01, ge=0.0, lt=1.0,
                                description="share of the points under which a cluster counts as too small")
    reassign_of: Literal["all", "round"] = Field(
        default="all", description="the points reassign_min is a share of: 'all' of the federation (the paper: "
        "0.01 * sum_i |P_i|) or those of the round's sampled clients")
    reassign_after: int = Field(default=20, ge=1, description="consecutive small rounds before re-initialisation")
    tol: float = Field(default=0.0, ge=0.0, description="stop when ‖Γ_t − Γ_{t−1}‖_F ≤ tol (0: run max_rounds)")
    max_rounds: int = Field(default=200, ge=1, description="T, the number of global rounds")


def client_minibatch_kmeans_many(payloads: list[dict[str, Any]], centers: np.ndarray, batch: Any) -> StatsBlock:
    """:func:`client_minibatch_kmeans` for all of a host's clients at once, where a client's
    work is one full-batch step (E = 1 and B = None or at least every shard): one assignment
    to Γ_{t-1}, per-client sums in row order, the same step arithmetic element by element
    (the same bits). Other settings run client by client."""
    payload = payloads[0]
    if any(p != payload for p in payloads):
        raise ValueError("clients with different payloads")
    B = payload["batch_size"]
    sizes = batch.sizes
    if int(payload["epochs"]) != 1 or (B is not None and bool((sizes > B).any())):
        raise ValueError("mini-batches or several epochs: client by client")
    X, owner, n = batch.X, batch.owner, len(batch)
    k = centers.shape[0]
    beta = float(payload["beta"])
    labels, d2 = assign(X, centers)
    cell = owner * k + labels
    lam = np.bincount(cell, minlength=n * k).astype(np.float64).reshape(n, k)
    sums = cluster_sums(X, cell, n * k).reshape(n, k, -1)
    C = np.broadcast_to(centers, sums.shape).copy()
    nz = lam > 0
    mean_b = sums[nz] / lam[nz][:, None]
    # As in the plain function with Λ = Λ^b (one batch per epoch): Γ + β · (Λ^b / Λ) · (Γ^b − Γ).
    C[nz] = C[nz] + beta * (lam[nz] / lam[nz])[:, None] * (mean_b - C[nz])
    return StatsBlock(counts=lam, weighted=lam[:, :, None] * C, sse=np.bincount(owner, weights=d2, minlength=n))


@batched(client_minibatch_kmeans_many)
def client_minibatch_kmeans(payload: dict[str, Any], centers: np.ndarray, client: Any) -> Stats:
    """ClientKMeans of Algorithm 1.

    Parameters
    ----------
    payload : dict
        ``beta``, ``epochs``, ``batch_size`` (None = full batch).
    centers : ndarray of shape (k, d)
        Global centroids Γ_{t-1}.
    client : Client

    Returns
    -------
    Stats
        ``counts`` (k,) = Λ of the last epoch, ``weighted`` (k, d) = Λ · Γ^(i) and
        ``sse`` = the sum of squared distances to Γ_{t-1} (for monitoring).
    """
    X = client.data.X
    n, k = X.shape[0], centers.shape[0]
    C = np.array(centers, dtype=np.float64, copy=True)
    beta = float(payload["beta"])
    B = payload["batch_size"]
    _, d2 = assign(X, centers)
    lam = np.zeros(k)
    for _ in range(int(payload["epochs"])):
        lam = np.zeros(k)
        if B is None or B >= n:
            batches = [np.arange(n)]
        else:
            perm = client.rng.permutation(n)
            batches = [perm[s : s + B] for s in range(0, n, B)]
        for idx in batches:
            Xb = X[idx]
            labels, _ = assign(Xb, C)
            lam_b = np.bincount(labels, minlength=k).astype(np.float64)
            nz = lam_b > 0
            if not nz.any():
                continue
            mean_b = cluster_sums(Xb, labels, k)[nz] / lam_b[nz, None]
            lam += lam_b
            C[nz] = C[nz] + beta * (lam_b[nz] / lam[nz])[:, None] * (mean_b - C[nz])
    # The sum of squares in row order (bincount), like the batched form's.
    return Stats(counts=lam, weighted=lam[:, None] * C,
                 sse=np.bincount(np.zeros(n, dtype=np.intp), weights=d2, minlength=1).reshape(()))


@register
class FedKMeans(CenterAlgorithm):
    """Federated K-means with server and client learning rates (Triebe & Rajagopal 2019)."""

    name = "fedkmeans"
    Params = FedKMeansParams
    description = "Federated K-means: client mini-batch k-means, server rate alpha (Triebe & Rajagopal 2019)"

    def __init__(self, params: FedKMeansParams, info: FederationInfo, seed: int) -> None:
        super().__init__(params, info, seed)
        self._velocity: np.ndarray | None = None
        self._small_rounds = np.zeros(params.n_clusters, dtype=np.int64)
        self.reassigned = 0

    def round_task(self) -> Task:
        p = self.params
        return Task(client_minibatch_kmeans, {"beta": p.beta, "epochs": p.epochs, "batch_size": p.batch_size},
                    self.centers, summed=True)  # update reads total(replies) only

    def update(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        p = self.params
        t = total(replies)
        counts = t["counts"]
        nz = counts > 0
        target = self.centers.copy()
        target[nz] = t["weighted"][nz] / counts[nz, None]
        step = p.alpha * (target - self.centers)
        if p.momentum > 0:
            v = np.zeros_like(step) if self._velocity is None else self._velocity
            step = p.momentum * v + (1.0 - p.momentum) * step
            self._velocity = step
        new = self.centers + step
        # reassignment of clusters that stayed small for `reassign_after` rounds
        n_base = float(self.info.total_samples) if p.reassign_of == "all" else counts.sum()
        small = counts < p.reassign_min * n_base
        self._small_rounds = np.where(small, self._small_rounds + 1, 0)
        stale = np.flatnonzero(self._small_rounds >= p.reassign_after)
        if stale.size:
            rng = ctx.rng(3)
            new[stale] = rng.uniform(self.info.feature_min, self.info.feature_max, size=(stale.size, new.shape[1]))
            if self._velocity is not None:
                self._velocity[stale] = 0.0
            self._small_rounds[stale] = 0
            self.reassigned += int(stale.size)
        shift = float(np.linalg.norm(new - self.centers))
        self.centers = new
        self.rounds_done += 1
        self.converged = p.tol > 0 and shift <= p.tol and not stale.size
        return {"center_shift": shift, "objective": float(t["sse"]), "empty_clusters": float((~nz).sum()),
                "reassigned": float(stale.size)}

    @staticmethod
    def central(X: np.ndarray, C0: np.ndarray, params: FedKMeansParams, rounds: int) -> np.ndarray:
        """Central Lloyd k-means on the union from the same start (the paper's "central" baseline)."""

        return lloyd(X, C0, max_iter=rounds, tol=params.tol ** 2)[0]
