"""Shared pieces of clustered federated learning: per-group FedAvg, evaluation, metrics.

Used by FLACC (Mehta & Shao 2023) and the methods it is compared with (FedAvg,
local, IFCA, CFL, FL+HC in :mod:`fedray.algorithms.baselines`). Imports no torch:
client functions import :mod:`fedray.nn.train` when they run.

API for an algorithm module
---------------------------
``SupervisedParams``
    model, optimizer (``sgd``/``adam``), lr, epochs (E), batch_size (B),
    eval_every (r), test_fraction, device, model_seed. Subclass it for more.
``SupervisedAlgorithm(Algorithm)`` — base class; state:
    ``self.spec`` (model spec), ``self.init`` (theta_0, float32 (P,)),
    ``self.models: dict[key, ndarray (P,) float32]`` — the models on the server;
    ``self.model_of: ndarray (n_clients,)`` — the model key each client trains/evaluates;
    ``self.assignment: ndarray (n_clients,)`` — the cluster label of each client
    (for metrics; ``-1`` unknown; FLACC keeps one model but many entities before
    separation).
    Helpers:
    ``self.check_round(ctx)`` — raise ConfigError when fewer than ``min_sampled`` clients are sampled;
    ``self.eval_due(ctx)`` — ``ctx.round % eval_every == 0``;
    ``self.make_tasks(ctx, train_clients, evaluate=None)`` -> ``{cid: Task}``: sampled
    clients get the model ``self.models[self.model_of[cid]]`` and train it (E epochs,
    returning weights); in evaluation rounds every client also evaluates the model
    it receives on its own test split *before* training (so the accuracy in row t is
    that of the models after t rounds). One shared object per model (one broadcast).
    ``self.weights_of(replies)`` -> ``{cid: (w_i float32 (P,), n_i)}`` of trained clients;
    ``self.updates(replies)`` -> ``{cid: delta_i float64 (P,)}`` = w_i - the model it received;
    ``self.average_into(replies, key_of=None)`` — FedAvg per model key
    (theta_g = sum n_i w_i / sum n_i over the group's trained clients);
    ``self.round_metrics(ctx, replies)`` -> dict with ``accuracy`` (mean client test
    accuracy, evaluation rounds only), ``test_loss``, ``train_loss``, ``clients_trained``
    (the server's ``clients_sampled`` also counts evaluation-only tasks), ``n_clusters``,
    ``ari`` (found clusters vs the true groups of the federation, where known),
    ``bytes_train`` (model bytes down and up of the training tasks).
    Final evaluation (after the last round) and ``result()`` are provided.
Free functions: ``weighted_average``, ``cosine_similarities``, ``cluster_metrics``,
``n_sampled``, ``client_round`` (the client function).

True groups: ``info.extras["true_groups"]`` (one id per client) when the federation
knows them (:mod:`fedray.data.image_federations`); used for ARI only.
"""
from __future__ import annotations

import math
import secrets
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from fedray.algorithm import Algorithm, FederationInfo, Params, Reply, RoundContext, Task
from fedray.errors import ConfigError
from fedray.metrics import ari_from_table, contingency
from fedray.nn import check_model, model_spec
from fedray.sizes import nbytes_of


class SupervisedParams(Params):
    """Local training and evaluation of supervised clustered FL (paper defaults for MNIST)."""

    model: str = Field(default="auto", description="cnn28 | cnn8 | mlp | cnn1d | auto")
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(default=0.1, gt=0, description="local learning rate eta")
    epochs: int = Field(default=5, ge=1, description="local epochs E")
    batch_size: int = Field(default=32, ge=1, description="mini-batch size B")
    eval_every: int = Field(default=1, ge=1, description="evaluate every r rounds (all clients)")
    test_fraction: float = Field(default=0.15, ge=0.0, lt=1.0,
                                 description="test share of a client's shard where the federation fixes none")
    device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    model_seed: int | None = Field(default=None, ge=0, description="seed of theta_0 (default: the run's seed)")

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        from fedray.nn import MODEL_KINDS, available_models

        if v != "auto" and v not in MODEL_KINDS:
            raise ValueError(f"unknown model {v!r}; choose one of {', '.join(available_models())}")
        return v


def n_sampled(fraction: float, n_clients: int) -> int:
    """Clients sampled per round, as :func:`fedray.seeding.sample_clients` samples them."""
    return min(n_clients, max(1, int(np.floor(fraction * n_clients + 1e-12))))


def weighted_average(vectors: list[np.ndarray], weights: Iterable[float]) -> np.ndarray:
    """sum_i w_i v_i / sum_i w_i in float64, returned as float32 (P,)."""
    w = np.asarray(list(weights), dtype=np.float64)
    acc = np.zeros(vectors[0].shape, dtype=np.float64)
    for v, wi in zip(vectors, w):
        acc += wi * np.asarray(v, dtype=np.float64)
    return (acc / w.sum()).astype(np.float32)


def cosine_similarities(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarities of the rows of ``vectors`` (n, P) -> (n, n) (eq. 19); zero rows give 0."""
    V = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(V, axis=1)
    U = V / np.where(norms > 0, norms, 1.0)[:, None]
    S = np.clip(U @ U.T, -1.0, 1.0)
    np.fill_diagonal(S, np.where(norms > 0, 1.0, 0.0))
    return S


def cluster_metrics(assignment: np.ndarray, true_groups: np.ndarray | None) -> dict[str, float]:
    """Number of clusters among clients with a label >= 0, and ARI against ``true_groups``."""
    a = np.asarray(assignment)
    known = a >= 0
    out = {"n_clusters": float(len(np.unique(a[known])))}
    if true_groups is not None and known.sum() >= 2:
        _, p = np.unique(a[known], return_inverse=True)
        _, q = np.unique(np.asarray(true_groups)[known], return_inverse=True)
        out["ari"] = ari_from_table(contingency(p, q, p.max() + 1, q.max() + 1))
    return out


# --- the client function --------------------------------------------------------
def client_round(payload: Mapping[str, Any], shared: Any, client: Any) -> dict[str, Any]:
    """Evaluate and/or train one model on the client's own split.

    Parameters
    ----------
    payload : dict
        ``spec`` (model), ``train`` (``{"epochs", "batch_size", "lr", "optimizer"}`` or
        None), ``eval`` (bool), ``test_fraction``, ``device``; optional ``keep`` (a run
        token: the client's own model lives in ``client.state`` — the ``local``
        method), ``assign`` (client id -> model key, when ``shared`` is a mapping),
        ``select`` = ``"min_loss"`` (``shared`` has shape (k, P): pick the model with
        the lowest training loss — IFCA).
    shared : ndarray (P,), ndarray (k, P), mapping key -> ndarray (P,), or None
        The model(s) sent by the server.

    Returns
    -------
    dict
        ``n`` (training rows), ``n_test``; with ``eval``: ``acc``, ``test_loss``;
        with ``train``: ``train_loss`` and ``weights`` float32 (P,) (not for ``keep``);
        with ``select``: ``cluster`` (index of the chosen model).
    """
    from fedray.nn.split import client_split
    from fedray.nn.train import evaluate, get_flat, model_for, set_flat, train

    split = client_split(client, float(payload.get("test_fraction", 0.15)))
    model = model_for(payload["spec"], payload.get("device", "auto"))
    out: dict[str, Any] = {"n": split.n_train, "n_test": split.n_test}
    keep = payload.get("keep")
    kept = client.state.get("_own_model")
    if keep is not None and kept is not None and kept[0] == keep:
        w = kept[1]
    elif isinstance(shared, Mapping):
        w = shared[payload["assign"][client.id]]
    elif payload.get("select") == "min_loss":
        losses = []
        for j in range(shared.shape[0]):
            set_flat(model, shared[j])
            losses.append(evaluate(model, split.X_train, split.y_train)[0] if split.n_train else 0.0)
        j = int(np.nanargmin(losses)) if not np.all(np.isnan(losses)) else 0
        out["cluster"] = j
        w = shared[j]
    else:
        w = shared
    set_flat(model, w)
    if payload.get("eval"):
        out["test_loss"], out["acc"] = evaluate(model, split.X_test, split.y_test)
    cfg = payload.get("train")
    if cfg:
        out["train_loss"] = train(model, split.X_train, split.y_train, epochs=cfg["epochs"],
                                  batch_size=cfg["batch_size"], lr=cfg["lr"], optimizer=cfg["optimizer"],
                                  rng=client.rng)
        new = get_flat(model)
        if keep is not None:
            client.state["_own_model"] = (keep, new)
        else:
            out["weights"] = new
    return out


# --- the base class ---------------------------------------------------------------
class SupervisedAlgorithm(Algorithm):
    """Base of supervised (clustered) federated learning algorithms; see the module docstring."""

    Params: ClassVar[type[Params]] = SupervisedParams
    supervised: ClassVar[bool] = True
    #: fewest clients a round must sample (clustered methods compare >= 2 updates)
    min_sampled: ClassVar[int] = 1

    def __init__(self, params: SupervisedParams, info: FederationInfo, seed: int) -> None:
        super().__init__(params, info, seed)
        p = self.params
        self.spec = model_spec(p.model, info.sample_shape, info.n_classes,
                               p.model_seed if p.model_seed is not None else seed)
        from fedray.nn.train import initial_weights  # torch, on the server only to draw theta_0

        self.init: np.ndarray = initial_weights(self.spec)
        self.models: dict[Hashable, np.ndarray] = {0: self.init}
        n = info.n_clients
        self.model_of = np.zeros(n, dtype=np.int64)
        self.assignment = np.zeros(n, dtype=np.int64)
        self.client_acc = np.full(n, np.nan)
        true = info.extras.get("true_groups") if info.extras else None
        self.true_groups = None if true is None else np.asarray(true)
        self._sent: dict[int, Hashable] = {}  # client id -> model key it trained this round
        self._sent_vec: dict[int, np.ndarray] = {}  # client id -> the vector it received
        self._run = secrets.token_hex(8)  # names this run's client state (sessions reuse clients)
        self.rounds_done = 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Arrays arriving through Ray's object store are read-only; the state is updated in place.
        self.__dict__.update({k: (v.copy() if isinstance(v, np.ndarray) and not v.flags.writeable else v)
                              for k, v in state.items()})

    # --- checks --------------------------------------------------------------
    def validate(self) -> None:
        if not self.info.has_labels or self.info.n_classes is None:
            raise ConfigError(f"algorithm.name: {self.name!r} is supervised; the data set has no labels "
                              "(set data.label_column)")
        check_model(self.params.model, tuple(self.info.sample_shape), self.info.n_classes)
        if self.info.n_clients < self.min_sampled:
            raise ConfigError(f"federation.n_clients: {self.name!r} needs at least {self.min_sampled} clients; "
                              f"got {self.info.n_clients}")

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Before any data: a fraction that samples too few clients per round."""
        fed = cfg.federation
        if fed.n_clients is not None and n_sampled(fed.fraction, fed.n_clients) < cls.min_sampled:
            m = n_sampled(fed.fraction, fed.n_clients)
            need = math.ceil(cls.min_sampled / fed.n_clients * 1e6) / 1e6
            raise ConfigError(
                f"federation.fraction: {fed.fraction} of {fed.n_clients} clients samples {m} client(s) a round; "
                f"{cls.name!r} compares client updates and needs at least {cls.min_sampled} "
                f"(fraction >= {need:g})")

    def check_round(self, ctx: RoundContext) -> None:
        if len(ctx.sampled) < self.min_sampled:
            raise ConfigError(
                f"federation.fraction: {ctx.fraction} of {self.info.n_clients} clients samples {len(ctx.sampled)} "
                f"client(s) a round; {self.name!r} needs at least {self.min_sampled}")

    # --- tasks -------------------------------------------------------------
    def eval_due(self, ctx: RoundContext) -> bool:
        return ctx.round % self.params.eval_every == 0

    def _payload(self, train: bool, evaluate: bool, **extra: Any) -> dict[str, Any]:
        p = self.params
        cfg = {"epochs": p.epochs, "batch_size": p.batch_size, "lr": p.lr, "optimizer": p.optimizer} if train else None
        return {"spec": self.spec, "train": cfg, "eval": evaluate, "test_fraction": p.test_fraction,
                "device": p.device, **extra}

    def make_tasks(self, ctx: RoundContext, train_clients: Iterable[int], evaluate: bool | None = None,
                   **extra: Any) -> dict[int, Task]:
        """Tasks for this round: ``train_clients`` train their model; in evaluation rounds
        every other client evaluates its model. ``extra`` goes into every payload."""
        evaluate = self.eval_due(ctx) if evaluate is None else evaluate
        train_set = sorted(set(int(c) for c in train_clients))
        pay_train = self._payload(True, evaluate, **extra)
        pay_eval = self._payload(False, True, **extra)
        tasks: dict[int, Task] = {}
        self._sent, self._sent_vec = {}, {}
        for cid in train_set:
            key = self.model_of[cid]
            self._sent[cid] = key
            self._sent_vec[cid] = self.models[key]
            tasks[cid] = Task(client_round, pay_train, self.models[key])
        if evaluate:
            for cid in range(self.info.n_clients):
                if cid not in tasks:
                    tasks[cid] = Task(client_round, pay_eval, self.models[self.model_of[cid]], evaluation=True)
        return tasks

    # --- aggregation ---------------------------------------------------------
    def weights_of(self, replies: list[Reply]) -> dict[int, tuple[np.ndarray, int]]:
        return {r.client_id: (r.update["weights"], int(r.update["n"])) for r in replies if "weights" in r.update}

    def updates(self, replies: list[Reply]) -> dict[int, np.ndarray]:
        """Weight updates delta_i = w_i - theta_sent (float64), in client-id order."""
        out = {}
        for cid, (w, _) in self.weights_of(replies).items():
            out[cid] = np.asarray(w, dtype=np.float64) - np.asarray(self._sent_vec[cid], dtype=np.float64)
        return out

    def average_into(self, replies: list[Reply], key_of: Mapping[int, Hashable] | None = None) -> list[Hashable]:
        """FedAvg per model key: theta_g = sum n_i w_i / sum n_i over trained clients with key g.

        ``key_of`` maps client id -> model key (default: the key it was sent).
        Returns the keys updated; keys without a trained client keep their model.
        """
        key_of = self._sent if key_of is None else key_of
        groups: dict[Hashable, list[tuple[np.ndarray, int]]] = {}
        for cid, (w, n) in self.weights_of(replies).items():
            groups.setdefault(key_of[cid], []).append((w, max(n, 1)))
        for key, items in groups.items():
            self.models[key] = weighted_average([w for w, _ in items], [n for _, n in items])
        return list(groups)

    def round_metrics(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        out: dict[str, float] = {}
        evals = [r for r in replies if "acc" in r.update]
        if evals:
            for r in evals:
                self.client_acc[r.client_id] = r.update["acc"]
            out["accuracy"] = float(np.nanmean([r.update["acc"] for r in evals]))
            out["test_loss"] = float(np.nanmean([r.update["test_loss"] for r in evals]))
        trained = [r for r in replies if "train_loss" in r.update]
        out["clients_trained"] = float(len(trained))  # clients_sampled also counts evaluation-only tasks
        if trained:
            n = np.array([max(int(r.update["n"]), 1) for r in trained], dtype=float)
            out["train_loss"] = float(np.average([r.update["train_loss"] for r in trained], weights=n))
        out["bytes_train"] = float(sum(nbytes_of(self._sent_vec.get(r.client_id)) + nbytes_of(r.update.get("weights"))
                                       for r in trained))
        out.update(cluster_metrics(self.assignment, self.true_groups))
        return out

    # --- final evaluation and result ----------------------------------------------
    def final_task(self) -> Task:
        """The task every client runs after training (its model on its test split)."""
        models = dict(self.models)
        return Task(client_round, self._payload(False, True, assign=[self.model_of[c] for c in range(self.info.n_clients)]),
                    models, evaluation=True)

    def evaluation_task(self, stage: int = 0, previous: list[Reply] | None = None) -> Task | None:
        return self.final_task() if stage == 0 else None

    def summarize_evaluation(self, stages: list[list[Reply]]) -> dict[str, Any]:
        acc = np.full(self.info.n_clients, np.nan)
        for r in stages[0]:
            acc[r.client_id] = r.update["acc"]
            if "cluster" in r.update:
                self.assignment[r.client_id] = r.update["cluster"]
        self.client_acc = acc
        out: dict[str, Any] = {"accuracy": float(np.nanmean(acc)), "client_accuracy": acc.tolist(),
                               "assignment": self.assignment.tolist()}
        out.update(cluster_metrics(self.assignment, self.true_groups))
        return out

    def result(self) -> dict[str, Any]:
        keys = list(self.models)
        out: dict[str, Any] = {"assignment": self.assignment.copy(), "model_of": self.model_of.copy(),
                               "weights": np.stack([self.models[k] for k in keys]),
                               "model_keys": np.array([str(k) for k in keys]), "client_accuracy": self.client_acc.copy()}
        if self.true_groups is not None:
            out["true_groups"] = self.true_groups.copy()
        return out
