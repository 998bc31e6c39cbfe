"""FedFCM with k-means averaging and the fedfcm-avg variant (Stallmann & Wilbik 2022)."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.analysis.validation import center_distances
from fedray.core.errors import ConfigError, DataError
from fedray.core.ops import fcm
from fedray.data.scenarios import MOTIVATIONAL_CENTERS

MOTIVATIONAL = {"dataset": "scenario:stallmann-motivational"}
LOCAL = {"backend": "local", "progress": False}


def test_k_means_averaging_recovers_the_five_global_centres():
    res = fedray.run(algorithm={"name": "fedfcm", "params": {"n_clusters": 5}}, data=MOTIVATIONAL, runtime=LOCAL)
    assert res.summary["n_clients"] == 3
    assert res.summary["converged"]
    assert np.all(center_distances(res.centers, MOTIVATIONAL_CENTERS) < 0.05)
    assert res.final["fuzzy_db"] == pytest.approx(0.4289, abs=0.03)  # paper, Table 1


def test_stops_when_the_sum_of_centre_moves_is_below_epsilon():
    res = fedray.run(algorithm={"name": "fedfcm", "params": {"n_clusters": 4, "tol": 1e-6}}, data=MOTIVATIONAL,
                     runtime=LOCAL)
    shifts = res.history["center_shift"].to_numpy()
    assert res.summary["converged"] and shifts[-1] <= 1e-6
    assert np.all(shifts[1:-1] > 1e-6)  # round 0 has no previous centres (NaN)


def test_one_round_is_local_fcm_to_convergence_from_the_global_centres():
    C0 = np.array([[0.1, 0.1], [0.9, 0.1], [0.5, 0.9]])
    cfg = fedray.make_config(algorithm={"name": "fedfcm", "params": {"n_clusters": 3, "init": C0.tolist(),
                                                                      "max_rounds": 1, "local_tol": 1e-5}},
                             data=MOTIVATIONAL, runtime=LOCAL)
    with fedray.Session(cfg) as s:
        res = s.run(output=False)
        shards = [p[1] for p in s.executor.gather_data(labels=False)]
    local = np.vstack([fcm(X, C0, m=2.0, tol=1e-5, max_iter=1000)[0] for X in shards])
    # the server's k-means, warm-started from C0, groups the 9 local centres: each global centre
    # is the mean of the local centres nearest to it
    from fedray.core.ops import lloyd

    np.testing.assert_allclose(res.model["centers"], lloyd(local, C0)[0], atol=1e-12)


def test_fedavg_variant_is_the_support_weighted_mean_per_index():
    from fedray.algorithms.fedfcm import FedFCMAvg

    alg = FedFCMAvg.__new__(FedFCMAvg)
    alg.centers = np.zeros((2, 2))
    local = np.array([[[0.0, 0.0], [1.0, 1.0]], [[2.0, 0.0], [3.0, 3.0]]])
    support = np.array([[1.0, 3.0], [3.0, 0.0]])
    out = alg.combine(None, local, support)
    np.testing.assert_allclose(out, [[1.5, 0.0], [1.0, 1.0]])


def test_fedavg_variant_fails_where_k_means_averaging_succeeds():
    """Table 2 of the paper: without a grouping of local centres the non-IID clients mislead the average."""
    kw = dict(data=MOTIVATIONAL, runtime=LOCAL)
    good = fedray.run(algorithm={"name": "fedfcm", "params": {"n_clusters": 5}}, **kw)
    avg = fedray.run(algorithm={"name": "fedfcm-avg", "params": {"n_clusters": 5, "max_rounds": 30}}, **kw)
    assert avg.final["fuzzy_db"] > good.final["fuzzy_db"] + 0.3
    assert np.max(center_distances(avg.centers, MOTIVATIONAL_CENTERS)) > 0.2


def test_same_seed_same_bits():
    kw = dict(algorithm={"name": "fedfcm", "params": {"n_clusters": 3}}, data={"dataset": "sklearn:iris",
              "scale": "standard"}, federation={"n_clients": 4, "fraction": 0.5}, runtime=LOCAL, seed=5)
    a, b = fedray.run(**kw), fedray.run(**kw)
    np.testing.assert_array_equal(a.centers, b.centers)


@pytest.mark.parametrize("name", ["fedfcm", "fedfcm-avg"])
@pytest.mark.parametrize("key,value,match", [("m", 1.0, "m"), ("m", 0.5, "m"), ("tol", 0.0, "tol"),
                                             ("tol", -1e-3, "tol"), ("local_tol", 0.0, "local_tol")])
def test_bad_parameters_are_config_errors(name, key, value, match):
    with pytest.raises(ConfigError, match=match):
        fedray.make_config(algorithm={"name": name, "params": {key: value}}, data=MOTIVATIONAL)


def test_more_clusters_than_samples_is_a_data_error():
    with pytest.raises(DataError, match="n_clusters"):
        fedray.run(algorithm={"name": "fedfcm", "params": {"n_clusters": 151}}, data={"dataset": "sklearn:iris"},
                   federation={"n_clients": 3}, runtime=LOCAL)
