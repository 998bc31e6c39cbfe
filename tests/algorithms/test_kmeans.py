"""Federated Lloyd k-means: one round is one Lloyd step on the union."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans

import fedray
from fedray.core.errors import EmptyClusterWarning
from fedray.data import load_dataset


def _union(session):
    parts = session.executor.gather_data()
    return np.vstack([p[1] for p in parts]), np.concatenate([p[2] for p in parts])


@pytest.mark.parametrize("dataset,k,n_clients", [("sklearn:wine", 3, 7), ("sklearn:breast_cancer", 4, 12)])
def test_one_round_equals_sklearn_lloyd_step(dataset, k, n_clients):
    ds = load_dataset(dataset)
    distinct = np.unique(ds.X, axis=0)  # distinct starting centres: no exact ties between centres
    C0 = distinct[np.random.default_rng(3).choice(len(distinct), k, replace=False)]
    cfg = fedray.make_config(algorithm={"name": "kmeans", "params": {"n_clusters": k, "init": C0.tolist()}},
                             data={"dataset": dataset, "partition": {"name": "dirichlet", "alpha": 0.5}},
                             federation={"n_clients": n_clients, "rounds": 1}, runtime={"backend": "local"})
    with fedray.Session(cfg) as s:
        res = s.run()
        X, _ = _union(s)
    ref = KMeans(n_clusters=k, init=C0, n_init=1, max_iter=1, algorithm="lloyd").fit(X)
    assert len(res.history) == 1
    np.testing.assert_allclose(res.centers, ref.cluster_centers_, rtol=1e-9, atol=1e-9)


def test_rounds_follow_lloyd_to_convergence():
    ds = load_dataset("sklearn:iris")
    C0 = ds.X[[0, 50, 100]]
    res = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "init": C0.tolist()}},
                     data={"dataset": "sklearn:iris"}, federation={"n_clients": 5}, runtime={"backend": "local"})
    ref = KMeans(n_clusters=3, init=C0, n_init=1, algorithm="lloyd", tol=0).fit(ds.X)
    np.testing.assert_allclose(res.centers, ref.cluster_centers_, atol=1e-9)
    assert res.summary["converged"]
    assert res.final["ari"] > 0.7


def test_empty_cluster_keeps_centre_and_warns():
    ds = load_dataset("sklearn:iris")
    C0 = np.vstack([ds.X[[0, 50]], np.full((1, 4), 1e3)])
    with pytest.warns(EmptyClusterWarning, match="cluster"):
        res = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "init": C0.tolist()}},
                         data={"dataset": "sklearn:iris"}, federation={"n_clients": 3, "rounds": 2},
                         runtime={"backend": "local"})
    np.testing.assert_array_equal(res.centers[2], C0[2])
    assert np.isfinite(res.centers).all()


def test_kfed_init_uses_only_local_centres_and_finds_blobs():
    res = fedray.run(
        algorithm={"name": "kmeans", "params": {"n_clusters": 4}},
        data={"dataset": "blobs", "options": {"n_centers": 4, "points_per_client": 150, "cluster_std": 0.5}},
        federation={"n_clients": 6},
        runtime={"backend": "local"},
        seed=4,
    )
    h = res.history
    assert h.iloc[0]["phase"] == "init"
    # the init round carries 4 centres x 2 features + 4 counts per client, nothing the size of a shard
    assert h.iloc[0]["bytes_up"] == 6 * (4 * 2 + 4) * 8
    assert res.final["ari"] > 0.95


def test_predict_and_scaling_round_trip():
    res = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                     data={"dataset": "sklearn:wine", "scale": "standard"}, federation={"n_clients": 4},
                     runtime={"backend": "local"}, seed=1)
    ds = load_dataset("sklearn:wine")
    mean, std = ds.X.mean(axis=0), ds.X.std(axis=0)
    # scaler computed from client sums equals the pooled one
    np.testing.assert_allclose(res.scaler[0], mean, rtol=1e-10)
    np.testing.assert_allclose(res.scaler[1], std, rtol=1e-8)
    pred = res.predict(ds.X)
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(ds.y, pred) == pytest.approx(res.final["ari"], abs=1e-12)
