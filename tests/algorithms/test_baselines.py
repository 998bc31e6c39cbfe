"""FedAvg, local, IFCA, CFL and FL+HC on small image federations (local runtime unless about Ray)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import fedray
from fedray.algorithms.baselines import bipartition, cluster_updates
from fedray.core.errors import ConfigError
from fedray.core.metrics import cluster_metrics
from fedray.core.ops import cosine_similarities, weighted_average

ROTATED = {"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [40, 60]}}


def _run(alg: str, params: dict | None = None, *, n_clients: int = 6, fraction: float = 0.5, rounds: int = 2,
         data: dict | None = None, backend: str = "local", **kw):
    return fedray.run(algorithm={"name": alg, "params": {"model": "cnn8", "epochs": 1, **(params or {})}},
                      data=data or ROTATED, federation={"n_clients": n_clients, "fraction": fraction, "rounds": rounds},
                      runtime={"backend": backend, "progress": False}, **kw)


def test_fedavg_learns_easy_digits():
    res = _run("fedavg", {"model": "mlp", "epochs": 5}, data={"dataset": "sklearn:digits"}, n_clients=5,
               fraction=1.0, rounds=5)
    assert res.final["accuracy"] > 0.85  # chance is 0.1
    acc = res.history["accuracy"].to_numpy()
    assert acc[-1] > acc[0] + 0.4
    assert res.final["n_clusters"] == 1 and res.model["weights"].dtype == np.float32


def test_final_evaluation_equals_the_next_rounds_evaluation():
    a = _run("fedavg", rounds=2)
    b = _run("fedavg", rounds=3)
    assert a.final["accuracy"] == b.history["accuracy"].iloc[2]
    assert a.history["accuracy"].tolist() == b.history["accuracy"].iloc[:2].tolist()
    # FedAvg trains for federation.rounds by definition: reaching it is no cut (no round-cap warning)
    assert a.summary["stop_reason"] == "rounds done" and a.summary["round_cap"] == 2


def test_weighted_ifca_with_one_model_is_fedavg_bit_for_bit():
    a = _run("fedavg", rounds=2)
    b = _run("ifca", {"n_clusters": 1, "weighted": True}, rounds=2)
    assert np.array_equal(a.model["weights"], b.model["weights"])
    assert a.final["client_accuracy"] == b.final["client_accuracy"]
    # the default (the plain mean, as IFCA's authors average) differs: clients hold 40-60 rows
    c = _run("ifca", {"n_clusters": 1}, rounds=2)
    assert not np.array_equal(a.model["weights"], c.model["weights"])


def _fake_round(alg_name: str, params: dict, sizes: list[int]):
    """One aggregation of ``alg_name`` on hand-made replies: client i sends weights all equal to i
    after training on ``sizes[i]`` rows. Returns the server's models."""
    from fedray.core.contract import FederationInfo, Reply, RoundContext
    from fedray.core.registry import get_algorithm, make_params

    n = len(sizes)
    info = FederationInfo(n_clients=n, n_features=64, sample_shape=(64,), n_samples=np.array(sizes),
                          feature_min=np.zeros(64), feature_max=np.ones(64), n_classes=10, has_labels=True)
    cls = get_algorithm(alg_name)
    alg = cls(make_params(cls, {"model": "mlp", **params}), info, 0)
    ctx = RoundContext(round=0, seed=0, sampled=tuple(range(n)), info=info, fraction=1.0)
    alg.make_tasks(ctx, ctx.sampled, evaluate=False)
    P = alg.init.shape[0]
    replies = [Reply(i, {"n": sizes[i], "train_loss": 1.0, "weights": np.full(P, float(i), np.float32), "cluster": 0})
               for i in range(n)]
    alg._sent_vec = {i: alg.init for i in range(n)}
    alg.aggregate(ctx, replies)
    return alg.models


@pytest.mark.parametrize("alg,params", [("ifca", {"n_clusters": 1}), ("cfl", {"warmup": 99})])
def test_ifca_and_cfl_average_unweighted_by_default_as_the_originals(alg, params):
    sizes = [10, 10, 10, 970]  # client 3 holds almost all rows
    plain = _fake_round(alg, params, sizes)[0]
    assert np.allclose(plain, np.mean([0, 1, 2, 3]))  # 1.5; n-weighted would be 2.94
    weighted = _fake_round(alg, {**params, "weighted": True}, sizes)[0]
    assert np.allclose(weighted, np.average([0, 1, 2, 3], weights=sizes))


def test_same_seed_same_bits_on_local_and_ray_runtimes(ray_session):
    cfg = dict(algorithm={"name": "ifca", "params": {"model": "cnn8", "epochs": 1, "n_clusters": 2}},
               data=ROTATED, federation={"n_clients": 6, "fraction": 0.5, "rounds": 2}, seed=3)
    out = {}
    for backend in ("local", "ray"):
        with fedray.Session(cfg, runtime={"backend": backend, "progress": False}) as s:
            out[backend] = (s.run("ifca"), s.run("local", {"model": "cnn8", "epochs": 1}))
    for a, b in zip(out["local"], out["ray"]):
        assert np.array_equal(a.model["weights"], b.model["weights"])
        assert a.history["accuracy"].tolist() == b.history["accuracy"].tolist()
        assert a.final["client_accuracy"] == b.final["client_accuracy"]
        assert a.final["assignment"] == b.final["assignment"]


def test_local_keeps_each_model_in_the_client_and_sends_no_weights():
    cfg = dict(
        algorithm={"name": "local", "params": {"model": "cnn8", "epochs": 1}},
        data=ROTATED,
        federation={"n_clients": 4, "fraction": 1.0, "rounds": 2},
        runtime={"backend": "local", "progress": False},
    )
    with fedray.Session(cfg) as s:
        first, second = s.run(), s.run()
        states = s.executor.get_state([0, 1, 2, 3])
    # a second run on the same clients starts from theta_0 again: same numbers
    assert first.final["client_accuracy"] == second.final["client_accuracy"]
    own = [st["_own_model"][1] for st in states.values()]
    assert len({w.tobytes() for w in own}) == 4  # four different models
    assert (first.history["bytes_up"] < 1000).all()  # accuracies and losses only
    assert first.final["n_clusters"] == 4


def test_cfl_splits_two_rotations_apart():
    data = {"dataset": "sklearn:digits",
            "partition": {"name": "rotated", "samples": [100, 150], "rotations": [0, 90], "proportions": [0.5, 0.5]}}
    res = _run("cfl", {"model": "mlp", "epochs": 2, "eps1": 1e3, "eps2": 0.0, "warmup": 3, "min_cluster_size": 6},
               data=data, n_clients=6, fraction=1.0, rounds=5)
    splits = res.model["splits"]
    assert [s["round"] for s in splits] == [3]  # clusters of 3 are too small to split again
    assert res.final["n_clusters"] == 2 and res.final["ari"] == 1.0
    assert res.history["n_clusters"].tolist() == [1, 1, 1, 2, 2]


def test_flhc_clusters_once_with_every_client_then_federates_per_cluster():
    res = _run("flhc", {"n_pre": 1, "distance_threshold": 1.0}, n_clients=6, fraction=0.5, rounds=3)
    h = res.history
    assert h["clients_trained"].tolist() == [3, 6, 3]  # round 1 asks every client for an update
    assert h["phase"].tolist() == ["fedavg", "cluster", "federations"]
    assert (h["n_clusters"].iloc[:1] == 1).all() and h["n_clusters"].iloc[1] >= 1
    assert len(res.model["weights"]) == res.final["n_clusters"]


def test_bipartition_and_hierarchical_cut_on_hand_made_similarities():
    S = np.array([[1.0, 0.9, 0.8, -0.2, -0.1],
                  [0.9, 1.0, 0.7, -0.3, 0.0],
                  [0.8, 0.7, 1.0, 0.1, -0.2],
                  [-0.2, -0.3, 0.1, 1.0, 0.6],
                  [-0.1, 0.0, -0.2, 0.6, 1.0]])
    assert bipartition(S) == ([0, 1, 2], [3, 4])
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    D = np.stack([a * 2, a + 0.05 * rng.normal(size=50), b, 3 * b + 0.1 * rng.normal(size=50)])
    # unit-length updates: the directions a and b, whatever the length
    assert cluster_updates(D, 0.75, normalize=True).tolist() == [0, 0, 1, 1]
    assert cluster_updates(D, 10.0, normalize=True).tolist() == [0, 0, 0, 0]
    # the default clusters the raw updates (Briggs et al.): 2a and a are ||a|| ~ 7 apart
    assert cluster_updates(D, 0.75).tolist() == [0, 1, 2, 3]
    assert cluster_updates(D, 1e3).tolist() == [0, 0, 0, 0]


def test_metrics_helpers():
    assert cluster_metrics(np.array([5, 5, 2, 2]), np.array([0, 0, 1, 1])) == {"n_clusters": 2.0, "ari": 1.0}
    assert cluster_metrics(np.array([0, 0, 0, 0]), np.array([0, 0, 1, 1]))["ari"] == 0.0
    S = cosine_similarities(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]]))
    assert np.allclose(S[0], [1, 1, 0, -1])
    w = weighted_average([np.ones(3, np.float32), np.zeros(3, np.float32)], [3, 1])
    assert w.dtype == np.float32 and np.allclose(w, 0.75)


@pytest.mark.parametrize("alg,n_clients,fraction", [("ifca", 10, 0.1), ("flhc", 10, 0.15), ("cfl", 1, 1.0)])
def test_a_fraction_sampling_one_client_is_a_clear_error_for_clustered_methods(alg, n_clients, fraction):
    with pytest.raises(ConfigError, match=r"federation.fraction: .*samples 1 client\(s\) a round.*at least 2"):
        fedray.make_config(algorithm={"name": alg}, federation={"n_clients": n_clients, "fraction": fraction})


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ConfigError, match="'cfl' needs every client in every round.*got 0.5"):
        fedray.make_config(algorithm={"name": "cfl"}, federation={"n_clients": 10, "fraction": 0.5})
    with pytest.raises(ConfigError, match="unknown model 'resnet'"):
        fedray.make_config(algorithm={"name": "fedavg", "params": {"model": "resnet"}})
    with pytest.raises(ConfigError, match="'cnn8' is an image model but the data are tabular"):
        fedray.run(algorithm={"name": "fedavg", "params": {"model": "cnn8"}}, data={"dataset": "sklearn:iris"},
                   runtime={"backend": "local"})
    with fedray.Session(algorithm={"name": "fedavg", "params": {"model": "mlp"}}, data={"dataset": "sklearn:iris"},
                        federation={"n_clients": 4, "fraction": 0.5, "rounds": 1}, runtime={"backend": "local"}) as s:
        with pytest.raises(ConfigError, match="'cfl' needs every client"):
            s.run("cfl", {"model": "mlp"})


def test_algorithm_modules_import_without_torch():
    code = ("import sys, fedray.algorithms.baselines, fedray.nn.supervised, fedray.data.image_federations, "
            "fedray.plots.cfl; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plots_of_accuracy_and_clusters(tmp_path):
    from fedray.plots import cfl as plots_cfl

    res = _run("ifca", {"n_clusters": 2}, rounds=2)
    p1 = plots_cfl.accuracy_over_rounds({"rotated": {"ifca": res.history, "runs": np.array([[0.1, 0.5], [0.2, 0.6]])}},
                                        tmp_path / "acc.png")
    p2 = plots_cfl.client_clusters(res.model["assignment"], res.model["true_groups"], res.clients["n_samples"],
                                   tmp_path / "clusters.png")
    assert p1.stat().st_size > 1000 and p2.stat().st_size > 1000
