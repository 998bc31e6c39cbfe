"""Federated fuzzy c-means equals central FCM on the union (Corcuera Bárcena et al. 2021)."""
from __future__ import annotations

import numpy as np
import pytest

import fedray


def reference_fcm(X, V, m, tol, max_iter):
    """Textbook FCM written independently of fedray.core.ops."""
    for _ in range(max_iter):
        d = np.linalg.norm(X[:, None, :] - V[None, :, :], axis=2)
        d = np.maximum(d, np.finfo(float).eps)
        ratio = (d[:, :, None] / d[:, None, :]) ** (2.0 / (m - 1.0))
        U = 1.0 / ratio.sum(axis=2)
        W = U ** m
        V_new = (W.T @ X) / W.sum(axis=0)[:, None]
        shift = np.linalg.norm(V_new - V)
        V = V_new
        if shift < tol:
            break
    return V


@pytest.mark.parametrize("scale", ["none", "minmax"])
def test_federated_fcm_equals_central_on_s1(data_dir, scale):
    cfg = fedray.make_config(
        algorithm={"name": "federated-fcm", "params": {"n_clusters": 15, "init": "random-box"}},
        data={"dataset": "benchmark:sipu/s1", "data_dir": str(data_dir), "scale": scale},
        federation={"n_clients": 20, "fraction": 1.0}, runtime={"backend": "local"}, seed=2)
    with fedray.Session(cfg) as s:
        res = s.run()
        X = np.vstack([p[1] for p in s.executor.gather_data()])
    V0 = res.model["initial_centers"]
    V_central = reference_fcm(X, V0, m=2.0, tol=0.005, max_iter=len(res.history))
    np.testing.assert_allclose(res.model["centers"], V_central, rtol=0, atol=1e-9 * np.abs(X).max())
    assert res.summary["converged"] or len(res.history) == 30


def test_central_baseline_reports_zero_distance_at_full_participation(data_dir, tmp_path):
    res = fedray.run(algorithm={"name": "federated-fcm", "params": {"n_clusters": 15, "init": "random-box"}},
                     data={"dataset": "benchmark:sipu/s1", "data_dir": str(data_dir), "scale": "minmax"},
                     federation={"n_clients": 20}, runtime={"backend": "local"}, central_baseline=True,
                     output=tmp_path / "out", seed=0)
    fin = res.final
    assert fin["center_distance_to_central"] < 1e-9
    assert fin["central_ari"] == pytest.approx(fin["ari"], abs=1e-9)
    for name in ("summary.json", "rounds.parquet", "clients.parquet", "model.npz", "config.yaml",
                 "plots/convergence.png", "plots/centers.png"):
        assert (tmp_path / "out" / name).exists(), name


def test_partial_participation_differs_but_stays_close(data_dir):
    kw = dict(algorithm={"name": "federated-fcm", "params": {"n_clusters": 15, "init": "random-box"}},
              data={"dataset": "benchmark:sipu/s1", "data_dir": str(data_dir), "scale": "minmax"},
              runtime={"backend": "local"}, seed=0)
    full = fedray.run(federation={"n_clients": 20, "fraction": 1.0}, **kw)
    half = fedray.run(federation={"n_clients": 20, "fraction": 0.5}, **kw)
    assert (half.history.loc[half.history.phase == "train", "clients_sampled"] == 10).all()
    assert not np.allclose(full.model["centers"], half.model["centers"])
    assert abs(full.final["ari"] - half.final["ari"]) < 0.1


def test_memberships_sum_to_one_and_predict_matches_argmax():
    res = fedray.run(algorithm={"name": "federated-fcm", "params": {"n_clusters": 3}},
                     data={"dataset": "sklearn:iris"}, federation={"n_clients": 4}, runtime={"backend": "local"})
    from fedray.data import load_dataset

    X = load_dataset("sklearn:iris").X
    U = res.predict_proba(X)
    np.testing.assert_allclose(U.sum(axis=1), 1.0)
    np.testing.assert_array_equal(U.argmax(axis=1), res.predict(X))
