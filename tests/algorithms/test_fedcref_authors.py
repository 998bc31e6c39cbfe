"""``preset: authors``: each detail of the authors' association rule and community training, pinned; and the
size dependence of the paper's statistic (with the size-aware ``tail`` option), on synthetic errors."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fedray.algorithms.fedcref import AUTHORS_PRESET, PAPER_PRESET, FedCRef
from fedray.algorithms.fedcref_client import fc_exchange, fc_federate
from fedray.algorithms.fedcref_rules import association_statistic, link_clusters, refine_labels
from fedray.core.contract import FederationInfo, Reply, RoundContext
from fedray.core.registry import get_algorithm, make_params


def _params(**given):
    return make_params(get_algorithm("fedcref"), given)


# --- the statistic's dependence on cluster size (synthetic errors) -------------------------------------------
def _stats(n: int, normalisation: str, draws: int = 300, tail=None) -> np.ndarray:
    """The statistic of ``draws`` clusters of n samples whose differences follow one fixed distribution."""
    rng = np.random.default_rng(n)
    tail = tail or (lambda r, size: r.exponential(size=size))
    out = []
    for _ in range(draws):
        e_own = 0.02 + 0.01 * rng.random(n)
        out.append(association_statistic(e_own, e_own + 0.01 * tail(rng, n), 75, normalisation))
    return np.asarray(out)


def test_the_papers_statistic_falls_as_the_cluster_grows_so_small_clusters_fail_the_test():
    """The same error distribution: at n = 500 the min-max statistic is about ln 4 / H_500 = 0.20 and passes
    τ = 0.25 in most draws; at n = 50 it is about ln 4 / H_50 = 0.31 and fails (the maximum of n draws grows with n)."""
    s50, s150, s500 = (_stats(n, "cluster") for n in (50, 150, 500))
    assert s50.mean() > s150.mean() > s500.mean()
    assert abs(s500.mean() - np.log(4) / np.sum(1 / np.arange(1, 501))) < 0.02
    assert abs(s50.mean() - np.log(4) / np.sum(1 / np.arange(1, 51))) < 0.03
    assert np.mean(s500 < 0.25) > 0.8 and np.mean(s50 < 0.25) < 0.25


def test_the_tail_normalisation_does_not_depend_on_size_and_matches_the_paper_at_500():
    """``tail`` divides by the range expected of 500 samples: on the same distribution its statistic is the
    same at n = 50, 150 and 500, and at n = 500 it is the paper's statistic (in the mean)."""
    t50, t150, t500 = (_stats(n, "tail") for n in (50, 150, 500))
    c500 = _stats(500, "cluster")
    assert max(t50.mean(), t150.mean(), t500.mean()) - min(t50.mean(), t150.mean(), t500.mean()) < 0.02
    assert abs(t500.mean() - c500.mean()) < 0.02
    assert np.mean(t50 < 0.25) > 0.8                   # the pair that passes at 500 passes at 50 too
    # a lighter (half-normal) tail: tail still varies far less with n than the min-max statistic
    half = lambda r, size: np.abs(r.normal(size=size))  # noqa: E731
    spread_c = _stats(50, "cluster", tail=half).mean() - _stats(500, "cluster", tail=half).mean()
    spread_t = abs(_stats(50, "tail", tail=half).mean() - _stats(500, "tail", tail=half).mean())
    assert spread_c > 0.08 and spread_t < spread_c / 3


# --- the authors' association rule, detail by detail -------------------------------------------------------
def test_statistic_is_the_75th_percentile_of_the_min_max_normalised_absolute_difference():
    rng = np.random.default_rng(0)
    a, b = rng.random(37), rng.random(37)
    d = np.abs(a - b)
    want = np.percentile((d - d.min()) / (d.max() - d.min()), 75)
    assert association_statistic(a, b, 75, "cluster") == pytest.approx(want, abs=0)
    assert association_statistic(b, a, 75, "cluster") == pytest.approx(want, abs=0)   # absolute difference


def test_exchange_uses_per_sample_mse_of_own_and_foreign_model_on_the_clusters_own_samples():
    """fc_exchange: S[p, j] is the statistic of the per-sample MSE of the own model p and the foreign model j
    on the samples of cluster p only."""
    from fedray.nn.autoencoder import ae_for, initial_ae_weights, reconstruction_errors
    from fedray.nn.train import set_flat

    spec = {"n_features": 5, "hidden": (3, 2), "output": "linear", "seed": 0}
    w0 = initial_ae_weights(spec)
    W = np.stack([w0, 2 * w0, 3 * w0]).astype(np.float32)           # client 0 owns models 0, 1; client 1 owns 2
    X = np.random.default_rng(1).normal(size=(30, 5)).astype(np.float32)
    labels = np.arange(30) % 2
    c = SimpleNamespace(state={"fc_labels": labels}, data=SimpleNamespace(X=X), id=0, name="c")
    out = fc_exchange(None, {"spec": spec, "weights": W, "owner": np.array([0, 0, 1]), "percentile": 75,
                             "normalisation": "cluster", "equal": np.nan}, c)
    model = ae_for(spec)

    def mse(w, rows):
        set_flat(model, w)
        return np.mean((model(__import__("torch").from_numpy(X[rows])).detach().numpy() - X[rows]) ** 2, axis=1)

    for p in (0, 1):
        rows = labels == p
        set_flat(model, W[p])
        assert np.allclose(reconstruction_errors(model, X[rows]), mse(W[p], rows), atol=1e-6)
        assert out[p, 2] == pytest.approx(association_statistic(mse(W[p], rows), mse(W[2], rows), 75), abs=1e-6)
    assert np.isnan(out[:, :2]).all()                                 # never against the client's own models


def test_the_test_is_strict_in_the_authors_code():
    S = np.array([[np.nan, 0.25], [0.25, np.nan]])
    owner = np.array([0, 1])
    assert link_clusters(S, owner, 0.25, "first-scan", strict=False) == [(0, 1)]
    assert link_clusters(S, owner, 0.25, "first-scan", strict=True) == []


def test_equal_differences_are_nan_and_no_link_in_the_authors_code():
    a = np.full(20, 0.1)
    b = np.full(20, 0.3)                                  # every difference equal: min-max is 0 / 0
    assert association_statistic(a, b, 75, "cluster") == 0.0
    assert np.isnan(association_statistic(a, b, 75, "cluster", equal=np.nan))
    S = np.array([[np.nan, np.nan], [0.0, np.nan]])
    assert link_clusters(S, np.array([0, 1]), 0.25, "first-scan", strict=True) == []


def test_a_link_needs_the_test_in_both_directions():
    S = np.array([[np.nan, 0.1], [0.3, np.nan]])
    assert link_clusters(S, np.array([0, 1]), 0.25, "first-scan", strict=True) == []
    S[1, 0] = 0.2
    assert link_clusters(S, np.array([0, 1]), 0.25, "first-scan", strict=True) == [(0, 1)]


def test_first_scan_links_the_first_passing_cluster_scanning_from_the_lower_client():
    """Client 0 holds nodes 0, 1; client 1 holds nodes 2, 3. Node 0 passes with 2 and 3 (3 is better), node 1
    with 3 only. The authors' scan (client 0's clusters in order, the first of client 1's that passes) links
    0-2 and 1-3; "first" and "best" from both sides add 3's own choice 0-3."""
    owner = np.array([0, 0, 1, 1])
    S = np.full((4, 4), 0.9)
    for i, j, v in ((0, 2, 0.2), (0, 3, 0.1), (1, 3, 0.1)):
        S[i, j] = S[j, i] = v
    assert link_clusters(S, owner, 0.25, "first-scan", strict=True) == [(0, 2), (1, 3)]
    assert link_clusters(S, owner, 0.25, "first", strict=True) == [(0, 2), (0, 3), (1, 3)]
    assert link_clusters(S, owner, 0.25, "best", strict=True) == [(0, 2), (0, 3), (1, 3)]
    # one of the later client's clusters may take several of the earlier client's
    S2 = np.full((4, 4), 0.9)
    for i in (0, 1):
        S2[i, 2] = S2[2, i] = 0.1
    assert link_clusters(S2, owner, 0.25, "first-scan", strict=True) == [(0, 2), (1, 2)]


def test_leftover_samples_keep_the_label_of_their_best_selected_model():
    """The authors' Algorithm 2 restarts its recursion on the left-over samples and numbers the new labels
    from the end, so a left-over sample can get another model's cluster label; fedray gives it the label of
    the selected model with its lowest error (the paper's text)."""
    E = np.array([[0.1, 0.9, 0.9],     # model 0 best
                  [0.1, 0.9, 0.9],
                  [0.9, 0.1, 0.9],     # model 1 best
                  [0.9, 0.1, 0.9],
                  [0.9, 0.2, 0.1],     # model 2 best, never selected (k_local = 2, ties go to the lower model):
                  [0.3, 0.9, 0.1]])    # left over; the first is closer to model 1, the second to model 0
    labels, selected = refine_labels(E, 2)
    assert selected == [0, 1]
    assert labels.tolist() == [0, 0, 1, 1, 1, 0]


# --- the preset and community training ---------------------------------------------------------------------
def test_authors_preset_values():
    p = _params(preset="authors")
    assert {k: getattr(p, k) for k in AUTHORS_PRESET} == AUTHORS_PRESET
    assert AUTHORS_PRESET == {**PAPER_PRESET, "tau": 0.25, "strict": True, "equal_differences": "fail",
                              "link": "first-scan", "fed_epochs": 7, "fed_first_epochs": 2, "fed_start": "fresh",
                              "community_model": "first-member"}
    assert (p.normalisation, p.percentile, p.fed_rounds, p.ratio, p.fed_trim) == ("cluster", 75.0, 15, 0.0, 0.0)
    assert _params(preset="authors", tau=0.2).tau == 0.2      # explicit values override the preset
    paper = _params(preset="paper")                            # preset paper is unchanged
    assert (paper.strict, paper.equal_differences, paper.link, paper.fed_start, paper.community_model,
            paper.fed_first_epochs, paper.fed_epochs) == (False, "pass", "best", "node", "aggregate", None, 1)


def _federating(params, groups, owner, node_cluster, P=6):
    info = FederationInfo(n_clients=int(owner.max()) + 1, n_features=4, sample_shape=(4,),
                          n_samples=np.full(int(owner.max()) + 1, 10), feature_min=np.zeros(4),
                          feature_max=np.ones(4), n_classes=2, has_labels=True)
    alg = FedCRef(params, info, seed=5)
    alg.phase, alg.groups, alg.owner, alg.node_cluster = "federate", groups, owner, node_cluster
    alg.community = np.stack([np.full(P, 10.0 * (g[0] + 1), np.float32) for g in groups])
    alg._fed_round = 0
    return alg, info


def test_authors_community_training_fresh_start_2_then_7_epochs_and_the_first_members_copy():
    """Round 1: 2 local epochs from a fresh model per community (seeded, one seed each, the same for every
    member); rounds 2-15: 7 epochs from the aggregate; the refinement's community model is the first
    member's locally trained copy of round 15, not the aggregate."""
    p = _params(preset="authors")
    groups = [[0, 3], [1, 2]]                          # nodes: client 0 -> 0, 1; client 1 -> 2, 3
    owner, node_cluster = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    alg, info = _federating(p, groups, owner, node_cluster)
    epochs, fresh = [], []
    for r in range(15):
        ctx = RoundContext(round=10 + r, seed=5, sampled=(0, 1), info=info)
        tasks = alg.configure_round(ctx)
        sh = tasks[0].shared
        epochs.append(sh["epochs"])
        fresh.append(sh["fresh"])
        replies = []
        for cid, task in sorted(tasks.items()):
            jobs = task.payload                            # [(community, cluster), ...]
            W = np.stack([np.full(6, 100 * cid + 10 * c + cl, np.float32) for c, cl in jobs])
            replies.append(Reply(cid, {"weights": W, "n": np.array([10 + cid] * len(jobs))}))
        alg.aggregate(ctx, replies)
    assert epochs == [2] + [7] * 14
    assert fresh[0] is not None and len(fresh[0]) == 2 and fresh[0][0] != fresh[0][1]
    assert all(f is None for f in fresh[1:])
    assert alg.phase == "refine"
    # community 0's first member is node 0 (client 0, cluster 0): its copy 100*0 + 10*0 + 0; community 1's is
    # node 1 (client 0, cluster 1): 10*1 + 1; the aggregates would be weighted means with client 1's copies
    assert alg.community[0].tolist() == [0.0] * 6 and alg.community[1].tolist() == [11.0] * 6
    # the same seed gives the same fresh seeds
    alg2, _ = _federating(p, groups, owner, node_cluster)
    t = alg2.configure_round(RoundContext(round=10, seed=5, sampled=(0, 1), info=info))
    assert np.array_equal(t[0].shared["fresh"], fresh[0])


def test_paper_community_training_is_unchanged_one_epoch_from_the_node_model_and_the_aggregate():
    p = _params(preset="paper")
    groups = [[0, 3]]
    owner, node_cluster = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    alg, info = _federating(p, groups, owner, node_cluster)
    for r in range(15):
        ctx = RoundContext(round=r, seed=5, sampled=(0, 1), info=info)
        tasks = alg.configure_round(ctx)
        assert tasks[0].shared["epochs"] == 1 and tasks[0].shared["fresh"] is None
        alg.aggregate(ctx, [Reply(0, {"weights": np.full((1, 6), 1.0, np.float32), "n": np.array([10])}),
                            Reply(1, {"weights": np.full((1, 6), 4.0, np.float32), "n": np.array([30])})])
    assert alg.community[0].tolist() == [3.25] * 6                   # the sample-weighted aggregate


def test_a_fresh_start_ignores_the_node_model_and_is_the_seeds_model():
    """fc_federate with fresh seeds: the start is the fresh model of the community's seed, whatever the node
    model handed in is; two members with the same seed start from the same model."""
    from fedray.nn.autoencoder import initial_ae_weights

    spec = {"n_features": 4, "hidden": (3, 2), "output": "linear", "seed": 0}
    X = np.random.default_rng(0).normal(size=(12, 4)).astype(np.float32)
    P = initial_ae_weights(spec).size

    def federate(comm, fresh):
        c = SimpleNamespace(state={"fc_labels": np.zeros(12, np.int64)}, data=SimpleNamespace(X=X),
                            rng=np.random.default_rng(3), id=0, name="c")
        return fc_federate([(0, 0)], {"spec": spec, "community": comm, "epochs": 1, "batch_size": 4,
                                      "lr": 1e-2, "fresh": fresh}, c)["weights"]

    a = federate(np.zeros((1, P), np.float32), np.array([123]))
    b = federate(np.ones((1, P), np.float32), np.array([123]))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, federate(np.zeros((1, P), np.float32), np.array([124])))
    assert not np.array_equal(a, federate(np.zeros((1, P), np.float32), None))
    own = federate(initial_ae_weights({**spec, "seed": 123})[None], None)
    np.testing.assert_array_equal(a, own)


def test_a_run_with_preset_authors_federates_and_repeats_bit_for_bit():
    """End to end on the local runtime (tiny autoencoders): communities form with τ = 0.5, the community
    models are the first members' copies (fresh starts seeded by the run's seed), and the same seed gives
    the same bits."""
    import warnings

    from fedray.api.session import Session
    from fedray.core.errors import SharedSamplesWarning

    params = {"preset": "authors", "hidden": [16, 8], "local_epochs": 2, "fed_rounds": 2, "fed_epochs": 2,
              "fed_first_epochs": 1, "max_iterations": 2, "tau": 0.5, "percentile": 50}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        s = Session(algorithm={"name": "fedcref", "params": params},
                    data={"dataset": "sklearn:digits",
                          "partition": {"name": "class-subsets", "classes": [2, 3], "samples_per_class": 25}},
                    federation={"n_clients": 4, "rounds": 500}, runtime={"backend": "local"}, seed=3)
    with s:
        a = s.run(output=False)
        b = s.run(output=False)
    assert len(a.model["communities"]) > 0
    assert a.model["community_weights"].tobytes() == b.model["community_weights"].tobytes()
    assert a.final["acc_end"] == b.final["acc_end"]


@pytest.mark.parametrize("key,value,allowed", [
    ("fed_start", "random", "'node' or 'fresh'"), ("community_model", "first", "'aggregate' or 'first-member'"),
    ("equal_differences", "nan", "'pass' or 'fail'"), ("fed_first_epochs", 0, "greater than or equal to 1"),
    ("link", "scan", "first-scan"), ("normalisation", "robust", "tail"), ("preset", "code", "authors")])
def test_bad_values_of_the_authors_options_are_one_line_config_errors(key, value, allowed):
    from fedray.core.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"fedcref\)\.{key}: .*{allowed}") as e:
        _params(**{key: value})
    assert "\n" not in str(e.value)
