"""The public base of supervised (clustered) federated learning: :class:`SupervisedAlgorithm`.

Used by FLACC (Mehta & Shao 2023) and the methods it is compared with (FedAvg,
local, IFCA, CFL, FL+HC in :mod:`fedray.algorithms.baselines`), and by users'
plug-ins (FedProx, Per-FedAvg in ``examples/plugins``; see ``docs/extending.md``).
Imports no torch: client hooks import it when they run on the client.

A round (server side, instance methods)
---------------------------------------
``configure_round(ctx)``
    Default: FedAvg — the sampled clients train the model of their key
    (``make_tasks(ctx, ctx.sampled)``).
``aggregate(ctx, replies)``
    Default: FedAvg per model key (``average_into``), then ``round_metrics``:
    theta_g = sum_i n_i w_i / sum_i n_i over the group's trained clients
    (McMahan et al. 2017; Mehta & Shao 2023, Algorithm 1 line 20).
``client_payload()``
    Entries the client hooks need (e.g. FedProx's ``mu``), added to every payload.

On the client (classmethods, run by :func:`client_round`)
---------------------------------------------------------
The payload carries the algorithm's class (by reference: module and name), so a
client runs the hooks of the class that made the task, in this order:

``choose_model(model, shared, ctx) -> ndarray (P,)``
    Which received weights the client starts from: the one model sent, the model
    of its key in a mapping (``payload["assign"]``), IFCA's lowest-loss model of
    k, the ``local`` method's own kept model.
``client_evaluate(model, ctx) -> {"test_loss", "acc"}``
    In evaluation rounds, before training, on the client's test split.
``client_train(model, ctx) -> {"train_loss", "weights"}``
    E local epochs of mini-batches B (``ClientUpdate``) minimising ``client_loss``.
``client_loss(model, outputs, targets, ctx) -> scalar tensor``
    Cross-entropy of logits ``outputs`` (b, n_classes) against ``targets`` (b,).

``ctx`` is a :class:`ClientContext`: the client (``rng``, ``state``), the payload,
the client's split, ``start`` (the weights it started from, (P,) float32; as
tensors: ``start_tensors(model)``), ``batches()`` (mini-batches in the client's
seeded order), ``weights(model)`` / ``load(model, w)``, and ``out`` (the reply).

State and helpers of the base
-----------------------------
``SupervisedParams``
    model (a built-in name or ``package.module:function``), optimizer
    (``sgd``/``adam``), lr, epochs (E), batch_size (B), eval_every (r),
    test_fraction, device, model_seed. Subclass it for more.
``self.spec`` (model spec), ``self.init`` (theta_0, float32 (P,)),
``self.models: dict[key, ndarray (P,) float32]`` — the models on the server;
``self.model_of: ndarray (n_clients,)`` — the model key each client trains/evaluates;
``self.assignment: ndarray (n_clients,)`` — the cluster label of each client
(for metrics; ``-1`` unknown; FLACC keeps one model but many entities before
separation).
``self.check_round(ctx)`` — raise ConfigError when fewer than ``min_sampled`` clients are sampled;
``self.eval_due(ctx)`` — ``ctx.round % eval_every == 0``;
``self.task_payload(train, evaluate, **extra)`` — the payload of a task;
``self.make_tasks(ctx, train_clients, evaluate=None, fn=client_round, **extra)`` -> ``{cid: Task}``:
sampled clients get the model ``self.models[self.model_of[cid]]`` and train it; in
evaluation rounds every client also evaluates the model it receives on its own test
split *before* training (so the accuracy in row t is that of the models after t
rounds). One shared object per model (one broadcast). ``fn`` replaces the client function.
``self.weights_of(replies)`` -> ``{cid: (w_i float32 (P,), n_i)}`` of trained clients;
``self.updates(replies)`` -> ``{cid: delta_i float64 (P,)}`` = w_i - the model it received;
``self.average_into(replies, key_of=None, weighted=True)`` — FedAvg per model key
(``weighted=False``: the plain mean of the group's models);
``self.round_metrics(ctx, replies)`` -> dict with ``accuracy`` (mean client test
accuracy, evaluation rounds only), ``test_loss``, ``train_loss``, ``clients_trained``
(the server's ``clients_sampled`` also counts evaluation-only tasks), ``n_clusters``,
``ari`` (found clusters vs the true groups of the federation, where known),
``bytes_train`` (model bytes down and up of the training tasks).
Final evaluation (after the last round) and ``result()`` are provided.
Free functions: ``weighted_average``, ``cosine_similarities``, ``cluster_metrics``,
``n_sampled``, ``client_round`` (the client function) and ``client_round_many`` (its
batched form: a host's clients that keep the default ``client_train`` and ``client_loss``
train together, one stacked copy of the network each, :mod:`fedray.nn.batched`; the
result equals ``client_round``'s loop up to float rounding; ``runtime.batched: false``
runs the loop).

True groups: ``info.extras["true_groups"]`` (one id per client) when the federation
knows them (:mod:`fedray.data.image_federations`); used for ARI only.
"""
from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from fedray.core.contract import (
    Algorithm,
    ClientFn,
    FederationInfo,
    Params,
    Reply,
    RoundContext,
    Task,
)
from fedray.core.errors import ConfigError
from fedray.core.metrics import cluster_metrics
from fedray.core.ops import weighted_average
from fedray.core.seeding import n_sampled
from fedray.core.sizes import nbytes_of
from fedray.nn import MODEL_KINDS, available_models, check_model, is_model_reference, model_spec, resolve_model_factory
from fedray.nn.supervised_client import ClientContext, client_round

log = logging.getLogger(__name__)


class SupervisedParams(Params):
    """Local training and evaluation of supervised clustered FL (paper defaults for MNIST)."""

    model: str = Field(default="auto", description="network trained by each client: cnn28, cnn32, cnn8, mlp, cnn1d, "
                       "auto (by the data's shape) or package.module:function")
    optimizer: Literal["sgd", "adam"] = Field(default="sgd", description="local optimiser (paper: plain SGD)")
    lr: float = Field(default=0.1, gt=0, description="η, the clients' local learning rate")
    epochs: int = Field(default=5, ge=1, description="E, local epochs per round")
    batch_size: int = Field(default=32, ge=1, description="B, the local mini-batch size")
    eval_every: int = Field(default=1, ge=1, description="evaluate every r rounds, on every client's test rows")
    test_fraction: float = Field(default=0.15, ge=0.0, lt=1.0,
                                 description="test share of a client's shard where the federation fixes none")
    device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$",
                        description="torch device of client training: cpu, cuda[:i], or auto (a GPU when the actor "
                        "has one)")
    model_seed: int | None = Field(default=None, ge=0,
                                   description="seed of the initial weights θ₀ (default: the run's seed)")
    stack_clients: Literal["gpu", "always", "never"] = Field(
        default="gpu", description="train a host's clients together as one stacked network (fedray.nn.batched): on "
        "a GPU only (the default, so CPU runs keep the per-client loop's bits and the published tables), always "
        "(also small networks on the CPU, about twice as fast there), or never")

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if is_model_reference(v):  # a user's factory: checked (one line) by check_config and validate
            return v
        if v != "auto" and v not in MODEL_KINDS:
            raise ValueError(f"unknown model {v!r}; choose one of {', '.join(available_models())}")
        return v


# --- the base class ---------------------------------------------------------------
class SupervisedAlgorithm(Algorithm):
    """Base of supervised (clustered) federated learning algorithms; see the module docstring."""

    Params: ClassVar[type[Params]] = SupervisedParams
    supervised: ClassVar[bool] = True
    #: fewest clients a round must sample (clustered methods compare >= 2 updates)
    min_sampled: ClassVar[int] = 1
    #: N_server = federation.rounds: reaching the cap is the planned end, not a cut
    trains_for_rounds: ClassVar[bool] = True

    def __init__(self, params: SupervisedParams, info: FederationInfo, seed: int) -> None:
        super().__init__(params, info, seed)
        p = self.params
        self.spec = model_spec(p.model, info.sample_shape, info.n_classes,
                               p.model_seed if p.model_seed is not None else seed)
        from fedray.nn.train import (
            initial_weights,  # torch, on the server only to draw theta_0
        )

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
        """Before any data: a model reference that does not import, a fraction that samples
        too few clients per round."""

        model = (cfg.algorithm.params or {}).get("model")
        if isinstance(model, str) and is_model_reference(model):
            resolve_model_factory(model)
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

    # --- rounds: FedAvg unless a subclass says otherwise -------------------------------
    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        """The sampled clients train the model of their key (one model: FedAvg)."""
        self.check_round(ctx)
        return self.make_tasks(ctx, ctx.sampled)

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        """FedAvg per model key (:meth:`average_into`), then the round's metrics."""
        self.average_into(replies)
        self.rounds_done += 1
        return self.round_metrics(ctx, replies)

    # --- client hooks (run on the client; classmethods: the class travels by reference) ----
    @classmethod
    def choose_model(cls, model: Any, shared: Any, ctx: ClientContext) -> np.ndarray:
        """Which received weights the client starts from.

        Parameters
        ----------
        model : torch.nn.Module
            The client's model (its weights are undefined here; load before use).
        shared : ndarray (P,) or mapping key -> ndarray (P,)
            What the server sent: one model, or several with ``ctx.payload["assign"]``
            (one key per client id) naming the client's.
        ctx : ClientContext

        Returns
        -------
        ndarray of shape (P,), float32
            The start weights (``ctx.start`` from now on). A hook may record its
            choice in ``ctx.out`` (IFCA: ``ctx.out["cluster"]``).
        """
        if isinstance(shared, Mapping):
            return shared[ctx.payload["assign"][ctx.client.id]]
        return shared

    @classmethod
    def client_evaluate(cls, model: Any, ctx: ClientContext) -> dict[str, float]:
        """Score the loaded model on the client's test rows: ``{"test_loss", "acc"}``.

        Runs before training in evaluation rounds; a hook that changes the model
        (e.g. personalises it) must reload ``ctx.start`` (``ctx.load(model)``) after.
        """
        from fedray.nn.train import evaluate

        loss, acc = evaluate(model, ctx.split.X_test, ctx.split.y_test)
        return {"test_loss": loss, "acc": acc}

    @classmethod
    def client_train(cls, model: Any, ctx: ClientContext) -> dict[str, Any]:
        """Local training (``ClientUpdate``): E epochs of mini-batches B minimising :meth:`client_loss`.

        Returns
        -------
        dict
            ``train_loss`` (mean loss of the last epoch) and ``weights`` (P,) float32,
            the trained model sent to the server.
        """
        from fedray.nn.train import fit

        cfg = ctx.train_cfg
        losses = fit(model, (ctx.split.X_train, ctx.split.y_train),
                     lambda m, xb, yb: cls.client_loss(m, m(xb), yb, ctx), epochs=cfg["epochs"],
                     batch_size=cfg["batch_size"], lr=cfg["lr"], optimizer=cfg["optimizer"], rng=ctx.rng)
        return {"train_loss": losses[-1], "weights": ctx.weights(model)}

    @classmethod
    def client_loss(cls, model: Any, outputs: Any, targets: Any, ctx: ClientContext) -> Any:
        """The loss of one mini-batch: cross-entropy of ``outputs`` (b, n_classes) against ``targets`` (b,).

        Override to add terms: ``model`` has the current weights, ``ctx.start_tensors(model)``
        the weights the client started from, ``ctx.payload`` the algorithm's payload.
        Returns a scalar tensor.
        """
        from torch.nn import functional as F

        return F.cross_entropy(outputs, targets)

    # --- tasks -------------------------------------------------------------
    def client_payload(self) -> dict[str, Any]:
        """Entries the client hooks need, added to every payload (``ctx.payload``); default none."""
        return {}

    def eval_due(self, ctx: RoundContext) -> bool:
        return ctx.round % self.params.eval_every == 0

    def task_payload(self, train: bool, evaluate: bool, **extra: Any) -> dict[str, Any]:
        """The payload of a task: this class (whose hooks the client runs), the model spec,
        the training settings (when ``train``), ``eval``, plus :meth:`client_payload` and ``extra``."""
        p = self.params
        cfg = {"epochs": p.epochs, "batch_size": p.batch_size, "lr": p.lr, "optimizer": p.optimizer} if train else None
        return {"algorithm": type(self), "spec": self.spec, "train": cfg, "eval": evaluate,
                "test_fraction": p.test_fraction, "device": p.device, "stack_clients": p.stack_clients,
                **self.client_payload(), **extra}

    def make_tasks(self, ctx: RoundContext, train_clients: Iterable[int], evaluate: bool | None = None,
                   fn: ClientFn = client_round, **extra: Any) -> dict[int, Task]:
        """Tasks for this round: ``train_clients`` train their model; in evaluation rounds
        every other client evaluates its model. ``fn`` is the client function (default
        :func:`client_round`, which runs this class's hooks); ``extra`` goes into every payload."""
        evaluate = self.eval_due(ctx) if evaluate is None else evaluate
        train_set = sorted(set(int(c) for c in train_clients))
        pay_train = self.task_payload(True, evaluate, **extra)
        pay_eval = self.task_payload(False, True, **extra)
        tasks: dict[int, Task] = {}
        self._sent, self._sent_vec = {}, {}
        for cid in train_set:
            key = self.model_of[cid]
            self._sent[cid] = key
            self._sent_vec[cid] = self.models[key]
            tasks[cid] = Task(fn, pay_train, self.models[key])
        if evaluate:
            for cid in range(self.info.n_clients):
                if cid not in tasks:
                    tasks[cid] = Task(fn, pay_eval, self.models[self.model_of[cid]], evaluation=True)
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

    def average_into(self, replies: list[Reply], key_of: Mapping[int, Hashable] | None = None,
                     weighted: bool = True) -> list[Hashable]:
        """FedAvg per model key: theta_g = sum n_i w_i / sum n_i over trained clients with key g.

        ``key_of`` maps client id -> model key (default: the key it was sent).
        ``weighted=False`` gives every client the same weight, theta_g = mean_i w_i
        (the plain average of IFCA's and CFL's original code).
        Returns the keys updated; keys without a trained client keep their model.
        """
        key_of = self._sent if key_of is None else key_of
        groups: dict[Hashable, list[tuple[np.ndarray, int]]] = {}
        for cid, (w, n) in self.weights_of(replies).items():
            groups.setdefault(key_of[cid], []).append((w, max(n, 1) if weighted else 1))
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
            losses = np.array([r.update["test_loss"] for r in evals], dtype=np.float64)
            finite = losses[np.isfinite(losses)]
            out["test_loss"] = float(finite.mean()) if finite.size else float("nan")
            if finite.size < losses.size and not getattr(self, "_warned_diverged", False):
                self._warned_diverged = True  # once a run: the rounds table keeps the numbers
                log.warning("round %d: %d of %d evaluated clients have a non-finite test loss: their models "
                            "diverged, and their accuracy is that of a constant prediction; lower the step "
                            "sizes (algorithm.params.lr and the algorithm's own)",
                            ctx.round, losses.size - finite.size, losses.size)
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
        return Task(client_round,
                    self.task_payload(False, True, assign=[self.model_of[c] for c in range(self.info.n_clients)]),
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
        out: dict[str, Any] = {
            "assignment": self.assignment.copy(),
            "model_of": self.model_of.copy(),
            "weights": np.stack([self.models[k] for k in keys]),
            "model_keys": np.array([str(k) for k in keys]),
            "client_accuracy": self.client_acc.copy(),
        }
        if self.true_groups is not None:
            out["true_groups"] = self.true_groups.copy()
        return out


__all__ = ["SupervisedAlgorithm", "SupervisedParams"]
