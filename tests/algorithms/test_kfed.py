"""k-FED: one round, local k' centres, server k-means over them (Dennis et al. 2021)."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.core import calls
from fedray.core.errors import ConfigError, DataError


def _cfg(params, n_clients=8, **extra):
    return fedray.make_config(
        algorithm={"name": "kfed", "params": params},
        data={"dataset": "blobs", "options": {"n_centers": 6, "points_per_client": 120, "cluster_std": 0.4},
              "partition": {"name": "dirichlet", "alpha": 0.2}},
        federation={"n_clients": n_clients}, runtime={"backend": "local", "progress": False}, seed=3, **extra)


def test_one_shot_recovers_heterogeneous_blobs():
    res = fedray.run(_cfg({"n_clusters": 6, "local_clusters": 3}), output=False)
    assert res.summary["rounds"] == 1 and res.summary["converged"]
    # only k' centres and k' counts per client went up: 3 x (2 + 1) floats each
    assert res.history.iloc[0]["bytes_up"] <= 8 * 3 * 3 * 8
    assert res.final["ari"] > 0.95


def test_server_clusters_exactly_the_local_centres():
    from fedray.core.centers import local_centers
    from fedray.core.contract import Task
    from fedray.core.ops import kmeans
    from fedray.core.seeding import server_rng

    cfg = _cfg({"n_clusters": 6, "local_clusters": 4})
    with fedray.Session(cfg) as s:
        res = s.run(output=False)
        again = s.executor.execute(
            calls.train(0), {cid: Task(local_centers, {"k": 4}) for cid in range(s.info.n_clients)}
        )
        C = [r.update["centers"] for r in again.replies]  # the same round-0 client streams
    expected = kmeans(np.vstack(C), 6, server_rng(cfg.seed, 0, 7, 1), n_init=10)
    np.testing.assert_allclose(res.model["centers"], expected, atol=1e-12)


def test_too_few_local_centres_is_a_config_error():
    with pytest.raises(ConfigError, match="local_clusters"):
        with fedray.Session(_cfg({"n_clusters": 10, "local_clusters": 1}, n_clients=4)) as s:
            s.run(output=False)


def test_more_clusters_than_samples_is_a_data_error():
    with pytest.raises(DataError, match="n_clusters"):
        fedray.run(algorithm={"name": "kfed", "params": {"n_clusters": 200}},
                   data={"dataset": "sklearn:iris"}, federation={"n_clients": 3}, runtime={"backend": "local"})


def test_weighted_kmeans_plusplus_reads_noised_counts_as_weights_it_can_draw_from():
    """Counts noised by DP can be negative or not finite: such a row weighs 0 (never a centre while another
    has weight), and a seeding without any positive weight falls back to equal weights instead of raising."""
    import numpy as np

    from fedray.core.ops import kmeans_plusplus

    X = np.arange(12, dtype=float).reshape(6, 2)
    w = np.array([-3.0, 5.0, np.nan, 2.0, -np.inf, 4.0])
    for seed in range(20):
        C = kmeans_plusplus(X, 3, np.random.default_rng(seed), weights=w)
        rows = {int(r) for r in np.flatnonzero((X[:, None, :] == C[None]).all(axis=2).any(axis=1))}
        assert rows <= {1, 3, 5}
    C = kmeans_plusplus(X, 2, np.random.default_rng(0), weights=np.array([-1.0] * 6))
    assert C.shape == (2, 2) and np.isfinite(C).all()
