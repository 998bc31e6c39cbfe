"""Centre-based clustering: the public base class of algorithms whose model is a set of centres.

Initialisation (``init``):

* ``"kfed"`` (default) — every client runs k-means++ and Lloyd on its own shard
  and sends its local centres with their counts; the server clusters the local
  centres (weighted k-means). No raw point leaves a client.
* ``"random-box"`` — uniform in the federated bounding box.
* an explicit array of shape (n_clusters, n_features).

Evaluation runs once after training, in two passes over the clients: (1) the
contingency table against the true labels, per-cluster sums and counts and the
objective; (2) mean distances to the resulting cluster means, for the crisp
Davies–Bouldin index. Only these tables reach the server.
"""
from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from fedray.core.contract import Algorithm, Params, Reply, RoundContext, Task, batched
from fedray.core.errors import ConfigError, DataError
from fedray.core.local_start import gathered, local_centers, n_distinct
from fedray.core.metrics import (
    acc_from_table,
    ari_from_table,
    davies_bouldin_from_stats,
    nmi_from_table,
)
from fedray.core.ops import (
    assign,
    cluster_sums,
    fcm_memberships,
    kmeans,
    memberships_from_d2,
    sq_distances,
)
from fedray.core.settle import Settling
from fedray.core.stats import Stats, StatsBlock, total

log = logging.getLogger(__name__)


class CenterParams(Params):
    n_clusters: int = Field(default=3, ge=1, description="K, the number of clusters")
    init: Literal["kfed", "random-box"] | list[list[float]] = Field(
        default="kfed", description="initial centres: kfed (one-shot k-FED round), random-box (uniform in the "
        "federated bounding box) or the K x d centres themselves")
    max_rounds: int = Field(default=100, ge=1, description="the algorithm's own cap on training rounds T")
    init_retries: int = Field(default=5, ge=0, description="times the k-FED start asks clients that failed or were "
                              "late again (same round, same streams), so that a fault does not change the start")

    @field_validator("init", mode="before")
    @classmethod
    def _init(cls, v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return v.tolist()
        return v


# --- client functions (the k-FED local start, local_centers, is in fedray.core.local_start) ---------------
def _same_payload(payloads: list[Any]) -> Any:
    first = payloads[0]
    if any(p != first for p in payloads):
        raise ValueError("clients with different payloads")  # the host runs them client by client
    return first


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.intp)


def evaluate_pass1_many(payloads: list[dict], centers: np.ndarray, batch: Any) -> StatsBlock:
    """:func:`evaluate_pass1` for all of a host's clients in one pass over their rows (the same bits)."""
    payload = _same_payload(payloads)
    X, owner, n = batch.X, batch.owner, len(batch)
    labels, d2 = assign(X, centers)
    k = centers.shape[0]
    cell = owner * k + labels
    stats = {"sums": cluster_sums(X, cell, n * k).reshape(n, k, -1),
             "counts": np.bincount(cell, minlength=n * k).astype(float).reshape(n, k),
             "sse": np.bincount(owner, weights=d2, minlength=n)}
    m = payload.get("m")
    if m is not None:
        stats["fuzzy_obj"] = _fuzzy_obj(X, centers, m, owner, n)
    n_classes = payload.get("n_classes")
    if n_classes and batch.labels is None and any(c.labels is not None for c in batch.clients):
        raise ValueError("some clients have labels, some not")  # the host runs them client by client
    if n_classes and batch.labels is not None:
        y = batch.labels
        ok = (y >= 0) & (y < n_classes)
        stats["table"] = np.bincount((cell[ok] * n_classes + y[ok]).astype(np.intp),
                                     minlength=n * k * n_classes).astype(float).reshape(n, k, n_classes)
    return StatsBlock(**stats)


def _fuzzy_obj(X: np.ndarray, centers: np.ndarray, m: float, owner: np.ndarray, n: int) -> np.ndarray:
    """Per-client sum of u^m d^2 (n,): row sums, then a sum over each client's rows in order."""

    d2 = sq_distances(X, centers)
    W = memberships_from_d2(d2.copy(), m) ** m
    return np.bincount(owner, weights=np.add.reduce(W * d2, axis=1), minlength=n)


@batched(evaluate_pass1_many)
def evaluate_pass1(payload: dict, centers: np.ndarray, client: Any) -> Stats:
    """Contingency with the true labels, per-cluster sums/counts and the objective.

    Sums over rows run in row order (``bincount``), like :func:`evaluate_pass1_many`'s.
    """
    X = client.data.X
    labels, d2 = assign(X, centers)
    k = centers.shape[0]
    stats = {"sums": cluster_sums(X, labels, k), "counts": np.bincount(labels, minlength=k).astype(float),
             "sse": np.bincount(_zeros(len(d2)), weights=d2, minlength=1).reshape(())}
    m = payload.get("m")
    if m is not None:
        stats["fuzzy_obj"] = _fuzzy_obj(X, centers, m, _zeros(X.shape[0]), 1).reshape(())
    n_classes = payload.get("n_classes")
    if n_classes and client.labels is not None:
        t = np.zeros((k, n_classes))
        y = client.labels
        ok = (y >= 0) & (y < n_classes)
        np.add.at(t, (labels[ok], y[ok]), 1.0)
        stats["table"] = t
    return Stats(**stats)


def evaluate_pass2_many(payloads: list[Any], shared: dict, batch: Any) -> StatsBlock:
    """:func:`evaluate_pass2` for all of a host's clients in one pass over their rows (the same bits)."""
    X, n = batch.X, len(batch)
    labels, _ = assign(X, shared["centers"])
    means = shared["means"]
    k = means.shape[0]
    dist = np.sqrt(np.sum((X - means[labels]) ** 2, axis=1))
    return StatsBlock(dist=np.bincount(batch.owner * k + labels, weights=dist, minlength=n * k).reshape(n, k))


@batched(evaluate_pass2_many)
def evaluate_pass2(payload: dict, shared: dict, client: Any) -> Stats:
    """Sum of distances of each point to the mean of its cluster (for Davies–Bouldin)."""
    X = client.data.X
    labels, _ = assign(X, shared["centers"])
    means = shared["means"]
    dist = np.sqrt(np.sum((X - means[labels]) ** 2, axis=1))
    return Stats(dist=np.bincount(labels, weights=dist, minlength=means.shape[0]))


class CenterAlgorithm(Algorithm):
    """Base of algorithms whose model is a set of centres."""

    Params = CenterParams
    fuzzy: bool = False
    #: The evaluation passes read the clients' replies only through ``fedray.total``, so that hosts
    #: may add them (``Task.summed``); a subclass whose ``summarize_evaluation`` reads single
    #: replies of stages 0 and 1 sets this False.
    summed_evaluation: bool = True

    def __init__(self, params: CenterParams, info, seed: int) -> None:
        super().__init__(params, info, seed)
        self.centers: np.ndarray | None = None
        self.rounds_done = 0
        self.converged = False
        self.stop_note = ""  # "settled": the partial-participation rule stopped the run (fedray.core.settle)
        self._settling: Settling | None = None
        self._warned: set[int] = set()  # clusters already reported empty
        init = params.init
        if isinstance(init, list):
            self.centers = self._explicit_init(init)
        elif init == "random-box":
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0, 10**6]))
            self.centers = rng.uniform(info.feature_min, info.feature_max, size=(params.n_clusters, info.n_features))
        self.phase = "train" if self.centers is not None else "init"
        self.initial_centers = None if self.centers is None else self.centers.copy()

    def validate(self) -> None:
        k, n = self.params.n_clusters, self.info.total_samples
        if k > n:
            raise DataError(f"algorithm.params.n_clusters: n_samples={n} should be >= n_clusters={k}")

    def _explicit_init(self, init: list) -> np.ndarray:
        C = np.asarray(init, dtype=np.float64)
        want = (self.params.n_clusters, self.info.n_features)
        if C.shape != want:
            raise ConfigError(f"algorithm.params.init: explicit centres must have shape {want}; got {C.shape}")
        if not np.all(np.isfinite(C)):
            raise ConfigError("algorithm.params.init: explicit centres contain NaN or infinite values")
        return C

    # --- the round template: init phase, stop rule, one task for every sampled client ---
    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        if self.phase == "init":
            return self.init_tasks(ctx)
        if self.converged or self.stop_note or self.rounds_done >= self.params.max_rounds:
            return None
        task = self.round_task()
        return ctx.each(task)

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        if self.phase == "init":
            return self.aggregate_init(ctx, replies)
        row = self.update(ctx, replies)
        window = int(getattr(self.params, "settle_window", 0) or 0)
        if window and ctx.fraction < 1.0 and not self.converged and "center_shift" in row:
            self._settling = self._settling or Settling(window)
            if self._settling.settled(row["center_shift"], self.centers):
                self.centers = self._settling.averaged()
                self.stop_note = "settled"
                log.info("%s: %s", self.name, self._settling.reason())
        return row

    def round_task(self) -> Task:  # pragma: no cover - abstract
        """The task every sampled client runs in a training round."""
        raise NotImplementedError

    def update(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:  # pragma: no cover - abstract
        """Fold a training round's replies into the centres; returns the round's metrics."""
        raise NotImplementedError

    # --- init phase -----------------------------------------------------
    def init_tasks(self, ctx: RoundContext) -> dict[int, Task]:
        """Every client sends its local centres."""
        task = Task(local_centers, {"k": self.params.n_clusters})
        return {cid: task for cid in ctx.all_clients}

    def round_budget(self) -> int | None:
        """``max_rounds`` training rounds, plus the k-FED start where there is one."""
        return self.params.max_rounds + (1 if self.phase == "init" else 0)

    def retries_for_missing(self, ctx: RoundContext) -> int:
        """The k-FED start needs every client: a fault would change the initial centres."""
        return self.params.init_retries if self.phase == "init" else 0

    def aggregate_init(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        C, w = gathered(replies)
        k = self.params.n_clusters
        if not len(C):
            raise DataError("init 'kfed': no client returned local centres")
        distinct = n_distinct(C, k)
        if distinct < k:
            raise DataError(f"init 'kfed': only {distinct} distinct local centres for "
                            f"n_clusters={k}; use init='random-box' or fewer clusters")
        missing = sorted(set(ctx.failed) | set(ctx.late))
        if missing:
            log.warning("init 'kfed': client(s) %s never answered (init_retries=%d); the start uses the other %d",
                        missing[:20], self.params.init_retries, len(replies))
        self.centers = kmeans(C, k, ctx.rng(1), n_init=3, weights=w)
        self.initial_centers = self.centers.copy()
        self.phase = "train"
        return {"local_centers": float(C.shape[0])}

    # --- evaluation -----------------------------------------------------
    def evaluation_task(self, stage: int, previous: list[Reply] | None) -> Task | None:
        if self.centers is None:
            return None
        if stage == 0:
            payload = {"n_classes": self.info.n_classes if self.info.has_labels else None,
                       "m": getattr(self.params, "m", None) if self.fuzzy else None}
            return Task(evaluate_pass1, payload, self.centers, evaluation=True, summed=self.summed_evaluation)
        if stage == 1:
            t = total(previous)
            self._eval1 = t
            counts = t["counts"]
            means = np.where(counts[:, None] > 0, t["sums"] / np.maximum(counts, 1)[:, None], self.centers)
            self._eval_means = means
            return Task(evaluate_pass2, None, {"centers": self.centers, "means": means}, evaluation=True,
                        summed=self.summed_evaluation)
        return None

    def summarize_evaluation(self, stages: list[list[Reply]]) -> dict[str, Any]:
        t1 = self._eval1
        dist = total(stages[1])["dist"]
        counts = t1["counts"]
        mean_dist = np.where(counts > 0, dist / np.maximum(counts, 1), 0.0)
        out: dict[str, Any] = {
            "objective": float(t1["fuzzy_obj"]) if "fuzzy_obj" in t1 else float(t1["sse"]),
            "sse": float(t1["sse"]),
            "davies_bouldin": davies_bouldin_from_stats(self._eval_means, mean_dist, counts),
            "cluster_sizes": counts.astype(int).tolist(),
        }
        if "table" in t1:
            table = t1["table"]
            out.update(ari=ari_from_table(table), nmi=nmi_from_table(table), acc=acc_from_table(table))
        return out

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"centers": self.centers}
        if self.initial_centers is not None:
            out["initial_centers"] = self.initial_centers
        if self.fuzzy:
            out["m"] = np.array(self.params.m)
        return out

    @staticmethod
    def predict_proba(model: dict[str, Any], X: np.ndarray) -> np.ndarray:
        """Fuzzy memberships (n_samples, n_clusters) for fuzzy models (those with a fuzzifier ``m``)."""
        if "m" not in model:
            raise NotImplementedError("this model gives crisp assignments only; use predict")

        return fcm_memberships(np.asarray(X, dtype=np.float64), model["centers"], float(model["m"]))

    @staticmethod
    def predict(model: dict[str, Any], X: np.ndarray) -> np.ndarray:
        return assign(np.asarray(X, dtype=np.float64), model["centers"])[0]


