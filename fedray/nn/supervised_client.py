"""The client side of supervised federated learning: :class:`ClientContext` and the client function
:func:`client_round` (with its batched form) that runs a :class:`~fedray.nn.supervised.SupervisedAlgorithm`'s hooks."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedray.core.contract import batched
from fedray.nn.split import client_split


# --- what the client hooks see ----------------------------------------------------
@dataclass
class ClientContext:
    """One client's view of one supervised task, handed to the client hooks.

    Attributes
    ----------
    client : Client
        ``id``, ``state`` (a dict kept between rounds), ``rng`` (this client's seeded
        generator for the round; the only source of randomness a hook may use).
    payload : Mapping
        The task's payload: ``algorithm`` (the class whose hooks run), ``spec``,
        ``train`` (``{"epochs", "batch_size", "lr", "optimizer"}`` or None), ``eval``,
        ``test_fraction``, ``device``, plus what :meth:`SupervisedAlgorithm.client_payload`
        and ``make_tasks(..., **extra)`` added.
    split : Split
        The client's own split: ``X_train`` (n_train, *sample_shape), ``y_train``
        (n_train,), ``X_test``, ``y_test`` (:func:`fedray.nn.split.client_split`).
    start : ndarray of shape (P,), float32
        The weights the client started from (what :meth:`SupervisedAlgorithm.choose_model`
        returned); None until the model is chosen.
    out : dict
        The reply under construction (``n``, ``n_test``; hooks may add entries).
    """

    client: Any
    payload: Mapping[str, Any]
    split: Any
    start: np.ndarray | None = None
    out: dict[str, Any] = field(default_factory=dict)
    _start_tensors: Any = field(default=None, repr=False)

    @property
    def rng(self) -> np.random.Generator:
        """The client's generator for this round (seeded by seed, client id and round)."""
        return self.client.rng

    @property
    def state(self) -> dict[str, Any]:
        """The client's persistent state (kept between rounds and runs of a session)."""
        return self.client.state

    @property
    def train_cfg(self) -> dict[str, Any]:
        """``{"epochs", "batch_size", "lr", "optimizer"}`` of a training task (empty otherwise)."""
        return dict(self.payload.get("train") or {})

    def start_tensors(self, model: Any) -> list[Any]:
        """The start weights as torch tensors shaped like ``model.parameters()`` (no gradient, cached)."""
        if self._start_tensors is None:
            import torch

            params = list(model.parameters())
            flat = torch.from_numpy(np.array(self.start, dtype=np.float32, copy=True)).to(params[0].device)
            out, i = [], 0
            for p in params:
                out.append(flat[i:i + p.numel()].view_as(p))
                i += p.numel()
            self._start_tensors = out
        return self._start_tensors

    def weights(self, model: Any) -> np.ndarray:
        """The model's trainable parameters as a float32 vector of shape (P,)."""
        from fedray.nn.train import get_flat

        return get_flat(model)

    def load(self, model: Any, weights: np.ndarray | None = None) -> None:
        """Load ``weights`` (P,) into ``model`` (default: the start weights)."""
        from fedray.nn.train import set_flat

        set_flat(model, self.start if weights is None else weights)

    def batches(self, epochs: int | None = None, batch_size: int | None = None) -> Iterator[tuple[Any, Any]]:
        """Mini-batches ``(xb, yb)`` of the training rows as tensors on the model's device.

        Each epoch visits the rows in the order ``self.rng.permutation(n_train)``, as the
        built-in training loop does (``epochs`` and ``batch_size`` default to the task's
        E and B). The generator draws each epoch's order when it reaches it.
        """
        import torch

        from fedray.nn.train import resolve_device

        cfg = self.train_cfg
        epochs = int(cfg["epochs"] if epochs is None else epochs)
        batch_size = int(cfg["batch_size"] if batch_size is None else batch_size)
        X, y = self.train_tensors(resolve_device(self.payload.get("device", "auto")))
        n = int(y.shape[0])
        for _ in range(epochs if n else 0):
            perm = torch.from_numpy(self.rng.permutation(n)).to(y.device)
            for s in range(0, n, batch_size):
                idx = perm[s:s + batch_size]
                yield X[idx], y[idx]

    def train_tensors(self, device: Any = None) -> tuple[Any, Any]:
        """All training rows as tensors ``(X (n_train, *sample_shape) float32, y (n_train,) int64)``."""
        from fedray.nn.train import resolve_device, tensor

        dev = resolve_device(self.payload.get("device", "auto")) if device is None else device
        return tensor(self.split.X_train, dev), tensor(self.split.y_train, dev)


# --- the client function --------------------------------------------------------
def _trains_by_default(algorithm: Any) -> bool:
    """Whether ``algorithm``'s local training is the base's: ``client_train`` and ``client_loss`` resolve to
    the first definition in its class hierarchy (the base's), not to an override."""
    cls = algorithm if isinstance(algorithm, type) else type(algorithm)
    for hook in ("client_train", "client_loss"):
        defs = [k.__dict__[hook] for k in cls.__mro__ if hook in k.__dict__]
        if not defs:
            return False
        base = getattr(defs[-1], "__func__", defs[-1])
        if getattr(getattr(algorithm, hook, None), "__func__", None) is not base:
            return False
    return True


def client_round_many(payloads: list[Mapping[str, Any]], shared: list[Any], batch: Any) -> list[dict[str, Any]]:
    """:func:`client_round` for the clients of one host at once (its batched form, :func:`fedray.batched`,
    declared with ``shared="each"``: ``shared[i]`` is client i's shared object, so the clients of
    all the clusters' models train in one call).

    Every client chooses its model and evaluates as in :func:`client_round`, in client-id
    order. Clients whose class trains by the base's hooks (``client_train`` and
    ``client_loss`` not overridden) and whose network is worth stacking
    (:func:`fedray.nn.batched.clients_per_chunk`: small networks on the CPU, any on a
    GPU) then train together, one stacked copy of the network each
    (:func:`fedray.nn.batched.fit_many`), grouped by network and training settings;
    the others run their own ``client_train``. Each client draws its batch
    order from its own generator, so the result equals :func:`client_round`'s client by
    client up to float rounding.
    """
    from fedray.nn.batched import clients_per_chunk, fit_many
    from fedray.nn.train import model_for, torch_threads

    contexts: list[ClientContext] = []
    groups: dict[tuple[Any, ...], list[int]] = {}
    chunks: dict[tuple[Any, ...], int] = {}
    with torch_threads():
        for i, (payload, client) in enumerate(zip(payloads, batch.clients)):
            algorithm = payload["algorithm"]
            split = client_split(client, float(payload.get("test_fraction", 0.15)))
            model = model_for(payload["spec"], payload.get("device", "auto"))
            ctx = ClientContext(client, payload, split, out={"n": split.n_train, "n_test": split.n_test})
            contexts.append(ctx)
            ctx.start = algorithm.choose_model(model, shared[i], ctx)
            ctx.load(model)
            if payload.get("eval"):
                ctx.out.update(algorithm.client_evaluate(model, ctx))
            if not payload.get("train"):
                continue
            chunk = _trains_by_default(algorithm) and clients_per_chunk(
                model, tuple(payload["spec"]["sample_shape"]), int(ctx.train_cfg["batch_size"]),
                payload.get("stack_clients", "gpu"))
            if chunk:
                spec = payload["spec"]
                key = (spec["name"], tuple(spec["sample_shape"]), int(spec["n_classes"]), int(spec["seed"]),
                       str(payload.get("device", "auto")), *sorted(ctx.train_cfg.items()))
                groups.setdefault(key, []).append(i)
                chunks[key] = chunk
            else:
                ctx.out.update(algorithm.client_train(model, ctx))
        for key, members in groups.items():
            first = contexts[members[0]]
            cfg = first.train_cfg
            model = model_for(first.payload["spec"], first.payload.get("device", "auto"))
            weights, losses = fit_many(
                model, np.stack([np.asarray(contexts[i].start, dtype=np.float32) for i in members]),
                [(contexts[i].split.X_train, contexts[i].split.y_train) for i in members],
                [contexts[i].rng for i in members], epochs=cfg["epochs"], batch_size=cfg["batch_size"],
                lr=cfg["lr"], optimizer=cfg["optimizer"], chunk=chunks[key])
            for j, i in enumerate(members):
                contexts[i].out.update({"train_loss": float(losses[j]), "weights": weights[j].copy()})
    return [ctx.out for ctx in contexts]


@batched(client_round_many, shared="each", split=False)
def client_round(payload: Mapping[str, Any], shared: Any, client: Any) -> dict[str, Any]:
    """The client function of every supervised algorithm: choose, evaluate, train.

    Runs the hooks of ``payload["algorithm"]`` (a :class:`SupervisedAlgorithm`
    subclass, sent by reference) on the client's own split, in this order:
    ``choose_model`` -> load it -> ``client_evaluate`` (when ``payload["eval"]``)
    -> ``client_train`` (when ``payload["train"]``).

    Parameters
    ----------
    payload : dict
        See :class:`ClientContext`.
    shared : ndarray (P,), ndarray (k, P), mapping key -> ndarray (P,), or None
        The model(s) sent by the server.
    client : Client

    Returns
    -------
    dict
        ``n`` (training rows), ``n_test``; with ``eval``: what ``client_evaluate`` returns
        (``test_loss``, ``acc``); with ``train``: what ``client_train`` returns
        (``train_loss`` and ``weights`` float32 (P,)); hooks may add more (IFCA: ``cluster``).
    """
    from fedray.nn.train import model_for, torch_threads

    algorithm = payload["algorithm"]
    split = client_split(client, float(payload.get("test_fraction", 0.15)))
    model = model_for(payload["spec"], payload.get("device", "auto"))
    ctx = ClientContext(client, payload, split, out={"n": split.n_train, "n_test": split.n_test})
    with torch_threads():
        ctx.start = algorithm.choose_model(model, shared, ctx)
        ctx.load(model)
        if payload.get("eval"):
            ctx.out.update(algorithm.client_evaluate(model, ctx))
        if payload.get("train"):
            ctx.out.update(algorithm.client_train(model, ctx))
    return ctx.out
