"""The methods FLACC is compared with (Mehta & Shao 2023, Section V-C, Table I).

* ``fedavg`` — FedAvg (McMahan et al. 2017): theta <- sum_i n_i theta_i / sum_i n_i
  over the sampled clients (the model-averaging form of Section III-A).
* ``local`` — no federation ("NoFed"): each client trains its own model, kept in
  its state; nothing is averaged.
* ``ifca`` — IFCA (Ghosh et al. 2020): k models; each sampled client receives all
  k, picks the one with the lowest loss on its training rows, trains it; the
  server averages each model over the clients that picked it — the plain mean
  theta_j = (1/|S_j|) sum_{i in S_j} theta_i, as in the paper's model-averaging
  variant and its code (``weighted=True``: FedAvg's n_i-weighted mean).
* ``cfl`` — CFL (Sattler et al. 2021): the plain mean of the updates inside each
  cluster, as in the authors' code (``weighted=True``: n_i-weighted); a cluster whose
  mean update is small (||mean_i delta_i|| < eps1) while some update is large
  (max_i ||delta_i|| > eps2) is split in two by the bipartition that minimises
  the largest cross-similarity (complete linkage on cosine similarities of the
  updates, eq. 19 / Remark 3). Needs every client in every round.
* ``flhc`` — FL+HC (Briggs et al. 2020): FedAvg for ``n_pre`` rounds; then every
  client trains once more, the server clusters the raw updates hierarchically
  (Euclidean distance, Ward linkage, cut at ``distance_threshold``) as Briggs et
  al. do, and each cluster becomes its own federation trained by FedAvg.
  ``normalize=True`` clusters unit-length updates instead (distances in [0, 2],
  so one cut-off suits any model size and learning rate).

All are supervised; the shared machinery (client function, per-group FedAvg,
evaluation every r rounds, metrics) is :mod:`fedray.nn.supervised`.
No torch is imported here.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from fedray.core.contract import Reply, RoundContext, Task
from fedray.core.errors import ConfigError
from fedray.core.ops import cosine_similarities, weighted_average
from fedray.core.registry import register
from fedray.nn.supervised import SupervisedAlgorithm, SupervisedParams
from fedray.nn.supervised_client import ClientContext, client_round


@register
class FedAvg(SupervisedAlgorithm):
    """FedAvg: one model for all clients."""

    name = "fedavg"
    description = "FedAvg: one global model, weighted model averaging (McMahan et al. 2017)"
    # configure_round / aggregate: the base's rounds are FedAvg


@register
class Local(SupervisedAlgorithm):
    """No federation: each client trains its own model, kept in its state.

    The payload's ``keep`` (a token naming this run) marks the model a client keeps in
    ``client.state["_own_model"] = (token, weights)``; a model of another run is ignored.
    """

    name = "local"
    description = "no federation (NoFed): every client trains its own model"

    def __init__(self, params: SupervisedParams, info: Any, seed: int) -> None:
        super().__init__(params, info, seed)
        self.assignment = np.arange(info.n_clients)
        self._has_model = np.zeros(info.n_clients, dtype=bool)

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        self.check_round(ctx)
        ev = self.eval_due(ctx)
        pay_train = self.task_payload(True, ev, keep=self._run)
        pay_eval = self.task_payload(False, True, keep=self._run)
        tasks: dict[int, Task] = {}
        self._sent, self._sent_vec = {}, {}
        for cid in ctx.sampled:
            first = not self._has_model[cid]
            tasks[cid] = Task(client_round, pay_train, self.init if first else None)
            self._sent[cid] = 0
            if first:
                self._sent_vec[cid] = self.init
        if ev:
            for cid in range(self.info.n_clients):
                if cid not in tasks:
                    tasks[cid] = Task(client_round, pay_eval, None if self._has_model[cid] else self.init,
                                      evaluation=True)
        return tasks

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        for r in replies:
            if "train_loss" in r.update:
                self._has_model[r.client_id] = True
        self.rounds_done += 1
        return self.round_metrics(ctx, replies)

    def final_task(self) -> Task:
        return Task(client_round, self.task_payload(False, True, keep=self._run), self.init, evaluation=True)

    @classmethod
    def choose_model(cls, model: Any, shared: Any, ctx: ClientContext) -> np.ndarray:
        """The client's own model of this run, else theta_0 (sent until the client has one)."""
        kept = ctx.state.get("_own_model")
        if kept is not None and kept[0] == ctx.payload["keep"]:
            return kept[1]
        return super().choose_model(model, shared, ctx)

    @classmethod
    def client_train(cls, model: Any, ctx: ClientContext) -> dict[str, Any]:
        """Train as usual, but keep the weights in the client instead of sending them."""
        out = super().client_train(model, ctx)
        ctx.state["_own_model"] = (ctx.payload["keep"], out.pop("weights"))
        return out


class IFCAParams(SupervisedParams):
    n_clusters: int = Field(default=4, ge=1, description="k, the number of models (one per assumed cluster)")
    weighted: bool = Field(default=False, description="average each model weighted by the clients' training rows "
                                                      "(FedAvg); default: the plain mean, as IFCA does")


@register
class IFCA(SupervisedAlgorithm):
    """IFCA: k models, each client joins the one with the lowest training loss."""

    name = "ifca"
    Params = IFCAParams
    description = "IFCA: k models, clients pick the lowest-loss one (Ghosh et al. 2020)"
    min_sampled: ClassVar[int] = 2

    def __init__(self, params: IFCAParams, info: Any, seed: int) -> None:
        super().__init__(params, info, seed)
        from fedray.nn.train import initial_weights

        k = params.n_clusters
        base = int(self.spec["seed"])
        self.models = {j: (self.init if j == 0 else initial_weights({**self.spec, "seed": base + 7919 * j}))
                       for j in range(k)}
        self.assignment = np.full(info.n_clients, -1, dtype=np.int64)

    def _stack(self) -> np.ndarray:
        return np.stack([self.models[j] for j in range(self.params.n_clusters)])

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        self.check_round(ctx)
        ev = self.eval_due(ctx)
        W = self._stack()
        pay_train = self.task_payload(True, ev)
        pay_eval = self.task_payload(False, True)
        tasks = {cid: Task(client_round, pay_train, W) for cid in ctx.sampled}
        if ev:
            tasks.update({cid: Task(client_round, pay_eval, W, evaluation=True)
                          for cid in range(self.info.n_clients) if cid not in tasks})
        self._sent = {}
        self._sent_vec = {cid: W for cid in ctx.sampled}  # all k models travel (for bytes)
        return tasks

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        for r in replies:
            if "cluster" in r.update:
                self.assignment[r.client_id] = r.update["cluster"]
        picked = {r.client_id: int(r.update["cluster"]) for r in replies if "weights" in r.update}
        self.average_into(replies, key_of=picked, weighted=self.params.weighted)
        self.model_of = np.where(self.assignment >= 0, self.assignment, 0)
        self.rounds_done += 1
        return self.round_metrics(ctx, replies)

    def final_task(self) -> Task:
        return Task(client_round, self.task_payload(False, True), self._stack(), evaluation=True)

    @classmethod
    def choose_model(cls, model: Any, shared: np.ndarray, ctx: ClientContext) -> np.ndarray:
        """The model of ``shared`` (k, P) with the lowest loss on the client's training rows;
        its index goes into the reply as ``cluster``."""
        from fedray.nn.train import evaluate

        losses = []
        for j in range(shared.shape[0]):
            ctx.load(model, shared[j])
            losses.append(evaluate(model, ctx.split.X_train, ctx.split.y_train)[0] if ctx.split.n_train else 0.0)
        j = int(np.nanargmin(losses)) if not np.all(np.isnan(losses)) else 0
        ctx.out["cluster"] = j
        return shared[j]


class CFLParams(SupervisedParams):
    eps1: float = Field(default=0.4, gt=0, description="ε₁: a cluster splits when the norm of its mean update is "
                      "below ε₁ ...")
    eps2: float = Field(default=1.6, ge=0, description="ε₂: ... and its largest client update norm is above ε₂")
    warmup: int = Field(default=20, ge=0, description="rounds of plain FedAvg before the first split")
    min_cluster_size: int = Field(default=3, ge=2, description="clusters with fewer clients are never split")
    weighted: bool = Field(default=False, description="average inside a cluster weighted by the clients' training "
                                                      "rows (FedAvg); default: the plain mean, as CFL does")


@register
class CFL(SupervisedAlgorithm):
    """CFL: recursive bipartition of clusters by cosine similarity of updates."""

    name = "cfl"
    Params = CFLParams
    description = "CFL: recursive bipartition by cosine similarity of updates (Sattler et al. 2021)"
    min_sampled: ClassVar[int] = 2

    def __init__(self, params: CFLParams, info: Any, seed: int) -> None:
        super().__init__(params, info, seed)
        self.splits: list[dict[str, Any]] = []
        self._next_key = 1

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        if cfg.federation.fraction < 1.0:
            raise ConfigError(f"federation.fraction: 'cfl' needs every client in every round (fraction 1.0); "
                              f"got {cfg.federation.fraction}")
        super().check_config(cfg)

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        if len(ctx.sampled) < self.info.n_clients:
            raise ConfigError(f"federation.fraction: 'cfl' needs every client in every round (fraction 1.0); "
                              f"got {ctx.fraction}")
        self.check_round(ctx)
        return self.make_tasks(ctx, ctx.sampled)

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        p = self.params
        deltas = self.updates(replies)
        mean_norms, max_norms = [], []
        for key in sorted(set(self.model_of.tolist())):
            members = [c for c in deltas if self.model_of[c] == key]
            if not members:
                continue
            D = np.stack([deltas[c] for c in members])
            mean_norm = float(np.linalg.norm(D.mean(axis=0)))
            max_norm = float(np.linalg.norm(D, axis=1).max())
            mean_norms.append(mean_norm)
            max_norms.append(max_norm)
            if (ctx.round >= p.warmup and mean_norm < p.eps1 and max_norm > p.eps2
                    and len(members) >= p.min_cluster_size):
                left, right = bipartition(cosine_similarities(D))
                new_key = self._next_key
                self._next_key += 1
                self.models[new_key] = self.models[key]
                for i in right:
                    self.model_of[members[i]] = new_key
                self.splits.append({"round": ctx.round, "cluster": int(key), "new_cluster": new_key,
                                    "sizes": [len(left), len(right)], "mean_norm": mean_norm, "max_norm": max_norm})
        self.average_into(replies, key_of={c: self.model_of[c] for c in deltas}, weighted=p.weighted)
        self.assignment = self.model_of.copy()
        self.rounds_done += 1
        out = self.round_metrics(ctx, replies)
        out.update(mean_update_norm=float(np.max(mean_norms)) if mean_norms else float("nan"),
                   max_update_norm=float(np.max(max_norms)) if max_norms else float("nan"))
        return out

    def result(self) -> dict[str, Any]:
        out = super().result()
        out["splits"] = list(self.splits)
        return out


def bipartition(S: np.ndarray) -> tuple[list[int], list[int]]:
    """Split ``range(n)`` in two minimising the largest cross-similarity (complete linkage on 1 - S)."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    D = np.clip(1.0 - S, 0.0, 2.0)
    np.fill_diagonal(D, 0.0)
    labels = fcluster(linkage(squareform(D, checks=False), method="complete"), t=2, criterion="maxclust")
    left = [i for i, lab in enumerate(labels) if lab == labels[0]]
    right = [i for i, lab in enumerate(labels) if lab != labels[0]]
    return left, right


class FLHCParams(SupervisedParams):
    n_pre: int = Field(default=10, ge=0, description="n, FedAvg rounds before the clients are clustered once")
    distance_threshold: float = Field(default=0.75, gt=0,
                                      description="d, the distance at which the dendrogram is cut (Table I)")
    linkage: Literal["ward", "complete", "average", "single"] = Field(
        default="ward", description="linkage of the hierarchical clustering of client updates")
    normalize: bool = Field(default=False, description="cluster unit-length updates (distances in [0, 2]); "
                                                       "default: the raw updates, as Briggs et al. do")


@register
class FLHC(SupervisedAlgorithm):
    """FL+HC: FedAvg, one hierarchical clustering of client updates, then FedAvg per cluster."""

    name = "flhc"
    Params = FLHCParams
    description = "FL+HC: hierarchical clustering of updates after n_pre FedAvg rounds (Briggs et al. 2020)"
    min_sampled: ClassVar[int] = 2

    def __init__(self, params: FLHCParams, info: Any, seed: int) -> None:
        super().__init__(params, info, seed)
        self.phase = "cluster" if params.n_pre == 0 else "fedavg"  # -> "cluster" (one round) -> "federations"

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        self.check_round(ctx)
        if self.phase == "cluster":
            return self.make_tasks(ctx, ctx.all_clients)  # every client sends one update to be clustered
        return self.make_tasks(ctx, ctx.sampled)

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        if self.phase == "cluster":
            self._cluster(replies)
            self.phase = "federations"
        else:
            self.average_into(replies)
        self.rounds_done += 1
        if self.phase == "fedavg" and self.rounds_done >= self.params.n_pre:
            self.phase = "cluster"
        return self.round_metrics(ctx, replies)

    def _cluster(self, replies: list[Reply]) -> None:
        """Cluster the updates of this round; each cluster starts from its members' FedAvg."""
        deltas = self.updates(replies)
        ids = sorted(deltas)
        labels = cluster_updates(np.stack([deltas[c] for c in ids]), self.params.distance_threshold,
                                 self.params.linkage, self.params.normalize)
        weights = self.weights_of(replies)
        self.models = {}
        for lab in np.unique(labels):
            members = [c for c, l2 in zip(ids, labels) if l2 == lab]
            self.models[int(lab)] = weighted_average([weights[c][0] for c in members],
                                                     [max(weights[c][1], 1) for c in members])
        for c, lab in zip(ids, labels):
            self.model_of[c] = int(lab)
        self.assignment = self.model_of.copy()


def cluster_updates(D: np.ndarray, threshold: float, method: str = "ward", normalize: bool = False) -> np.ndarray:
    """Hierarchical clustering of updates ``D`` (n, P) cut at ``threshold``; labels 0..k-1 (n,)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    X = np.asarray(D, dtype=np.float64)
    if normalize:
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        X = X / np.where(norms > 0, norms, 1.0)
    if X.shape[0] < 2:
        return np.zeros(X.shape[0], dtype=np.int64)
    labels = fcluster(linkage(X, method=method), t=threshold, criterion="distance")
    first = {lab: i for i, lab in reversed(list(enumerate(labels)))}  # number clusters by first client
    order = {lab: k for k, lab in enumerate(sorted(first, key=first.get))}
    return np.array([order[lab] for lab in labels], dtype=np.int64)
