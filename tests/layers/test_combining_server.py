"""A curious server that combines every sum it was given (least squares over the cohorts), played
through the public Algorithm contract: a k-means subclass records each released total and its
cohort. Under secure aggregation without DP and with partial participation, no combination of the
released sums (with the set-up moments) gives a client's column sums or per-cluster statistics."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from fedray.algorithms.kmeans import FederatedKMeans
from fedray.api.session import Session
from fedray.core.errors import ReleaseRefusedError, RoundFailedError
from fedray.core.stats import total
from fedray.layers.privacy import dp_epsilon
from fedray.layers.privacy.span import System

LOCAL = {"backend": "local"}
DATA = {"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 30}}
KM = {"n_clusters": 3, "max_rounds": 30, "tol": 1e-300, "settle_window": 0}  # the review ran all 30 rounds


class CuriousKMeans(FederatedKMeans):
    """k-means that keeps what a curious server holds: each released total and the clients in it."""

    seen: list[tuple[list[int], dict[str, np.ndarray]]] = []

    def update(self, ctx, replies):
        t = total(replies)
        CuriousKMeans.seen.append(([r.client_id for r in replies], {k: np.array(v) for k, v in t.items()}))
        return super().update(ctx, replies)


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("fedray").setLevel(logging.CRITICAL)
    CuriousKMeans.seen = []
    yield
    logging.getLogger("fedray").setLevel(logging.NOTSET)


def _in_row_space(A: np.ndarray, i: int) -> bool:
    """e_i is a combination of the rows of A (client i's value is a combination of the released sums)."""
    e = np.zeros(A.shape[1])
    e[i] = 1.0
    y = np.linalg.lstsq(A.T, e, rcond=None)[0]
    return bool(np.allclose(A.T @ y, e, atol=1e-8))


def _attack(n_clients: int, **privacy):
    """Run 30 rounds at fraction 0.5 and play the server: least squares over the set-up column sums
    and every round's total, against each client's true column sums and per-cluster sums."""
    with Session(algorithm={"name": "kmeans", "params": KM}, data=DATA, runtime=LOCAL, seed=5,
                 federation={"n_clients": n_clients, "fraction": 0.5, "rounds": 30},
                 privacy={"secure_aggregation": True, **privacy}) as s:
        res = s.run(CuriousKMeans)
        X = [s.executor.host.clients[c].data.X for c in range(n_clients)]
    cols = np.array([x.sum(axis=0) for x in X])
    rows = [np.ones(n_clients)]  # the set-up moments: column sums over every client
    targets = [cols.sum(axis=0)]
    for cohort, t in CuriousKMeans.seen:
        row = np.zeros(n_clients)
        row[cohort] = 1.0
        rows.append(row)
        targets.append(t["sums"].sum(axis=0))  # per-cluster sums add up to the column sums
    A, T = np.array(rows), np.array(targets)
    guess = np.linalg.lstsq(A, T, rcond=None)[0]
    return res, A, cols, guess


@pytest.mark.parametrize("n_clients", [20, 16])
def test_least_squares_over_every_released_sum_isolates_no_client_with_fixed_blocks(n_clients):
    """privacy.cohorts='blocks': the run goes to its end (30 rounds or convergence) with every training
    round released; e_i is in the row space of no client (so no coefficients give its column sums or,
    once assignments settle, its per-cluster sums), the least-squares guess misses every client, and
    the summary says 0 isolated."""
    res, A, cols, guess = _attack(n_clients, cohorts="blocks")
    assert res.summary["stop_reason"] in ("converged", "rounds done", "round cap")
    assert len(CuriousKMeans.seen) == len(res.history) - 1 >= 3  # round 0 is the start (no sums)
    assert not any(_in_row_space(A, i) for i in range(n_clients))
    err = np.linalg.norm(guess - cols, axis=1) / np.linalg.norm(cols, axis=1)
    assert err.min() > 1e-3
    rule = res.summary["privacy"]["release_rule"]
    assert rule["isolated_clients"] == 0 and rule["small_groups"] == 0 and rule["refused"] == 0


def test_random_cohorts_without_dp_stop_before_a_client_is_isolated_naming_the_fix():
    """privacy.cohorts='random', 20 clients: the rule refuses the round whose sum would let a combination
    single out fewer than min_cohort clients, at once (ReleaseRefusedError, no retry); what was released
    up to then isolates nobody (the set-up-minus-round-0 case included)."""
    with pytest.raises(
        ReleaseRefusedError,
        match=r"^run .*CuriousKMeans \(seed 5\): round \d+.*single out \d+ client.*fewer than "
        r"privacy.min_cohort=3; fixes: privacy.cohorts='blocks'.*"
        r"release_rule='count'",
    ):
        _attack(20, cohorts="random")
    rows = [np.ones(20)] + [np.isin(np.arange(20), c).astype(float) for c, _ in CuriousKMeans.seen]
    assert len(rows) > 1 and not any(_in_row_space(np.array(rows), i) for i in range(20))


def test_the_set_up_moments_minus_a_round_over_all_but_one_are_one_system():
    """6 clients at fraction 0.84: the set-up column sums are over all six, round 1's per-cluster sums
    over five; their difference would be the sixth client's column sums (different names, one
    quantity). Strict: refused; count: released and counted (the summary says 1 isolated client)."""
    with pytest.raises(RoundFailedError, match="single out 1 client"):
        Session(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": 2}}, data=DATA,
                runtime=LOCAL, seed=5, federation={"n_clients": 6, "fraction": 0.84},
                privacy={"secure_aggregation": True, "cohorts": "random"}).run(CuriousKMeans)
    assert CuriousKMeans.seen == []
    with Session(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": 2}}, data=DATA,
                 runtime=LOCAL, seed=5, federation={"n_clients": 6, "fraction": 0.84},
                 privacy={"secure_aggregation": True, "release_rule": "count", "cohorts": "random"}) as s:
        res = s.run(CuriousKMeans)
    rule = res.summary["privacy"]["release_rule"]
    assert rule["isolated_clients"] >= 1 and res.summary["privacy"]["disclosures"]["differencing"] >= 1


def test_with_dp_the_partial_participation_run_finishes_and_epsilon_counts_its_releases():
    """DP on: the same 20-client run finishes its 30 rounds with random cohorts; every training sum
    is noised, and epsilon is the accountant's over exactly the noised releases made."""
    res, _, _, _ = _attack(20, dp={"clip": 100.0, "noise_multiplier": 1.0})
    assert len(res.history) == 30
    dp = res.summary["privacy"]["dp"]
    noised = [r for r in res.extras["releases"] if r["noised"]]
    trained = [r for r in res.extras["releases"] if r["kind"] == "train"]
    assert dp["noised_rounds"] == len(noised) == len(trained) >= 29  # round 0 is the start (no sums)
    assert dp["epsilon"] == pytest.approx(dp_epsilon([1.0] * len(noised), 1e-5)["epsilon"])


def test_atoms_and_the_isolated_clients_of_a_system():
    """Cohorts {0..9}, {5..14} and {0..14}: atoms of 5; adding {0..9} minus client 3 would make client 3
    an atom of its own and isolate it exactly (e_3 = row({0..9}) - row({0..9} - {3}))."""
    sys = System(3)
    for c in (range(10), range(5, 15), range(15)):
        sys.add(System.ids(c))
    assert sys.exposure().safe and sys.isolated().size == 0
    minus3 = System.ids([c for c in range(10) if c != 3])
    e = sys.exposure(minus3)
    assert not e.safe and e.smallest == (3,)
    sys.add(minus3)
    assert sys.isolated().tolist() == [3]


def test_a_dropout_in_a_block_cohort_is_narrowed_to_the_whole_blocks_that_answered():
    """Blocks {0,1,2}, {3,4,5}, {6,7,8}; a set-up sum over all nine and a round over blocks 1 and 2;
    then a round over blocks 0 and 1 in which client 4 dropped: {0,1,2,3,5} would make {3,5} an atom
    of two (a combination of the three sums is their sum), so the sum is narrowed to block 0, the
    whole block that answered (every atom stays a union of blocks)."""
    from fedray.layers.privacy.release import Release, ReleaseLog

    log = ReleaseLog(3)
    log.blocks = np.repeat(np.arange(3), 3)
    stats = frozenset({"s:(2,)", "n:(1,)"})
    log.add(Release("setup", -1000, 0, frozenset(range(9)), stats, False))
    log.add(Release("train", 0, 0, frozenset(range(3, 9)), frozenset({"sums:(3, 2)"}), False))
    verdict, cohort, exposure = log.decide(frozenset({0, 1, 2, 3, 5}), frozenset({"sums:(3, 2)"}), False)
    assert (verdict, cohort) == ("narrowed", frozenset({0, 1, 2}))
    assert not exposure.safe and exposure.smallest == (3, 5)
    assert log.decide(frozenset(range(6)), frozenset({"counts:(3,)"}), False)[0] == "release"


def test_block_cohorts_are_seeded_unions_of_fixed_blocks_of_at_least_min_cohort():
    from fedray.core.seeding import client_blocks, sample_blocks

    blocks = client_blocks(5, 20, 3)
    assert np.array_equal(blocks, client_blocks(5, 20, 3)) and np.bincount(blocks).min() >= 3
    assert np.bincount(blocks).sum() == 20 and len(np.bincount(blocks)) == 6
    for r in range(10):
        c = sample_blocks(5, r, blocks, 0.5)
        assert np.array_equal(c, sample_blocks(5, r, blocks, 0.5))  # same seed, same cohort
        assert len(set(blocks[c])) == 3 and np.isin(blocks, blocks[c]).sum() == c.size  # whole blocks only
