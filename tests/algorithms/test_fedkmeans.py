"""Federated K-means (Triebe & Rajagopal 2019): reduces to federated Lloyd; rates, batches, reassignment."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.algorithms.fedkmeans import client_minibatch_kmeans
from fedray.core.errors import ConfigError
from fedray.data import load_dataset
from fedray.loop.server import Server


class _Client:
    def __init__(self, X, seed=0):
        self.data = type("D", (), {"X": np.asarray(X, dtype=float)})()
        self.rng = np.random.default_rng(seed)


def _config(name, params, **fed):
    return fedray.make_config(algorithm={"name": name, "params": params},
                              data={"dataset": "sklearn:wine", "scale": "standard",
                                    "partition": {"name": "dirichlet", "alpha": 0.5}},
                              federation={"n_clients": 6, **fed}, runtime={"backend": "local", "progress": False})


def _trajectory(session, name, params, rounds):
    alg = session.make_algorithm(name, params)
    server = Server(alg, session.executor, seed=session.config.seed, max_rounds=rounds)
    out = []
    while server.step() is not None:
        out.append(alg.centers.copy())
    return out


def test_alpha_beta_one_full_batch_equals_federated_lloyd_every_round():
    ds = load_dataset("sklearn:wine")
    X = (ds.X - ds.X.mean(0)) / ds.X.std(0)
    C0 = X[[0, 60, 130]]
    common = {"n_clusters": 3, "init": C0.tolist(), "tol": 1e-12, "max_rounds": 12}
    with fedray.Session(_config("kmeans", common)) as s:
        lloyd = _trajectory(s, "kmeans", common, 12)
        fed = _trajectory(s, "fedkmeans", {**common, "alpha": 1.0, "beta": 1.0, "epochs": 1, "batch_size": None}, 12)
    assert len(fed) == len(lloyd) >= 3
    for a, b in zip(fed, lloyd):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)


def test_server_rate_moves_part_of_the_way():
    common = {"n_clusters": 3, "init": "random-box", "max_rounds": 1}
    with fedray.Session(_config("fedkmeans", common)) as s:
        full = _trajectory(s, "fedkmeans", {**common, "alpha": 1.0}, 1)[0]
        half_alg = s.make_algorithm("fedkmeans", {**common, "alpha": 0.5})
        C0 = half_alg.centers.copy()
        Server(half_alg, s.executor, seed=0, max_rounds=1).run()
    np.testing.assert_allclose(half_alg.centers, C0 + 0.5 * (full - C0), atol=1e-12)


@pytest.mark.parametrize("batch_size", [None, 1, 7])
def test_one_cluster_client_centroid_is_the_running_mean(batch_size):
    X = np.random.default_rng(0).normal(size=(40, 3))
    out = client_minibatch_kmeans({"beta": 1.0, "epochs": 1, "batch_size": batch_size}, np.zeros((1, 3)), _Client(X))
    assert out["counts"][0] == 40
    np.testing.assert_allclose(out["weighted"][0] / 40, X.mean(axis=0), atol=1e-12)


def test_client_rate_and_counts_of_last_epoch():
    X = np.random.default_rng(1).normal(size=(30, 2))
    one = client_minibatch_kmeans({"beta": 0.5, "epochs": 1, "batch_size": None}, np.zeros((1, 2)), _Client(X))
    np.testing.assert_allclose(one["weighted"][0] / 30, 0.5 * X.mean(axis=0), atol=1e-12)
    three = client_minibatch_kmeans({"beta": 0.5, "epochs": 3, "batch_size": 4}, np.zeros((1, 2)), _Client(X))
    assert three["counts"][0] == 30  # sizes are reset every epoch


def test_same_seed_same_bits_with_minibatches_and_sampling():
    params = {"n_clusters": 4, "alpha": 0.5, "beta": 0.5, "epochs": 3, "batch_size": 5, "momentum": 0.5,
              "max_rounds": 15}
    runs = [fedray.run(_config("fedkmeans", params, fraction=0.5), output=False) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].centers, runs[1].centers)
    other = fedray.run(fedray.make_config(_config("fedkmeans", params, fraction=0.5), seed=1), output=False)
    assert not np.array_equal(other.centers, runs[0].centers)


def test_cluster_that_stays_small_is_reassigned():
    ds = load_dataset("sklearn:iris")
    far = np.full((1, 4), 50.0)
    C0 = np.vstack([ds.X[[0, 50, 100]], far])
    cfg = fedray.make_config(algorithm={"name": "fedkmeans", "params": {
        "n_clusters": 4, "init": C0.tolist(), "reassign_after": 3, "max_rounds": 3}},
        data={"dataset": "sklearn:iris"}, federation={"n_clients": 3}, runtime={"backend": "local"})
    res = fedray.run(cfg, output=False)
    assert res.history["reassigned"].tolist() == [0.0, 0.0, 1.0]
    lo, hi = ds.X.min(axis=0), ds.X.max(axis=0)
    assert np.all(res.centers[3] >= lo) and np.all(res.centers[3] <= hi)


@pytest.mark.parametrize("base,reassigned", [("all", 1.0), ("round", 0.0)])
def test_small_means_under_one_percent_of_all_points_not_of_the_round(base, reassigned):
    """The paper's rule: size < 0.01 * sum_i |P_i| over every client. A cluster with 1 of the
    50 points of the one sampled client (2 % of the round, 0.67 % of all 150) is small."""
    from fedray.core.contract import Reply, RoundContext
    from fedray.core.stats import Stats

    cfg = fedray.make_config(algorithm={"name": "fedkmeans", "params": {
        "n_clusters": 2, "init": [[5.0, 3.0, 1.5, 0.2], [6.5, 3.0, 5.5, 2.0]], "reassign_after": 1,
        "reassign_of": base}}, data={"dataset": "sklearn:iris"}, federation={"n_clients": 3},
        runtime={"backend": "local", "progress": False})
    with fedray.Session(cfg) as s:
        alg = s.make_algorithm()
        assert alg.info.total_samples == 150
        counts = np.array([49.0, 1.0])
        reply = Reply(0, Stats(counts=counts, weighted=counts[:, None] * alg.centers, sse=np.array(1.0)))
        metrics = alg.update(RoundContext(0, 0, (0,), alg.info, 1 / 3), [reply])
    assert metrics["reassigned"] == reassigned


@pytest.mark.parametrize("key,value", [("alpha", 0), ("beta", 1.5), ("epochs", 0), ("batch_size", 0),
                                       ("momentum", 1.0)])
def test_bad_hyperparameters_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key):
        _config("fedkmeans", {key: value})
