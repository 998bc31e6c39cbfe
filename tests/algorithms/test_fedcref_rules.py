"""FedCRef's rules on small hand-made error matrices (no torch)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from fedray.algorithms.fedcref_rules import (
    align_labels,
    association_quality,
    association_statistic,
    communities,
    global_stop,
    link_clusters,
    refine_labels,
    stability,
)
from fedray.core.errors import ConfigError


def test_statistic_is_percentile_of_minmax_normalised_differences():
    e_own = np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    e_other = np.array([1.0, 1.1, 1.2, 1.3, 2.0])        # |d| = 0, .1, .2, .3, 1 -> normalised the same
    assert association_statistic(e_own, e_other, 75) == pytest.approx(0.3)
    assert association_statistic(e_own, e_other, 50) == pytest.approx(0.2)
    assert association_statistic(e_own, e_other, 100) == pytest.approx(1.0)
    # scale free: multiplying both error vectors changes nothing
    assert association_statistic(3 * e_own, 3 * e_other, 75) == pytest.approx(0.3)
    # identical errors (no spread) pass trivially
    assert association_statistic(e_own, e_own + 0.5, 75) == 0.0


def test_paper_statistic_grows_as_clusters_shrink_the_relative_one_does_not():
    """The same pair of models (the foreign one 20 % worse on every sample) gives a larger min-max
    statistic on a small cluster than on a large one: the maximum of the differences grows with n.
    The per-sample relative difference is 0.2 / 2.2 whatever n is."""
    rng = np.random.default_rng(0)
    small_n, large_n = [], []
    for _ in range(20):
        for n, out in ((100, small_n), (5000, large_n)):
            e = rng.exponential(0.02, n)
            out.append(association_statistic(e, 1.2 * e, 75))
            assert association_statistic(e, 1.2 * e, 75, "relative") == pytest.approx(0.2 / 2.2)
    assert np.mean(small_n) > np.mean(large_n) + 0.04


def test_errors_normalisation_divides_by_the_range_of_both_models_errors():
    e_own = np.array([0.0, 1.0, 1.0, 1.0])
    e_other = np.array([2.0, 1.0, 1.5, 1.0])             # d = 2, 0, .5, 0; errors span [0, 2]
    assert association_statistic(e_own, e_other, 50, "errors") == pytest.approx(0.125)
    assert association_statistic(e_own, e_other, 100, "errors") == pytest.approx(1.0)
    assert association_statistic(e_own, e_own, 75, "errors") == 0.0
    assert association_statistic(np.zeros(3), np.zeros(3), 75, "relative") == 0.0


def test_unknown_normalisation_and_mismatched_errors_are_clear_errors():
    with pytest.raises(ConfigError, match="normalisation: must be one of cluster, errors, relative"):
        association_statistic(np.ones(3), np.ones(3), 75, "zscore")
    with pytest.raises(ValueError, match="one length"):
        association_statistic(np.ones(3), np.ones(4), 75)


@pytest.mark.parametrize("p", [0, -5, 100.5])
def test_percentile_outside_range_is_a_clear_error(p):
    with pytest.raises(ConfigError, match=r"percentile.*\(0, 100\]"):
        association_statistic(np.ones(3), np.ones(3), p)


@pytest.mark.parametrize("tau", [0, 1.5])
def test_tau_outside_range_is_a_clear_error(tau):
    with pytest.raises(ConfigError, match=r"tau.*\(0, 1\]"):
        link_clusters(np.zeros((2, 2)), np.array([0, 1]), tau)


def _two_clients():
    # nodes 0, 1 of client 0; nodes 2, 3 of client 1; S[i, j] measured on i's data with j's model
    S = np.full((4, 4), np.nan)
    S[0, 2], S[2, 0] = 0.10, 0.15      # passes both ways
    S[0, 3], S[3, 0] = 0.05, 0.10      # passes both ways and is better for node 0
    S[1, 3], S[3, 1] = 0.10, 0.10      # passes both ways
    S[1, 2], S[2, 1] = 0.50, 0.10      # fails on node 1's data: one direction is not enough
    return S, np.array([0, 0, 1, 1])


def test_link_requires_both_directions_and_takes_best_per_client():
    S, owner = _two_clients()
    edges = link_clusters(S, owner, 0.2, "best")
    # node 0 -> best of client 1 is node 3; node 2 -> only node 0 qualifies;
    # node 3 -> best of client 0: 0 (0.10) vs 1 (0.10): tie -> 0
    assert edges == [(0, 2), (0, 3), (1, 3)]
    assert (1, 2) not in edges


def test_link_first_and_mutual_best():
    S, owner = _two_clients()
    # "first": node 0 takes node 2 (first qualifying), node 1 takes 3, node 2 takes 0, node 3 takes 0
    assert link_clusters(S, owner, 0.2, "first") == [(0, 2), (0, 3), (1, 3)]
    # mutual best: 0 <-> 3 is the best of both ends; 0 -> 2 is not 0's best; 1 -> 3 is not 3's best (tie to 0)
    assert link_clusters(S, owner, 0.2, "mutual-best") == [(0, 3)]
    S2 = S.copy()
    S2[0, 3] = 0.5                    # breaks the pair 0-3: now 0's best is 2 and 2's best is 0; 3's best is 1
    assert link_clusters(S2, owner, 0.2, "mutual-best") == [(0, 2), (1, 3)]


def test_link_never_joins_clusters_of_the_same_client():
    S = np.zeros((3, 3))
    assert link_clusters(S, np.array([0, 0, 0]), 0.2) == []
    assert link_clusters(S, np.array([0, 0, 1]), 0.2) == [(0, 2), (1, 2)]



def _three_clients(pair: float = 0.14, rival: float = 0.45):
    # one cluster per client; clients 0 and 1 hold the same class, client 2 another one
    S = np.array([[np.nan, pair, rival],
                  [pair, np.nan, rival + 0.05],
                  [rival, rival + 0.05, np.nan]])
    return S, np.array([0, 1, 2])


def test_ratio_test_links_a_mutual_best_pair_far_ahead_of_any_third_client():
    S, owner = _three_clients()
    assert link_clusters(S, owner, 0.1) == []                  # the τ test alone rejects 0.14
    assert link_clusters(S, owner, 0.1, ratio=0.5) == [(0, 1)]  # 0.14 <= 0.5 * 0.45
    assert link_clusters(S, owner, 0.1, ratio=0.3) == []        # 0.14 > 0.3 * 0.45


def test_ratio_test_needs_a_third_client_close_rivals_and_mutual_best_block_it():
    S, owner = _three_clients(rival=0.2)                        # a third client's cluster comes close
    assert link_clusters(S, owner, 0.1, ratio=0.5) == []
    two = np.array([[np.nan, 0.9], [0.9, np.nan]])              # two clients: nothing to compare with
    assert link_clusters(two, np.array([0, 1]), 0.1, ratio=0.9) == []
    S, owner = _three_clients()
    S[1, 2] = S[2, 1] = 0.05                                    # node 1's best is now node 2, not node 0
    assert (0, 1) not in link_clusters(S, owner, 0.01, ratio=0.9)


def test_ratio_zero_is_the_paper_and_a_ratio_outside_its_range_is_a_clear_error():
    S, owner = _two_clients()
    assert link_clusters(S, owner, 0.2, "best", ratio=0.0) == link_clusters(S, owner, 0.2, "best")
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(ConfigError, match="ratio"):
            link_clusters(S, owner, 0.2, ratio=bad)

def test_communities_are_components_with_at_least_two_nodes():
    groups, member = communities(7, [(0, 3), (3, 5), (1, 4)])
    assert groups == [[0, 3, 5], [1, 4]]
    assert member.tolist() == [0, 1, -1, 0, 1, 0, -1]
    assert communities(3, [])[0] == []


def test_refine_picks_model_explaining_most_samples_then_assigns_leftovers():
    E = np.array([[0.1, 0.5, 0.9],
                  [0.2, 0.4, 0.8],
                  [0.9, 0.1, 0.5],
                  [0.8, 0.2, 0.1],
                  [0.7, 0.6, 0.05]])
    labels, selected = refine_labels(E, 2)
    # step 1: argmins are 0,0,1,2,2 -> tie 0 vs 2 broken by the lowest column: model 0 takes samples 0, 1
    # step 2: among models 1, 2 samples 2,3,4 prefer 1,2,2 -> model 2 takes 3, 4; sample 2 is left over
    # leftover sample 2 goes to the selected model with the lowest error: E[2, 0]=.9 vs E[2, 2]=.5 -> model 2
    assert selected == [0, 2]
    assert labels.tolist() == [0, 0, 1, 1, 1]


def test_refine_stops_when_every_sample_is_assigned():
    E = np.array([[0.1, 0.9, 0.9], [0.2, 0.8, 0.9]])
    labels, selected = refine_labels(E, 3)
    assert selected == [0] and labels.tolist() == [0, 0]


def test_align_labels_keeps_old_numbering():
    old = np.array([0, 0, 0, 1, 1, 2, 2])
    new = np.array([2, 2, 2, 0, 0, 1, 1])          # the same partition, renumbered
    assert align_labels(new, old).tolist() == old.tolist()
    assert stability(new, old) == 1.0
    new2 = np.array([2, 2, 0, 0, 0, 1, 1])
    assert stability(new2, old) == pytest.approx(6 / 7)
    assert align_labels(new2, old).tolist() == [0, 0, 1, 1, 1, 2, 2]


def test_global_stop_needs_three_quiet_iterations():
    assert not global_stop([5, 6], [10, 9])
    assert global_stop([5, 10, 10, 10], [20, 19, 19, 20])
    assert not global_stop([8, 9, 10], [20, 20, 20])          # 10 -> 8 is a 20% change
    assert global_stop([0, 0, 0], [0, 0, 0])


def test_association_quality_counts_wrong_edges_and_purity():
    node_class = np.array([3, 3, 5, 5, 3, 7])
    edges = [(0, 1), (1, 4), (2, 3), (3, 4)]        # (3, 4) joins class 5 with class 3
    groups, _ = communities(6, edges)
    q = association_quality(edges, groups, node_class, 6)
    assert q["wrong_associations"] == pytest.approx(25.0)
    assert q["isolated_clusters"] == 1 and q["communities"] == 1 and q["pure_communities"] == 0
    q2 = association_quality(edges[:3], communities(6, edges[:3])[0], node_class, 6)
    assert q2["wrong_associations"] == 0 and q2["pure_communities"] == 2 and q2["classes_covered"] == 2


def test_rules_module_does_not_import_torch():
    import subprocess

    code = "import sys, fedray.algorithms.fedcref; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
