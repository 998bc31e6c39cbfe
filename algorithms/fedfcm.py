"""FedFCM: federated fuzzy c-means with k-means averaging (Stallmann & Wilbik, 2022, Section 2.2.1).

Protocol (steps 1–6 of Section 2.2.1): the server shares the global centres
c_1..c_K; every client runs fuzzy c-means (eqs. 5 and 6) on its shard from those
centres until its local centres move less than ``local_tol`` (Frobenius norm) and
sends its K local centres; the server sets the new global centres to

    avg([c_k^(l)]_{k,l}) := kmeans([c_k^(l)]_{k,l})                          (eq. 14)

— k-means on all P·K local centres, unweighted as in the authors' code, warm-started
from the previous global centres (k-means++ with restarts in the first round) —
and stops when Σ_k ‖c_{k,t} − c_{k,t+1}‖ ≤ ``tol`` (ε = 0.001 in the paper).

``init="local"`` (default) lets every client start its first local FCM from a
k-means++ seeding of its own shard (nothing global exists yet); the other
``init`` choices of the centre-based algorithms give a shared start.

``fedfcm-avg`` is the comparison variant of Section 3 ("federated averaging",
Pedrycz 2022 / Corcuera Bárcena et al. 2021 in the authors' code): the global
centre k is the support-weighted mean of the clients' centre k,
c_k = Σ_l W_k^(l) c_k^(l) / Σ_l W_k^(l) with W_k^(l) = Σ_x u_k(x). It has no grouping
of local centres, which is why it fails on non-IID clients (Table 2); it starts from
centres shared by all clients (``init="random-box"``).

After training, the evaluation adds FedFuzzDB (:mod:`fedray.analysis.validation`, eqs.
15–17) as ``fuzzy_db`` to the final metrics.
"""
from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from fedray.algorithms.fedfuzzdb import fuzzy_db_from_stats, fuzzy_db_stats
from fedray.core.centers import CenterAlgorithm, CenterParams
from fedray.core.contract import FederationInfo, Reply, RoundContext, Task
from fedray.core.ops import fcm, kmeans, kmeans_plusplus, lloyd
from fedray.core.registry import register
from fedray.core.stats import total


class FedFCMParams(CenterParams):
    """Hyperparameters of FedFCM (paper defaults: m = 2, ε = 0.001 globally and locally)."""

    init: Literal["local", "kfed", "random-box"] | list[list[float]] = Field(
        default="local", description="first centres: local (each client's own FCM start, as in the paper), kfed, "
        "random-box, or the K x d centres themselves")
    m: float = Field(default=2.0, gt=1.0, description="m, the fuzzifier (> 1; paper: 2)")
    tol: float = Field(default=0.001, gt=0.0, description="ε: stop when Σ_k ‖c_k,t − c_k,t+1‖ ≤ ε (paper: 0.001)")
    local_tol: float = Field(default=0.001, gt=0.0, description="local FCM stops when ‖V_t − V_{t−1}‖_F < local_tol")
    local_max_iter: int = Field(default=1000, ge=1, description="cap on local FCM iterations per round")
    weighted: bool = Field(default=False, description="k-means averaging weighted by the clients' supports")
    n_init: int = Field(default=10, ge=1, description="k-means++ restarts of the first server clustering")
    q: float = Field(default=1.0, gt=0.0, description="q, the spread exponent of FedFuzzDB (paper: 1)")
    p: float = Field(default=2.0, gt=0.0, description="p, the Minkowski exponent of FedFuzzDB's centre distances "
                                                             "(paper: 2)")

    @field_validator("init", mode="before")
    @classmethod
    def _init_array(cls, v: Any) -> Any:
        return v.tolist() if isinstance(v, np.ndarray) else v


class FedFCMAvgParams(FedFCMParams):
    init: Literal["local", "kfed", "random-box"] | list[list[float]] = Field(
        default="random-box", description="first centres, shared by all clients so that centre i means the same "
        "cluster everywhere: random-box, kfed, local, or the K x d centres themselves")


def local_fcm(payload: dict[str, Any], centers: np.ndarray | None, client: Any) -> dict[str, np.ndarray]:
    """Fuzzy c-means to local convergence on the client's shard.

    Parameters
    ----------
    payload : dict
        ``k``, ``m``, ``tol``, ``max_iter`` and ``support`` (whether to send the
        cluster supports Σ_x u_k(x)).
    centers : ndarray of shape (k, d) or None
        Global centres to start from; None starts from k-means++ on the shard.

    Returns
    -------
    dict
        ``centers`` (k, d) and, if asked, ``support`` (k,).
    """
    X = client.data.X
    k = int(payload["k"])
    C0 = kmeans_plusplus(X, k, client.rng) if centers is None else centers
    C, U, _ = fcm(X, C0, m=float(payload["m"]), tol=float(payload["tol"]), max_iter=int(payload["max_iter"]))
    out = {"centers": C}
    if payload.get("support"):
        out["support"] = U.sum(axis=0)
    return out


@register
class FedFCM(CenterAlgorithm):
    """Federated fuzzy c-means with k-means averaging (FedFCM)."""

    name = "fedfcm"
    Params = FedFCMParams
    fuzzy = True
    averaging = "kmeans"
    description = "FedFCM: local FCM to convergence, server k-means over local centres (Stallmann & Wilbik 2022)"

    def __init__(self, params: FedFCMParams, info: FederationInfo, seed: int) -> None:
        super().__init__(params, info, seed)
        if params.init == "local":
            self.phase = "train"
        self.last_shift = float("nan")

    def round_task(self) -> Task:
        p = self.params
        payload = {"k": p.n_clusters, "m": p.m, "tol": p.local_tol, "max_iter": p.local_max_iter,
                   "support": self.averaging == "support" or p.weighted}
        return Task(local_fcm, payload, self.centers)

    def combine(self, ctx: RoundContext, local: np.ndarray, support: np.ndarray | None) -> np.ndarray:
        """k-means averaging (eq. 14) of the local centres (P, k, d) -> (k, d)."""
        k = self.params.n_clusters
        pts = local.reshape(-1, local.shape[-1])
        w = None if support is None or not self.params.weighted else support.reshape(-1)
        if self.centers is None:
            return kmeans(pts, k, ctx.rng(1), n_init=self.params.n_init, weights=w)
        return lloyd(pts, self.centers, max_iter=300, weights=w)[0]

    def update(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        local = np.stack([r.update["centers"] for r in replies])
        support = np.stack([r.update["support"] for r in replies]) if "support" in replies[0].update else None
        new = self.combine(ctx, local, support)
        if self.centers is None:
            self.initial_centers = new.copy()
            shift = float("inf")
        else:
            shift = float(np.sum(np.linalg.norm(new - self.centers, axis=1)))
        self.centers = new
        self.rounds_done += 1
        self.converged = shift <= self.params.tol
        self.last_shift = shift
        return {
            "center_shift": shift if np.isfinite(shift) else float("nan"),
            "local_centers": float(local.shape[0] * local.shape[1]),
        }

    # --- evaluation: the crisp passes of CenterAlgorithm plus FedFuzzDB ----------
    def evaluation_task(self, stage: int, previous: list[Reply] | None) -> Task | None:
        if stage < 2:
            return super().evaluation_task(stage, previous)
        if stage == 2 and self.centers is not None and self.centers.shape[0] >= 2:
            p = self.params
            return Task(fuzzy_db_stats, {"m": p.m, "q": p.q}, self.centers, evaluation=False)
        return None

    def summarize_evaluation(self, stages: list[list[Reply]]) -> dict[str, Any]:
        out = super().summarize_evaluation(stages[:2])
        if len(stages) > 2:
            out["fuzzy_db"] = fuzzy_db_from_stats(self.centers, total(stages[2]),
                                                  self.params.q, self.params.p)
        return out

    @staticmethod
    def central(X: np.ndarray, C0: np.ndarray, params: FedFCMParams, rounds: int) -> np.ndarray:
        """Central fuzzy c-means on the union from the same start (to convergence, ε = ``local_tol``)."""
        return fcm(X, C0, m=params.m, tol=params.local_tol, max_iter=params.local_max_iter)[0]


@register
class FedFCMAvg(FedFCM):
    """FedFCM's comparison variant: support-weighted averaging of centre k over clients (FedAvg-style)."""

    name = "fedfcm-avg"
    Params = FedFCMAvgParams
    averaging = "support"
    description = "federated FCM with support-weighted averaging per centre index (comparison variant of FedFCM)"

    def combine(self, ctx: RoundContext, local: np.ndarray, support: np.ndarray | None) -> np.ndarray:
        """c_k = Σ_l W_k^(l) c_k^(l) / Σ_l W_k^(l); a centre without support keeps its value."""
        W = support[:, :, None]
        den = W.sum(axis=0)
        num = (W * local).sum(axis=0)
        if self.centers is None:  # "local" start: no previous value to keep
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), local.mean(axis=0))
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), self.centers)
