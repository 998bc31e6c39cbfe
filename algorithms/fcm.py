"""Federated fuzzy c-means (Corcuera Bárcena, Marcelloni, Renda, Bechini & Ducange, 2021).

Each round every sampled client computes its memberships to the current centres,

    u_cj = 1 / sum_l (||x_j - v_c|| / ||x_j - v_l||)^(2/(m-1)),

and sends, per cluster c, U_c = sum_j u_cj^m and WS_c = sum_j u_cj^m x_j. The
server sets v_c = sum_clients WS_c / sum_clients U_c (a cluster with no mass
keeps its centre). It stops when the Frobenius norm of the centre change is
below ``tol`` (paper: 0.005) or after ``max_rounds`` (paper: 30). With every
client taking part this is exactly central FCM on the union of the shards. With a
fraction of clients a round, the shift falls only to a floor set by the cohorts, and
``settle_window`` stops the run there (:mod:`fedray.core.settle`).

Clients send only U_c and WS_c, as in Algorithm 2 of the paper; with
``objective=True`` they add their share of the objective J_m = sum u^m ||x - v||^2
(one number, for the ``objective`` column of the round history and the
convergence plot). The final metrics compute the objective in the evaluation
pass either way.

The privacy guard of the paper (a client sends its sums only if
N_m > C (F + 1) / F) is ``min_sample_guard``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from fedray.core.centers import CenterAlgorithm, CenterParams
from fedray.core.contract import Reply, RoundContext, Task, batched
from fedray.core.errors import RoundFailedError
from fedray.core.kernels import fcm_stats as fcm_kernel
from fedray.core.ops import fcm, warn_empty
from fedray.core.registry import register
from fedray.core.stats import Stats, StatsBlock, total


class FCMParams(CenterParams):
    m: float = Field(default=2.0, gt=1.0, description="λ, the fuzzifier (> 1; paper: 2)")
    tol: float = Field(default=0.005, gt=0, description="ε: stop when ‖V_t − V_{t−1}‖_F < ε (paper: 0.005)")
    max_rounds: int = Field(default=30, ge=1, description="cap on rounds (paper: 30)")
    settle_window: int = Field(default=5, ge=0, description="W: with federation.fraction < 1, stop when the mean "
                               "centre shift of the last W rounds no longer falls and average their centres "
                               "(fedray.core.settle); 0: only tol (never used at fraction 1)")
    min_sample_guard: bool = Field(default=False, description="the paper's guard: a client sends its sums only if "
                                   "N_m > C (F + 1) / F (N_m samples, C clusters, F features)")
    objective: bool = Field(default=False, description="clients also send their share of the objective sum u^m d^2 "
                            "each round (not in the paper, which sends only U_c and WS_c)")


def fcm_stats_many(payloads: list[dict], centers: np.ndarray, batch: Any) -> StatsBlock | list[Stats | None]:
    """:func:`fcm_stats` for all of a host's clients in one fused pass over their rows
    (:func:`fedray.core.kernels.fcm_stats`, one segment per client: the same bits)."""
    payload = payloads[0]
    if any(p != payload for p in payloads):
        raise ValueError("fcm_stats_many: clients with different payloads")  # run client by client
    k, F = centers.shape
    objective = bool(payload.get("objective"))
    keep = batch.sizes > k * (F + 1) / F if payload.get("guard") else None
    u, ws, obj = fcm_kernel(batch.X, centers, payload["m"], batch.offsets, objective)
    if keep is not None and not keep.all():
        return [(Stats(u=u[i], ws=ws[i], obj=obj[i]) if objective else Stats(u=u[i], ws=ws[i]))
                if keep[i] else None for i in range(len(batch))]
    return StatsBlock(u=u, ws=ws, obj=obj) if objective else StatsBlock(u=u, ws=ws)


@batched(fcm_stats_many)
def fcm_stats(payload: dict, centers: np.ndarray, client: Any) -> Stats | None:
    """U_c = sum u^m (k,), WS_c = sum u^m x (k, d) and, if ``payload["objective"]``, sum u^m d^2:
    one fused pass over the shard, rows in order (:func:`fedray.core.kernels.fcm_stats`)."""
    X = client.data.X
    k = centers.shape[0]
    if payload.get("guard"):
        F = X.shape[1]
        if not X.shape[0] > k * (F + 1) / F:
            return None
    u, ws, obj = fcm_kernel(X, centers, payload["m"], None, bool(payload.get("objective")))
    if obj is None:
        return Stats(u=u[0], ws=ws[0])
    return Stats(u=u[0], ws=ws[0], obj=obj[0])


@register
class FederatedFCM(CenterAlgorithm):
    """Federated fuzzy c-means (exact)."""

    name = "federated-fcm"
    Params = FCMParams
    fuzzy = True
    description = "federated fuzzy c-means: sums of u^m x and u^m per cluster (Corcuera Barcena et al. 2021)"

    def round_task(self) -> Task:
        p = self.params
        # Without the guard every client sends and update reads total(replies) only: hosts may add them.
        return Task(fcm_stats, {"m": p.m, "guard": p.min_sample_guard, "objective": p.objective}, self.centers,
                    summed=not p.min_sample_guard)

    def update(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        sent: Any = replies
        if self.params.min_sample_guard:
            sent = [r.update for r in replies if r.update is not None]
            if not sent:
                raise RoundFailedError(f"round {ctx.round}: no client could send its sums (min_sample_guard)")
        t = total(sent)
        new = self.centers.copy()
        nz = t["u"] > 0
        new[nz] = t["ws"][nz] / t["u"][nz, None]
        warn_empty(~nz, ctx.round, seen=self._warned)
        shift = float(np.linalg.norm(new - self.centers))
        self.centers = new
        self.rounds_done += 1
        self.converged = shift < self.params.tol and bool(nz.any())  # no update is no convergence (DP noise)
        row = {"center_shift": shift, "withheld": float(len(replies) - len(sent))}
        if "obj" in t:
            row["objective"] = float(t["obj"])
        return row

    @staticmethod
    def central(X: np.ndarray, C0: np.ndarray, params: FCMParams, rounds: int) -> np.ndarray:
        return fcm(X, C0, m=params.m, tol=params.tol, max_iter=rounds)[0]
