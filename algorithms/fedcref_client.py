"""Client functions of FedCRef (Pisa / IIT-CNR 2025, Algorithms 1 and 2).

They run inside the client actors; torch is imported inside each function, so
importing this module (and :mod:`fedray.algorithms.fedcref`) does not import torch.
A client keeps in ``client.state``:

``fc_labels`` (n,) its current local clusters; ``fc_weights`` (K, P) its cluster
autoencoders (float32); ``fc_warm`` (K, P) or None, weights to start the next
training from; ``fc_active`` whether it still refines; ``fc_retrain`` whether it
must retrain once on its final labels.

Only ``fc_init`` (for ``init="dirty"`` or ``local_k="true"``) and ``fc_evaluate``
read labels; they run as evaluation tasks. Everything else sees no labels.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedray.algorithms.fedcref_rules import (
    align_labels,
    association_statistic,
    refine_labels,
    stability,
)
from fedray.core.contract import batched
from fedray.core.errors import DataError
from fedray.core.metrics import contingency
from fedray.core.ops import assign, kmeans


def _who(client: Any) -> str:
    return f"client {client.name or client.id}"


def _compact(labels: np.ndarray) -> np.ndarray:
    _, inv = np.unique(labels, return_inverse=True)
    return inv.astype(np.int64)


def initial_labels(payload: dict, X: np.ndarray, y: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """Initial local clustering (``dirty``, ``kmeans`` or ``dec``); labels (n,) in 0..K-1."""
    init, n = payload["init"], X.shape[0]
    k = payload["local_k"]
    if k == "true":
        k = int(np.unique(y).size)
    if init == "dirty":
        labels = _compact(y)
        k_true = int(labels.max()) + 1
        moved = rng.choice(n, size=int(round(payload["dirtiness"] * n)), replace=False)
        if k_true > 1 and moved.size:
            shift = rng.integers(1, k_true, size=moved.size)
            labels[moved] = (labels[moved] + shift) % k_true
        return labels
    if init == "kmeans":

        if k == "silhouette":
            return _by_silhouette(X, payload["k_range"], rng, lambda Z, kk: assign(Z, kmeans(Z, kk, rng, n_init=3))[0])
        return assign(X, kmeans(X, int(k), rng, n_init=3))[0]
    from fedray.nn.autoencoder import dec_cluster

    kw = dict(
        hidden=tuple(payload["dec_hidden"]),
        output=payload["output"],
        pretrain_epochs=payload["dec_pretrain_epochs"],
        dec_epochs=payload["dec_epochs"],
        seed=payload["seed"],
    )
    if k == "silhouette":
        return _by_silhouette(X, payload["k_range"], rng, lambda Z, kk: dec_cluster(Z, kk, rng, **kw))
    return _compact(dec_cluster(X, int(k), rng, **kw))


def _who_n(n: int, k: int) -> str:
    return f"{n} samples but {k} local clusters; a client needs at least as many samples as local clusters"


def _by_silhouette(X: np.ndarray, k_range: list[int], rng: np.random.Generator, cluster: Any) -> np.ndarray:
    from sklearn.metrics import silhouette_score

    best, best_s = None, -np.inf
    for k in range(int(k_range[0]), int(k_range[1]) + 1):
        if k >= X.shape[0]:
            break
        lab = _compact(cluster(X, k))
        if np.unique(lab).size < 2:
            continue
        s = silhouette_score(X, lab, sample_size=min(1000, X.shape[0]), random_state=0)
        if s > best_s:
            best, best_s = lab, s
    if best is None:
        raise DataError(f"{X.shape[0]} samples: no number of clusters in {list(k_range)} gives two non-empty clusters")
    return best


def fc_init(payload: dict, shared: Any, client: Any) -> dict[str, Any]:
    """Initial local clustering; stores ``fc_labels``; returns ``{"k", "n"}``."""
    X = client.data.X
    needs_y = payload["init"] == "dirty" or payload["local_k"] == "true"
    y = client.labels if needs_y else None
    k = payload["local_k"]
    if k == "true":
        k = int(np.unique(y).size)
    if isinstance(k, int) and X.shape[0] < k:
        raise DataError(f"{_who(client)}: {_who_n(X.shape[0], k)}")
    labels = initial_labels(payload, X, y, client.rng)
    st = client.state
    st.update(fc_labels=labels, fc_weights=None, fc_warm=None, fc_active=True, fc_retrain=False)
    return {"k": int(labels.max()) + 1, "n": int(X.shape[0])}


def _start(st: dict, p: int, spec: dict) -> np.ndarray:
    from fedray.nn.autoencoder import initial_ae_weights

    warm = st.get("fc_warm")
    return warm[p] if warm is not None and p < len(warm) else initial_ae_weights(spec)


def fc_train_many(payloads: list[dict], shared: dict, batch: Any) -> list[dict[str, np.ndarray]]:
    """:func:`fc_train` for all of a host's clients: every autoencoder of every client trains in one
    stacked batch (:func:`fedray.nn.batched.fit_many`); each client's generator gives its clusters'
    batch orders in cluster order, as :func:`fc_train` draws them. Equal to it up to float rounding."""
    from fedray.nn.autoencoder import ae_for
    from fedray.nn.batched import clients_per_chunk, fit_many

    model = ae_for(shared["spec"])
    chunk = clients_per_chunk(model, (int(shared["spec"]["n_features"]),), int(shared["batch_size"]),
                              shared.get("stack_clients", "gpu"))
    if not chunk:  # not stacked here (see FedCRefParams.stack_clients): the plain function, client by client
        return [fc_train(p, shared, c) for p, c in zip(payloads, batch.clients)]
    starts, data, rngs, owner = [], [], [], []
    for i, client in enumerate(batch.clients):
        st, X = client.state, client.data.X
        labels = st["fc_labels"]
        rng = client.rng
        for p in range(int(labels.max()) + 1):
            starts.append(_start(st, p, shared["spec"]))
            data.append((X[labels == p],))
            rngs.append(rng)
            owner.append(i)
    W, _ = fit_many(model, np.stack(starts).astype(np.float32), data, rngs, epochs=shared["epochs"],
                    batch_size=shared["batch_size"], lr=shared["lr"], optimizer="adam", loss="mse", chunk=chunk)
    owner_a = np.asarray(owner)
    out = []
    for i, client in enumerate(batch.clients):
        st, labels = client.state, client.state["fc_labels"]
        Wi = W[owner_a == i].copy()
        st["fc_weights"], st["fc_retrain"], st["fc_warm"] = Wi, False, None
        out.append({"weights": Wi, "sizes": np.bincount(labels, minlength=len(Wi)).astype(np.int64)})
    return out


@batched(fc_train_many, split=False)
def fc_train(payload: dict, shared: dict, client: Any) -> dict[str, np.ndarray]:
    """Phase 1: one autoencoder per local cluster; returns ``{"weights": (K, P), "sizes": (K,)}``."""
    from fedray.nn.autoencoder import ae_for, initial_ae_weights, train_autoencoder
    from fedray.nn.train import get_flat, set_flat

    st, X = client.state, client.data.X
    labels = st["fc_labels"]
    k = int(labels.max()) + 1
    model = ae_for(shared["spec"])
    W = np.zeros((k, initial_ae_weights(shared["spec"]).size), dtype=np.float32)
    for p in range(k):
        warm = st.get("fc_warm")
        set_flat(model, warm[p] if warm is not None and p < len(warm) else initial_ae_weights(shared["spec"]))
        Xp = X[labels == p]
        if len(Xp):
            train_autoencoder(model, Xp, epochs=shared["epochs"], batch_size=shared["batch_size"], lr=shared["lr"],
                              rng=client.rng)
        W[p] = get_flat(model)
    st["fc_weights"], st["fc_retrain"], st["fc_warm"] = W, False, None
    return {"weights": W, "sizes": np.bincount(labels, minlength=k).astype(np.int64)}


def fc_exchange(payload: dict, shared: dict, client: Any) -> np.ndarray:
    """Phase 2: statistics of the own clusters against every foreign cluster model.

    Returns
    -------
    ndarray of shape (K, M)
        ``[p, j]`` = :func:`association_statistic` of cluster p (own model vs model
        j); NaN for the client's own models.
    """
    from fedray.nn.autoencoder import ae_for, errors_matrix

    st, X = client.state, client.data.X
    labels = st["fc_labels"]
    owner = shared["owner"]
    model = ae_for(shared["spec"])
    E = errors_matrix(model, shared["weights"], X)           # (n, M): every model on every own sample
    own = np.flatnonzero(owner == client.id)
    k = int(labels.max()) + 1
    out = np.full((k, len(owner)), np.nan)
    for p in range(k):
        rows = labels == p
        if rows.sum() == 0:
            continue
        for j in np.flatnonzero(owner != client.id):
            out[p, j] = association_statistic(E[rows, own[p]], E[rows, j], shared["percentile"],
                                              shared.get("normalisation", "cluster"), shared.get("equal", 0.0))
    return out


def fc_federate(payload: list[tuple[int, int]], shared: dict, client: Any) -> dict[str, np.ndarray]:
    """Phase 3: one FedAvg round for each community the client's clusters belong to.

    ``payload`` = ``[(community, own cluster), ...]``; returns the trained weights
    ``(J, P)`` and sample counts ``(J,)`` in that order. With ``shared["fresh"]`` (seeds, one per
    community) each community starts from a fresh model of its seed instead of ``shared["community"]``. With
    ``shared["trim"]`` =
    q > 0 a client trains on the ``ceil((1 - q) n)`` samples of its cluster that the
    community model reconstructs best (ties in sample order) and counts only those.
    """
    from fedray.nn.autoencoder import ae_for, initial_ae_weights, reconstruction_errors, train_autoencoder
    from fedray.nn.train import get_flat, set_flat

    X, labels = client.data.X, client.state["fc_labels"]
    trim = float(shared.get("trim", 0.0))
    fresh = shared.get("fresh")
    model = ae_for(shared["spec"])
    W = np.zeros((len(payload), shared["community"].shape[1]), dtype=np.float32)
    n = np.zeros(len(payload), dtype=np.int64)
    for j, (c, p) in enumerate(payload):
        start = shared["community"][c] if fresh is None else \
            initial_ae_weights({**shared["spec"], "seed": int(fresh[c])}, cache=False)
        set_flat(model, start)
        Xp = X[labels == p]
        if trim > 0 and len(Xp) > 1:
            keep = int(np.ceil((1.0 - trim) * len(Xp)))
            Xp = Xp[np.sort(np.argsort(reconstruction_errors(model, Xp), kind="stable")[:keep])]
        if len(Xp):
            train_autoencoder(model, Xp, epochs=shared["epochs"], batch_size=shared["batch_size"], lr=shared["lr"],
                              rng=client.rng)
        W[j], n[j] = get_flat(model), len(Xp)
    return {"weights": W, "n": n}


def fc_refine(payload: dict, shared: dict, client: Any) -> dict[str, Any]:
    """Phase 4 (Algorithm 2) on the client's own models plus every community model.

    ``payload["communities"]`` (``candidates="member"``) limits the community models
    to those indices; None offers every one (the paper).  ``payload["replaced"]``
    (``candidates="replace"``) lists the client's clusters that are in a community:
    their own models leave the candidates and the community models stand in.
    New labels are renumbered to the old ones (Hungarian); a client whose
    agreement with its previous labels exceeds the stability threshold stops
    refining and is marked to retrain its models once on its final labels.
    """
    from fedray.nn.autoencoder import ae_for, errors_matrix

    st, X = client.state, client.data.X
    old = st["fc_labels"]
    own = st["fc_weights"]
    comm = shared["community"]
    if comm is not None and payload.get("communities") is not None:   # candidates="member"
        comm = comm[np.asarray(payload["communities"], dtype=np.int64)]
    if comm is not None and payload.get("replaced"):   # candidates="replace": a community model stands in
        own = np.delete(own, np.asarray(payload["replaced"], dtype=np.int64), axis=0)
    cand = own if comm is None or not len(comm) else np.vstack([own, comm])
    E = errors_matrix(ae_for(shared["spec"]), cand, X)
    raw, selected = refine_labels(E, int(old.max()) + 1)
    new = _compact(align_labels(raw, old))
    stab = stability(new, old)
    if payload.get("warm"):   # start the next training of each new cluster from the candidate that formed it
        source = {int(a): selected[int(r)] for r, a in zip(raw, new)}
        st["fc_warm"] = np.stack([cand[source[a]] for a in range(int(new.max()) + 1)])
    st["fc_labels"] = new
    if stab > shared["stability"] and shared.get("may_stop", True):
        st["fc_active"], st["fc_retrain"] = False, True
    n_comm = int(np.sum(np.asarray(selected) >= len(own)))
    return {"stability": stab, "active": bool(st["fc_active"]), "k": int(new.max()) + 1,
            "changed": float(np.mean(new != old)) if new.shape == old.shape else 1.0, "community_models": n_comm}


def fc_evaluate(payload: dict, shared: Any, client: Any) -> np.ndarray:
    """Evaluation only: contingency table (K, n_classes) of the current local clusters vs the true labels."""

    labels, y = client.state["fc_labels"], client.labels
    return contingency(labels, y, int(labels.max()) + 1, int(payload["n_classes"]))
