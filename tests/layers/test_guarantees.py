"""Guarantees that hold: the server cannot difference two secure sums, retries stay inside the
secure protocol, DP claims are true of every release, epsilon comes from a maintained
accountant for a stated adjacency, validation goes through the one secure sum, and tiny
values are never silently lost. Each test plays the server or reads what it held."""
from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest

import fedray
from fedray.api.session import Session
from fedray.core.calls import evaluate, train
from fedray.core.contract import Task
from fedray.core.errors import DataError, RoundFailedError
from fedray.core.stats import Stats
from fedray.layers.privacy import PrivacyLayer

LOCAL = {"backend": "local"}
DATA = {"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 30}}
KM = {"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": 5}}


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("fedray").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("fedray").setLevel(logging.NOTSET)


def _sums(payload, shared, client) -> Stats:
    X = client.data.X
    return Stats(s=X.sum(axis=0), n=np.array(float(X.shape[0])))


def _crash(payload, shared, client) -> Stats:
    if client.id in payload["crash"]:
        raise RuntimeError(f"client {client.id} dropped out")
    return _sums(payload, shared, client)


def _session(n_clients: int = 6, **privacy) -> Session:
    return Session(algorithm=KM, data=DATA, federation={"n_clients": n_clients}, runtime=LOCAL, seed=5,
                   privacy={"secure_aggregation": True, **privacy})


def _total(res) -> np.ndarray:
    return sum(r.update.flat() for r in res.replies)


def _pairs_apart(releases, min_cohort):
    """Pairs of un-noised released sums of a common statistic whose cohorts differ by 1..min_cohort-1."""
    summed = [r for r in releases if r["summed"]]
    return [(a, b) for a, b in itertools.combinations(summed, 2)
            if not (a["noised"] or b["noised"]) and set(a["statistics"]) & set(b["statistics"])
            and 0 < len(set(a["clients"]) ^ set(b["clients"])) < min_cohort]


# --- item 1: differencing through secure aggregation ------------------------------------------
def test_an_evaluation_over_everyone_cannot_be_differenced_with_a_training_sum_over_all_but_one():
    """The server held the training sum over clients {0,2,3,4,5}; an evaluation sum over all six would
    give client 1's statistics by subtraction (exactly, for the same statistics). The layer narrows the
    second sum to the released cohort: the difference is zero, never client 1's statistics."""
    with _session() as s:
        layer = PrivacyLayer(s.executor, s.config.privacy, s.config.seed)
        five = [0, 2, 3, 4, 5]
        first = layer.execute(train(1), {c: Task(_sums, None, None) for c in five})
        second = layer.execute(evaluate(0), {c: Task(_sums, None, None) for c in range(6)})
        client1 = _sums(None, None, s.executor.host.clients[1]).flat()
        diff = _total(second) - _total(first)
        assert not np.allclose(diff, client1)
        np.testing.assert_allclose(diff, 0.0, atol=1e-9)
        assert second.failed == [1] and "release rule" in second.errors[1]
        assert layer.account["release_rule"]["narrowed"] == 1
        assert _pairs_apart(layer.account["releases"], 3) == []


def test_partial_participation_without_dp_refuses_sums_a_few_clients_apart():
    """kmeans, 6 clients, fraction 0.84 (5 a round): rounds 1 and 2 sample cohorts two clients apart,
    so the second sum is refused with a one-line error naming the rule and what to change."""
    with pytest.raises(RoundFailedError, match=r"differs from the sum already released .* fewer than "
                                               r"privacy.min_cohort=3.*privacy.dp"):
        fedray.run(algorithm=KM, data=DATA, federation={"n_clients": 6, "fraction": 0.84}, runtime=LOCAL, seed=5,
                   privacy={"secure_aggregation": True})


def test_partial_participation_with_dp_releases_only_pairs_that_dp_covers_and_the_summary_counts_them():
    """With DP the same run completes; in the message log every released sum covers clients whose
    masked vectors arrived, no pair of un-noised sums is fewer than min_cohort clients apart, and the
    summary counts each release that DP had to cover."""
    res = fedray.run(algorithm=KM, data=DATA, federation={"n_clients": 6, "fraction": 0.84}, runtime=LOCAL, seed=5,
                     privacy={"secure_aggregation": True, "dp": {"clip": 100.0, "noise_multiplier": 1.0}},
                     **{"output.messages": True})
    m = res.messages
    up = m[(m.direction == "up") & (m.kind == "masked")]
    releases = res.extras["releases"]
    assert releases and _pairs_apart(releases, 3) == []
    for r in releases:
        arrived = set(up[(up["round"] == r["round"]) & (up["attempt"] == r["attempt"])].client_id)
        assert set(r["clients"]) <= arrived
    rule = res.summary["privacy"]["release_rule"]
    assert rule["dp_covered"] > 0 and rule["refused"] == 0
    assert any(r["kind"] == "evaluate" and not r["noised"] for r in releases)  # the evaluation is exact ...
    assert res.summary["privacy"]["dp"]["covers_all_messages"] is False  # ... so DP does not cover everything


def test_a_retried_round_is_unmasked_once_over_the_full_cohort():
    """faults.crashes [[1, 3]], min_clients 6, round_retries 1: attempt 0 of round 1 has five survivors,
    fewer than the six the round needs, so its sum is held back (never unmasked); attempt 1 is
    unmasked over all six. The server never holds two sums of round 1 one client apart."""
    res = fedray.run(algorithm=KM, data=DATA, federation={"n_clients": 6, "min_clients": 6, "round_retries": 1},
                     faults={"crashes": [[1, 3]]}, runtime=LOCAL, seed=5, privacy={"secure_aggregation": True},
                     **{"output.messages": True})
    r1 = [r for r in res.extras["releases"] if r["kind"] == "train" and r["round"] == 1]
    assert [(r["attempt"], r["clients"]) for r in r1] == [(1, [0, 1, 2, 3, 4, 5])]
    assert _pairs_apart(res.extras["releases"], 3) == []
    assert res.summary["privacy"]["release_rule"]["held"] == 1
    m = res.messages
    assert set(m[(m["round"] == 1) & (m.attempt == 0) & (m.direction == "up")].client_id) == {0, 1, 2, 4, 5}


# --- item 5: a crash in the k-FED start ----------------------------------------------------------
def test_one_crash_in_the_kfed_start_is_retried_with_the_whole_cohort():
    """The k-FED start needs every client; under secure aggregation the missing client is asked again
    together with the original cohort (a cohort of one would be below min_cohort)."""
    res = fedray.run(algorithm=KM, data=DATA, federation={"n_clients": 6}, faults={"crashes": [[0, 2]]},
                     runtime=LOCAL, seed=5, privacy={"secure_aggregation": True}, **{"output.messages": True})
    row0 = res.history.iloc[0]
    assert row0["phase"] == "init" and row0["clients_answered"] == 6 and row0["attempts"] == 2
    m = res.messages
    assert set(m[(m["round"] == 0) & (m.attempt == 1) & (m.direction == "down")].client_id) == set(range(6))
    assert np.isfinite(res.centers).all()


def test_evaluation_retries_stay_inside_the_protocol_and_a_sum_short_of_someone_is_held_back():
    """Through the server's gather: a client fails in the first two attempts of an evaluation pass;
    the pass is asked again with the whole cohort, and only the complete attempt is unmasked."""
    from fedray.loop.server import Server

    with _session() as s:
        layer = PrivacyLayer(s.executor, s.config.privacy, s.config.seed)
        server = Server(s.make_algorithm(), layer, seed=5)
        tasks = {c: Task(_crash, {"crash": (4,)}, None) for c in range(6)}
        with pytest.raises(RoundFailedError):
            server.gather(evaluate(0), tasks, need=6, ask_missing=2)
        assert layer.account["releases"] == [] and layer.account["release_rule"]["held"] == 3
        res, attempts = server.gather(evaluate(1), tasks, ask_missing=2)
        assert attempts == 3 and [r["clients"] for r in layer.account["releases"]] == [[0, 1, 2, 3, 5]]
        assert layer.account["release_rule"]["held"] == 5
