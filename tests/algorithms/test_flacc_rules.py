"""FLACC merge rules on hand-made similarity matrices (Mehta & Shao 2023, eq. 9-18)."""
from __future__ import annotations

import numpy as np
import pytest

from fedray.algorithms.flacc_rules import (
    SimilarityMemory,
    cosine_similarities,
    entities,
    find_merge,
    merge_round,
)


def _memory(S: np.ndarray, round_: int = 0, memory: int | None = 10) -> SimilarityMemory:
    mem = SimilarityMemory(S.shape[0], memory=memory)
    mem.record(round_, np.arange(S.shape[0]), S)
    return mem


def _sym(n: int, pairs: dict[tuple[int, int], float], default: float) -> np.ndarray:
    S = np.full((n, n), float(default))
    for (i, j), v in pairs.items():
        S[i, j] = S[j, i] = v
    np.fill_diagonal(S, 1.0)
    return S


def figure1_matrix() -> np.ndarray:
    """Seven clients of Fig. 1 (ids 0..6 for clients 1..7): groups {1,2,3}, {4,5}, {6,7}."""
    c = {k: k - 1 for k in range(1, 8)}
    pairs = {
        (c[1], c[2]): 0.90, (c[6], c[7]): 0.85, (c[4], c[5]): 0.80,
        # client 3 is least similar to 1, 7 and 5 in the three subservers
        (c[1], c[3]): 0.50, (c[2], c[3]): 0.70,
        (c[6], c[3]): 0.30, (c[7], c[3]): 0.20,
        (c[4], c[3]): 0.15, (c[5], c[3]): 0.10,
        # {4,5} and {6,7} are on the same side (alpha_min_cross > 0) but Phi < 0
        (c[4], c[6]): 0.30, (c[4], c[7]): 0.30, (c[5], c[6]): 0.30, (c[5], c[7]): 0.30,
    }
    return _sym(7, pairs, default=-0.2)


def test_cosine_similarities_match_definition() -> None:
    rng = np.random.default_rng(0)
    U = rng.normal(size=(5, 30))
    S = cosine_similarities(U)
    for i in range(5):
        for j in range(5):
            ref = U[i] @ U[j] / np.linalg.norm(U[i]) / np.linalg.norm(U[j])
            assert S[i, j] == pytest.approx(ref, abs=1e-12)
    # scale invariance (cosine ignores magnitudes) and a zero update
    U2 = U * np.array([1, 10, 0.1, 3, 7])[:, None]
    np.testing.assert_allclose(cosine_similarities(U2), S, atol=1e-12)
    U2[2] = 0
    assert np.all(cosine_similarities(U2)[2] == 0)


def test_figure1_seven_clients_merge_in_the_papers_order() -> None:
    S = figure1_matrix()
    mem = _memory(S)
    labels = np.arange(7)
    steps = []
    for step in range(6):
        labels, ev = merge_round(mem, labels, round_=step, n_merge=1)
        steps.append(ev)
    merged = [tuple(sorted(e[0].merged)) if e else None for e in steps]
    # 1+2, then 6+7, then 4+5, then 3 joins subserver 1 (argmax of alpha_13, alpha_73, alpha_53)
    assert merged[:4] == [(0, 1), (5, 6), (3, 4), (0, 1, 2)]
    assert steps[3][0].kind == "client+subserver"
    assert steps[3][0].similarity == pytest.approx(0.5)
    assert merged[4:] == [None, None]  # {4,5}+{6,7}: alpha_min_cross > 0 but Phi = 0.3 - 0.8 < 0
    assert entities(labels) == [(0, 1, 2), (3, 4), (5, 6)]


def test_n_merge_bounds_merges_per_round() -> None:
    mem = _memory(figure1_matrix())
    labels, ev = merge_round(mem, np.arange(7), 0, n_merge=2)
    assert [e.merged for e in ev] == [(0, 1), (5, 6)]
    labels, ev = merge_round(mem, labels, 1, n_merge=10)
    assert [e.merged for e in ev] == [(3, 4), (0, 1, 2)]
    assert entities(labels) == [(0, 1, 2), (3, 4), (5, 6)]


def test_alpha0_is_a_strict_lower_bound() -> None:
    S = _sym(3, {(0, 1): 0.0, (0, 2): -0.5, (1, 2): -0.5}, default=0)
    assert find_merge(S, np.ones((3, 3), bool), np.arange(3), alpha_0=0.0) is None  # 0 > 0 is false
    a = find_merge(S, np.ones((3, 3), bool), np.arange(3), alpha_0=-0.1)
    assert a is not None and a[:2] == (0, 1)
    # a higher alpha_0 forbids merges that alpha_0 = 0 allows (Table IV: more clusters)
    S2 = _sym(2, {(0, 1): 0.05}, default=0)
    assert find_merge(S2, np.ones((2, 2), bool), np.arange(2), alpha_0=0.0) is not None
    assert find_merge(S2, np.ones((2, 2), bool), np.arange(2), alpha_0=0.1) is None


def test_phi_decides_between_two_subservers() -> None:
    # A = {0,1} (within 0.9), B = {2,3} (within 0.8); every cross pair 0.3 -> Phi = 0.3 - 0.8 < 0
    base = {(0, 1): 0.9, (2, 3): 0.8}
    S = _sym(4, {**base, (0, 2): 0.3, (0, 3): 0.3, (1, 2): 0.3, (1, 3): 0.3}, default=0)
    K = np.ones((4, 4), bool)
    labels = np.array([0, 0, 2, 2])
    assert find_merge(S, K, labels) is None
    # one cross pair above the weakest within pair -> Phi = 0.85 - 0.8 > 0; similarity is the cross minimum
    S = _sym(4, {**base, (0, 2): 0.85, (0, 3): 0.3, (1, 2): 0.3, (1, 3): 0.3}, default=0)
    a, b, sim, phi = find_merge(S, K, labels)
    assert (a, b) == (0, 2) and sim == pytest.approx(0.3) and phi == pytest.approx(0.05)
    # Phi does not apply to a client joining a subserver
    S = _sym(3, {(0, 1): 0.9, (0, 2): 0.2, (1, 2): 0.3}, default=0)
    a, b, sim, phi = find_merge(S, np.ones((3, 3), bool), np.array([0, 0, 2]))
    assert (a, b, phi) == (0, 2, None) and sim == pytest.approx(0.2)


def test_scan_tries_next_pair_when_phi_blocks_the_best() -> None:
    # subservers {0,1}, {2,3} (blocked by Phi, best score 0.6) and client 4 (score 0.4 with {0,1})
    pairs = {(0, 1): 0.95, (2, 3): 0.95, (0, 2): 0.6, (0, 3): 0.6, (1, 2): 0.6, (1, 3): 0.6,
             (0, 4): 0.4, (1, 4): 0.5}
    S = _sym(5, pairs, default=-0.3)
    K = np.ones((5, 5), bool)
    labels = np.array([0, 0, 2, 2, 4])
    assert find_merge(S, K, labels, scan=False) is None  # Algorithm 1 read literally
    a, b, sim, phi = find_merge(S, K, labels, scan=True)
    assert (a, b) == (0, 4) and sim == pytest.approx(0.4)


def test_unknown_pairs_are_ignored_in_minimum_and_phi() -> None:
    # clients 0,1 a subserver; only (0,2) was seen together: min over remembered pairs = 0.6
    S = -np.ones((3, 3))
    S[0, 2] = S[2, 0] = 0.6
    S[0, 1] = S[1, 0] = 0.9
    K = S > -1
    np.fill_diagonal(K, False)
    a, b, sim, _ = find_merge(S, K, np.array([0, 0, 2]))
    assert (a, b) == (0, 2) and sim == pytest.approx(0.6)
    # entities with no remembered pair between them are never candidates
    S = -np.ones((4, 4))
    S[0, 1] = S[1, 0] = 0.9
    K = S > -1
    assert find_merge(S, K, np.array([0, 0, 2, 3])) is None


def test_memory_forgets_pairs_not_seen_within_T_rounds() -> None:
    mem = SimilarityMemory(3, memory=2)
    mem.record(0, [0, 1], np.array([[1.0, 0.9], [0.9, 1.0]]))
    for t, expect in [(0, True), (1, True), (2, True), (3, False), (10, False)]:
        assert bool(mem.known(t)[0, 1]) is expect, t
        assert (find_merge(mem.alpha, mem.known(t), np.arange(3)) is not None) is expect
        assert mem.current(t)[0, 1] == (0.9 if expect else -1.0)
    mem.forget(3)
    assert mem.alpha[0, 1] == -1.0 and mem.tau[0, 1] == -1
    # infinite memory never forgets
    inf = SimilarityMemory(3, memory=None)
    inf.record(0, [0, 1], np.array([[1.0, 0.9], [0.9, 1.0]]))
    assert inf.known(10_000)[0, 1]


def test_memory_prevents_merging_on_a_leaked_similarity() -> None:
    """Fig. 3: two clients of different distributions look similar in round 0 only.

    With T = infinity the stale value still drives a merge at round 20; with T = 10 it
    has reverted to -1 and the pair is ignored.
    """
    n = 4
    for T, expect_merge in [(None, True), (10, False)]:
        mem = SimilarityMemory(n, memory=T)
        mem.record(0, [0, 2], np.array([[1.0, 0.7], [0.7, 1.0]]))  # leaked: 0 and 2 differ in truth
        mem.record(20, [0, 1, 3], _sym(3, {(0, 1): -0.2, (0, 2): -0.3, (1, 2): -0.1}, 0))
        _, ev = merge_round(mem, np.arange(n), 20, n_merge=1)
        assert bool(ev) is expect_merge
        if ev:
            assert ev[0].merged == (0, 2) and ev[0].similarity == pytest.approx(0.7)


def test_record_refreshes_tau_and_overwrites_alpha() -> None:
    mem = SimilarityMemory(3, memory=5)
    mem.record(0, [0, 1, 2], _sym(3, {(0, 1): 0.1, (0, 2): 0.2, (1, 2): 0.3}, 0))
    mem.record(4, [1, 2], np.array([[1.0, -0.4], [-0.4, 1.0]]))
    assert mem.alpha[1, 2] == -0.4 and mem.tau[1, 2] == 4 and mem.tau[0, 1] == 0
    assert not mem.known(6)[0, 1] and mem.known(6)[1, 2]
    with pytest.raises(ValueError, match="expected shape"):
        mem.record(5, [0, 1], np.eye(3))


def test_rule_finds_planted_groups_on_noisy_updates() -> None:
    """Greedy max-min merging on noisy updates of three planted directions recovers the groups."""
    rng = np.random.default_rng(3)
    truth = np.repeat([0, 1, 2], [4, 6, 8])
    dirs = rng.normal(size=(3, 200))
    mem = SimilarityMemory(truth.size, memory=10)
    labels = np.arange(truth.size)
    for t in range(30):
        sampled = np.sort(rng.choice(truth.size, 8, replace=False))
        U = dirs[truth[sampled]] + 0.8 * rng.normal(size=(8, 200))
        mem.observe(t, sampled, U)
        labels, _ = merge_round(mem, labels, t, n_merge=2)
    found = {tuple(e) for e in entities(labels)}
    assert found == {tuple(np.flatnonzero(truth == g)) for g in range(3)}
