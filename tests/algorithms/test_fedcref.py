"""FedCRef on the local runtime with tiny autoencoders on scikit-learn's digits."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedray.api.session import Session
from fedray.core.errors import ConfigError, DataError, SharedSamplesWarning

# preset "paper": these tests exercise the paper's rules (a tiny tau links nothing, a client may stop after one
# refinement); test_fedcref_preset.py covers the tuned defaults.
TINY = {"preset": "paper", "hidden": [16, 8], "local_epochs": 2, "fed_rounds": 2, "max_iterations": 2, "batch_size": 32}


def _session(n_clients: int = 4, S: int = 30, classes=(2, 3), overlap: float = 0.0, **algo) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        return Session(algorithm={"name": "fedcref", "params": {**TINY, **algo}},
                       data={"dataset": "sklearn:digits",
                             "partition": {"name": "class-subsets", "classes": list(classes),
                                           "samples_per_class": S, "overlap": overlap}},
                       federation={"n_clients": n_clients, "rounds": 500}, runtime={"backend": "local"}, seed=3)


@pytest.mark.parametrize(
    "key,value,allowed",
    [
        ("percentile", 0, "greater than 0"),
        ("percentile", 101, "less than or equal to 100"),
        ("tau", 0, "greater than 0"),
        ("tau", 1.5, "less than or equal to 1"),
    ],
)
def test_bad_percentile_and_tau_are_clear_errors(key, value, allowed):
    with pytest.raises(ConfigError, match=rf"algorithm\.params \(fedcref\)\.{key}: .*{allowed}"):
        _session(**{key: value})


def test_client_with_fewer_samples_than_local_clusters_is_a_clear_error():
    with _session(n_clients=2, S=1, classes=(2, 2), init="kmeans", local_k=3) as s:
        with pytest.raises(DataError, match=r"client-0.*2 samples but 3 local clusters"):
            s.run(output=False)


def test_class_subsets_federation_gives_each_client_its_classes():
    with _session(n_clients=5, S=20, classes=(2, 4)) as s:
        host = s.executor.host
        for c in host.clients.values():
            classes = sorted(np.unique(c.labels).tolist())
            assert classes == c.meta["classes"] and 2 <= len(classes) <= 4
            assert np.bincount(c.labels)[classes].tolist() == [20] * len(classes)


def test_overlap_shares_a_fraction_of_each_class_between_holders():
    from fedray.data.fedcref_federations import class_subsets_indices

    y = np.repeat(np.arange(3), 1000)
    parts, chosen, repeats = class_subsets_indices(y, 6, np.random.default_rng(0), (3, 3), 100, overlap=0.3)
    assert repeats == 0 and all(p.size == 300 for p in parts)
    common = set(parts[0].tolist()) & set(parts[1].tolist())
    assert len(common) == 3 * 30                      # 30% of each of the 3 classes is common to all holders
    _, _, rep = class_subsets_indices(y, 20, np.random.default_rng(0), (3, 3), 100)
    assert rep == 3 * (2000 - 1000)                   # the pool is too small: clients share samples


def _fingerprint(s: Session, res) -> dict:
    states = s.executor.host.get_state(list(range(s.info.n_clients)))
    return {"labels": [states[c]["fc_labels"].tolist() for c in sorted(states)],
            "edges": res.model["edge_history"], "communities": res.model["communities"],
            "community_weights": res.model["community_weights"].tobytes(),
            "nodes": res.model["node_weights_sha1"]}


def test_labels_do_not_leak_shuffled_evaluation_labels_change_metrics_only():
    params = {"init": "kmeans", "local_k": 3, "tau": 0.6, "percentile": 50}
    with _session(n_clients=4, S=25, classes=(3, 3), **params) as s:
        first = s.run(output=False)
        fp1 = _fingerprint(s, first)
        rng = np.random.default_rng(0)
        host = s.executor.host
        for cid in host.ids.tolist():
            y = host.shard(cid)[1]                 # a view of the host's labels: what evaluation reads
            y[...] = rng.permutation(y)            # training never sees them
        second = s.run(output=False)
        fp2 = _fingerprint(s, second)
    assert sum(map(len, fp1["edges"])) > 0         # associations were formed, so the comparison means something
    assert fp1 == fp2
    assert first.final["acc_start"] != pytest.approx(second.final["acc_start"])


def test_same_seed_same_bits_and_metrics_over_iterations():
    with _session(n_clients=4, S=25) as s:
        a = s.run(output=False)
        b = s.run(output=False)
    assert _fp_bytes(a) == _fp_bytes(b)
    hist = a.final["history"]
    assert len(hist) == a.final["iterations"] >= 1
    for key in ("acc_mean", "communities", "wrong_associations", "isolated_clusters", "classes_covered",
                "active_clients"):
        assert key in hist[0]
    assert a.final["acc_start"] == pytest.approx(0.7, abs=0.02)   # dirtiness 0.3


def _fp_bytes(res) -> tuple:
    return res.model["community_weights"].tobytes(), res.model["node_weights_sha1"], res.final["acc_end"]


def test_oracle_association_is_pure_and_ablation_has_no_edges():
    with _session(n_clients=4, S=25, association="oracle", max_iterations=1) as s:
        oracle = s.run(output=False)
        none = s.run("fedcref", {**TINY, "association": "none", "max_iterations": 1}, output=False)
    assert oracle.final["wrong_associations_end"] == 0.0
    assert oracle.final["pure_communities_end"] == oracle.final["communities_end"] > 0
    assert none.final["edges_end"] == 0 and none.final["communities_end"] == 0
    assert none.model["edges"].shape == (0, 2)


def test_dirty_init_needs_labels():
    from fedray.core.contract import FederationInfo
    from fedray.core.registry import get_algorithm, make_params

    info = FederationInfo(n_clients=2, n_features=4, sample_shape=(4,), n_samples=np.array([5, 5]),
                          feature_min=np.zeros(4), feature_max=np.ones(4), has_labels=False)
    cls = get_algorithm("fedcref")
    with pytest.raises(ConfigError, match="init='dirty'.*need labels"):
        cls(make_params(cls, {}), info, 0)
    cls(make_params(cls, {"init": "kmeans", "local_k": "silhouette"}), info, 0)   # fine without labels


def test_warm_start_trains_from_the_model_that_formed_the_cluster():
    with _session(n_clients=4, S=25, association="oracle", stability=1.0) as s:
        cold = s.run(output=False)
        warm = s.run("fedcref", {**TINY, "association": "oracle", "stability": 1.0, "warm_start": True}, output=False)
    # the first iteration is the same; afterwards local models start from different weights
    assert cold.final["history"][0] == warm.final["history"][0]
    assert cold.model["node_weights_sha1"] != warm.model["node_weights_sha1"]


def test_a_run_that_forms_no_community_says_so_the_ablation_does_not(caplog):
    with _session(n_clients=4, S=25, tau=1e-9, max_iterations=1) as s:
        with caplog.at_level("WARNING", logger="fedray"):
            strict = s.run(output=False)
            none = s.run("fedcref", {**TINY, "association": "none", "max_iterations": 1}, output=False)
    assert strict.final["communities_end"] == 0
    assert sum("formed no community" in w for w in strict.final["warnings"]) == 1
    assert sum("formed no community" in r.getMessage() for r in caplog.records) == 1   # the strict run only
    assert not any("formed no community" in w for w in none.final["warnings"])     # no association by design


@pytest.mark.parametrize("rounds", [5, None])
def test_a_round_cap_mid_iteration_is_the_stop_reason_and_unset_rounds_is_the_budget(rounds, caplog):
    """federation.rounds = 5 stops the first iteration: one warning line, stop_reason 'round cap' in
    summary and final. Unset, the cap is 1 + max_iterations * (4 + fed_rounds): both iterations run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        with Session(algorithm={"name": "fedcref", "params": TINY},
                     data={"dataset": "sklearn:digits",
                           "partition": {"name": "class-subsets", "classes": [2, 3], "samples_per_class": 25}},
                     federation={"n_clients": 4, "rounds": rounds}, runtime={"backend": "local"}, seed=3) as s:
            with caplog.at_level("WARNING", logger="fedray"):
                res = s.run(output=False)
    capped = [r for r in caplog.records if r.levelname == "WARNING" and "federation.rounds" in r.getMessage()]
    if rounds:
        assert res.final["stop_reason"] == res.summary["stop_reason"] == "round cap" and len(capped) == 1
        assert any("stopped by federation.rounds" in w for w in res.final["warnings"])
    else:
        assert res.summary["round_cap"] == 1 + 2 * (4 + TINY["fed_rounds"]) and not capped
        assert res.final["iterations"] == 2 and res.summary["stop_reason"] != "round cap"


def test_cli_says_in_one_line_each_that_no_community_formed_and_no_client_stayed_active(tmp_path):
    """A run whose test never passes (tau tiny) and whose clients all stop after their first refinement
    (stability tiny) prints each warning as one line on stderr and records both in summary.json."""
    import json
    import subprocess
    import sys

    import yaml

    cfg = {"algorithm": {"name": "fedcref", "params": {**TINY, "tau": 1e-9, "stability": 0.01, "max_iterations": 3}},
           "data": {"dataset": "sklearn:digits",
                    "partition": {"name": "class-subsets", "classes": [2, 3], "samples_per_class": 25}},
           "federation": {"n_clients": 4, "rounds": 200}, "runtime": {"backend": "local"}, "seed": 3}
    path = tmp_path / "fedcref.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    code = "import sys; from fedray.tools.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-c", code, "run", str(path), "--out",
                           str(out), "-q"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    none_lines = [ln for ln in lines if "formed no community" in ln]
    idle_lines = [ln for ln in lines if "no active clients" in ln]
    assert len(none_lines) == 1 and len(idle_lines) == 1, proc.stderr
    assert "tau=1e-09" in none_lines[0] and "stopped after 1 iteration(s)" in idle_lines[0]
    final = json.loads((out / "summary.json").read_text())["final"]
    assert final["stop_reason"] == "no active clients" and final["iterations"] == 1
    assert final["communities_end"] == 0
    assert sorted(final["warnings"]) == sorted([none_lines[0].split(": ", 1)[1], idle_lines[0].split(": ", 1)[1]])


def test_unknown_normalisation_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"algorithm\.params \(fedcref\)\.normalisation: .*'cluster'"):
        _session(normalisation="zscore")


def test_member_candidates_refine_only_with_the_clients_own_communities():
    """candidates='member': a client refines with its own models plus the models of the communities its
    clusters belong to (the server passes their indices); a community it is not in cannot take its samples."""
    from types import SimpleNamespace

    from fedray.algorithms.fedcref_client import fc_refine
    from fedray.nn.autoencoder import initial_ae_weights

    spec = {"n_features": 4, "hidden": (3, 2), "output": "linear", "seed": 0}
    X = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    own = np.stack([50 * initial_ae_weights(spec), -50 * initial_ae_weights(spec)]).astype(np.float32)
    comm = np.zeros((2, own.shape[1]), np.float32)     # outputs 0: error ~1, far below the own models' errors
    shared = {"spec": spec, "community": comm, "stability": 0.99}

    def refine(communities):
        st = {"fc_labels": np.arange(40) % 2, "fc_weights": own, "fc_active": True}
        c = SimpleNamespace(state=st, data=SimpleNamespace(X=X), rng=np.random.default_rng(1), id=0, name="c")
        return fc_refine({"communities": communities}, shared, c)

    assert refine(None)["community_models"] == 1          # the paper: every community model is a candidate
    assert refine([1])["community_models"] == 1           # the client's own community
    assert refine([])["community_models"] == 0            # in no community: its own models only
    assert refine([])["k"] == 2


def test_replace_candidates_drop_the_own_models_of_clusters_in_a_community():
    """candidates='replace': the own model of a cluster in a community leaves the candidates and the community
    models stand in; with nothing replaced the client's own model wins a tie against an equal community model."""
    from types import SimpleNamespace

    from fedray.algorithms.fedcref_client import fc_refine
    from fedray.nn.autoencoder import initial_ae_weights

    spec = {"n_features": 4, "hidden": (3, 2), "output": "linear", "seed": 0}
    X = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    zero = np.zeros_like(initial_ae_weights(spec))          # outputs 0: the same errors for every zero model
    own = np.stack([zero, 50 * initial_ae_weights(spec)]).astype(np.float32)
    comm = np.stack([zero, zero]).astype(np.float32)
    shared = {"spec": spec, "community": comm, "stability": 0.99}

    def refine(replaced):
        st = {"fc_labels": np.arange(40) % 2, "fc_weights": own, "fc_active": True}
        c = SimpleNamespace(state=st, data=SimpleNamespace(X=X), rng=np.random.default_rng(1), id=0, name="c")
        return fc_refine({"communities": None, "replaced": replaced}, shared, c)

    assert refine(None)["community_models"] == 0     # the paper: own model 0 ties the community models and wins
    assert refine([])["community_models"] == 0
    assert refine([0])["community_models"] == 1      # own model 0 replaced: a community model takes its samples
    assert refine([0, 1])["community_models"] == refine([0, 1])["k"]   # every cluster in a community


def test_replace_is_a_named_choice_of_candidates():
    with pytest.raises(ConfigError, match=r"candidates"):
        _session(candidates="swap")


def test_fed_trim_leaves_out_the_samples_the_community_model_reconstructs_worst():
    """fed_trim=q: a client trains the community model on the ceil((1-q) n) samples of its cluster with the
    smallest reconstruction error, counts only those, and gets the same weights as a client holding only them."""
    from types import SimpleNamespace

    from fedray.algorithms.fedcref_client import fc_federate
    from fedray.nn.autoencoder import initial_ae_weights

    spec = {"n_features": 4, "hidden": (3, 2), "output": "linear", "seed": 0}
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 4)).astype(np.float32)
    far = np.array([1, 4, 8])
    X[far] *= 40                                        # the zero model's error is mean(x^2): these are worst
    comm = np.zeros((1, initial_ae_weights(spec).size), np.float32)

    def federate(Xc, trim):
        st = {"fc_labels": np.zeros(len(Xc), np.int64)}
        c = SimpleNamespace(state=st, data=SimpleNamespace(X=Xc), rng=np.random.default_rng(5), id=0, name="c")
        return fc_federate([(0, 0)], {"spec": spec, "community": comm, "epochs": 2, "batch_size": 4, "lr": 1e-2,
                                      "trim": trim}, c)

    trimmed = federate(X, 0.3)
    inliers = federate(np.delete(X, far, axis=0), 0.0)
    assert trimmed["n"].tolist() == [7]
    np.testing.assert_array_equal(trimmed["weights"], inliers["weights"])
    assert federate(X, 0.0)["n"].tolist() == [10]
    assert not np.array_equal(federate(X, 0.0)["weights"], inliers["weights"])


def test_fed_trim_outside_its_range_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"fed_trim: .*less than 1"):
        _session(fed_trim=1.0)


def test_ratio_outside_its_range_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"ratio: .*less than 1"):
        _session(ratio=1.0)
    with pytest.raises(ConfigError, match=r"ratio: .*greater than or equal to 0"):
        _session(ratio=-0.5)


def test_ratio_adds_links_to_the_first_exchange_the_tau_test_misses():
    """The same seed gives the same first exchange; with a τ nothing passes, ratio 0 links nothing, and a
    ratio below 1 links at least the pair with the smallest statistic (each is the other's best, and no
    third client's cluster scores lower), keeping every τ edge."""
    with _session(n_clients=4, S=25, tau=0.001, max_iterations=1) as s:
        plain = s.run(output=False)
        ratio = s.run("fedcref", {**TINY, "tau": 0.001, "max_iterations": 1, "ratio": 0.99}, output=False)
    first_plain = {tuple(e) for e in plain.model["edge_history"][0]}
    first_ratio = {tuple(e) for e in ratio.model["edge_history"][0]}
    assert first_plain == set()
    assert first_ratio and first_plain <= first_ratio
    owner = ratio.model["node_owner"]
    assert all(owner[i] != owner[j] for i, j in first_ratio)


def test_local_refinements_make_no_exchange_before_the_first_exchange_counts():
    """With local_refinements=1 the first iteration links nothing even where everything would pass (τ = 1,
    or the oracle), the second iteration's exchange does link, and the ``_start`` association figures are
    those of that first exchange, not of the iteration without one."""
    with _session(n_clients=4, S=25, tau=1.0, max_iterations=2, local_refinements=1) as s:
        late = s.run(output=False)
        oracle = s.run("fedcref", {**TINY, "association": "oracle", "max_iterations": 2, "local_refinements": 1},
                       output=False)
        now = s.run("fedcref", {**TINY, "tau": 1.0, "max_iterations": 1}, output=False)
    assert now.model["edge_history"][0]            # τ = 1 links at once without the option
    for res in (late, oracle):
        first, second = res.model["edge_history"][:2]
        assert first == [] and second
        hist = res.final["history"]
        assert hist[0]["communities"] == 0 and hist[1]["communities"] > 0
        assert res.final["communities_start"] == hist[1]["communities"]
        assert res.final["edges_start"] == len(second)


def test_negative_local_refinements_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"local_refinements: .*greater than or equal to 0"):
        _session(local_refinements=-1)
