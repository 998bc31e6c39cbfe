"""Guarantees that hold: the server cannot difference two secure sums, retries stay inside the
secure protocol, DP claims are true of every release, epsilon comes from a maintained
accountant for a stated adjacency, validation goes through the one secure sum, and tiny
values are never silently lost. Each test plays the server or reads what it held."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import fedray
from fedray.api.session import Session
from fedray.api.settings import privacy_settings
from fedray.core.calls import evaluate, train
from fedray.core.contract import Task
from fedray.core.errors import DataError, ReleaseRefusedError, RoundFailedError
from fedray.core.stats import Stats
from fedray.layers.privacy import PrivacyLayer
from tests import plugins

LOCAL = {"backend": "local"}
DATA = {"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 30}}
KM = {"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": 5}}


pytestmark = pytest.mark.quiet_log()


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
        layer = PrivacyLayer(s.executor, privacy_settings(s.config), s.config.seed)
        five = [0, 2, 3, 4, 5]
        first = layer.execute(train(1), {c: Task(plugins.column_sums, None, None) for c in five})
        second = layer.execute(evaluate(0), {c: Task(plugins.column_sums, None, None) for c in range(6)})
        client1 = plugins.column_sums(None, None, s.executor.host.clients[1]).flat()
        diff = _total(second) - _total(first)
        assert not np.allclose(diff, client1)
        np.testing.assert_allclose(diff, 0.0, atol=1e-9)
        assert second.failed == [1] and "release rule" in second.errors[1]
        assert layer.account["release_rule"]["narrowed"] == 1
        assert _pairs_apart(layer.account["releases"], 3) == []


def test_the_issue_run_refuses_the_round_that_the_set_up_sums_would_give_away():
    """kmeans, 6 clients, fraction 0.84: the set-up moments cover all six; a training round over
    {0,2,3,4,5} would give client 1's column sums as the set-up sums minus the round's per-cluster
    sums (one quantity under two names), so it is refused, naming the fixes; with
    release_rule 'count' it is released, and the summary counts client 1 as isolated."""
    kw = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": 1}}, data=DATA,
              federation={"n_clients": 6, "fraction": 0.84}, runtime=LOCAL, seed=5)
    with pytest.raises(ReleaseRefusedError, match=r"single out 1 client\(s\) \(e.g. \[1\]\).*fixes: "
                                                  r"privacy.cohorts='blocks'.*privacy.dp"):
        fedray.run(privacy={"secure_aggregation": True, "cohorts": "random"}, **kw)
    res = fedray.run(privacy={"secure_aggregation": True, "release_rule": "count", "cohorts": "random"}, **kw)
    assert res.summary["privacy"]["release_rule"]["isolated_clients"] == 1


def test_partial_participation_without_dp_refuses_sums_a_few_clients_apart(tmp_path):
    """kmeans, 6 clients, fraction 0.84 (5 a round): rounds 1 and 2 sample cohorts two clients apart,
    so the second sum is refused with a one-line error naming the rule and what to change; the failed
    run's summary still counts the release it made and the one the rule refused."""
    with pytest.raises(ReleaseRefusedError, match=r"a combination of the sums released so far .* fewer than "
                                                  r"privacy.min_cohort=3; fixes: .*privacy.dp"):
        fedray.run(algorithm=KM, data=DATA, federation={"n_clients": 6, "fraction": 0.84}, runtime=LOCAL, seed=5,
                   privacy={"secure_aggregation": True, "cohorts": "random"}, output=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "failed"
    rule = summary["privacy"]["release_rule"]
    assert (rule["release"], rule["refused"]) == (0, 1)  # round 1 minus the set-up sums would give client 1


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
        if r["kind"] not in ("train", "evaluate"):
            continue  # the set-up sum happened before the run: in the session's log of calls outside runs
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
        layer = PrivacyLayer(s.executor, privacy_settings(s.config), s.config.seed)
        server = Server(s.make_algorithm(), layer, seed=5)
        tasks = {c: Task(plugins.crash_listed, {"crash": (4,)}, None) for c in range(6)}
        with pytest.raises(RoundFailedError):
            server.gather(evaluate(0), tasks, need=6, ask_missing=2)
        assert layer.account["releases"] == [] and layer.account["release_rule"]["held"] == 3
        res, attempts = server.gather(evaluate(1), tasks, ask_missing=2)
        assert attempts == 3 and [r["clients"] for r in layer.account["releases"]] == [[0, 1, 2, 3, 5]]
        assert layer.account["release_rule"]["held"] == 5


# --- item 2: what DP covers ----------------------------------------------------------------------
def test_dp_summary_does_not_claim_to_cover_the_exact_evaluation_passes():
    """With DP and no secure aggregation, the evaluation replies are each client's exact statistics
    (difference 0.0 from the clean values); the summary must say they are not covered."""
    kw = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box", "max_rounds": 2}},
              data=DATA, federation={"n_clients": 4}, runtime=LOCAL, seed=3, **{"output.message_payloads": True})
    noisy = fedray.run(privacy={"dp": {"clip": 50.0, "noise_multiplier": 1.0}}, **kw)
    stage0 = {c: u for r, _, c, u in noisy.extras["payloads"] if r == -1 and isinstance(u, Stats)}
    assert len(stage0) == 4  # each client's own evaluation table, in the clear and exact:
    assert all(u["counts"].sum() == 30 and np.all(u["counts"] == np.round(u["counts"])) for u in stage0.values())
    dp = noisy.summary["privacy"]["dp"]
    assert dp["covers_all_messages"] is False
    assert dp["unnoised_releases"].get("evaluate", 0) >= 1 and "evaluation" in dp["covers"]
    releases = noisy.summary["privacy"]["releases"]
    assert releases["train"]["noised"] == releases["train"]["calls"] == dp["noised_rounds"]
    assert releases["evaluate"]["noised"] == 0


# --- item 3: epsilon, adjacency, accountant --------------------------------------------------------
def _old_rdp_epsilon(zs, delta):
    """The formula fedray used before dp-accounting (Mironov 2017, Prop. 3, on a grid of orders)."""
    import math

    alphas = np.concatenate([1.0 + np.logspace(-3, 0, 60), np.linspace(2.05, 64, 400), np.geomspace(64, 1e5, 200)])
    rho = float(np.sum(0.5 / np.square(np.asarray(zs, dtype=np.float64))))
    return float(np.min(alphas * rho + math.log(1.0 / delta) / (alphas - 1.0)))


@pytest.mark.parametrize("z,T", [(1.0, 5), (0.7, 20), (2.0, 50)])
def test_dp_accounting_epsilon_is_at_most_the_old_bound_for_the_same_adjacency(z, T):
    from fedray.layers.privacy import dp_epsilon

    add_remove = dp_epsilon([z] * T, 1e-5, "add-remove")
    replace = dp_epsilon([z] * T, 1e-5, "replace-one")
    assert add_remove["epsilon"] <= _old_rdp_epsilon([z] * T, 1e-5) * (1 + 1e-9)
    assert replace["epsilon"] <= _old_rdp_epsilon([z / 2] * T, 1e-5) * (1 + 1e-9)  # sensitivity 2C
    assert add_remove["epsilon"] <= add_remove["epsilon_rdp"] and replace["epsilon"] > 2 * add_remove["epsilon"]


def test_adjacency_is_a_named_option_with_replace_one_by_default_and_the_summary_states_it():
    from fedray.layers.privacy import dp_epsilon

    assert dp_epsilon([1.0] * 5, 1e-5, "add-remove")["epsilon"] == pytest.approx(11.5, abs=0.1)
    assert dp_epsilon([1.0] * 5, 1e-5, "replace-one")["epsilon"] == pytest.approx(28.4, abs=0.2)
    kw = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box", "max_rounds": 2}},
              data=DATA, federation={"n_clients": 4}, runtime=LOCAL, seed=3)
    default = fedray.run(privacy={"dp": {"clip": 50.0, "noise_multiplier": 1.0}}, **kw).summary["privacy"]["dp"]
    assert default["adjacency"] == "replace-one" and default["sensitivity"] == "2 * clip"
    other = fedray.run(privacy={"dp": {"clip": 50.0, "noise_multiplier": 1.0, "adjacency": "add-remove"}},
                       **kw).summary["privacy"]["dp"]
    assert other["noised_rounds"] == default["noised_rounds"] and other["epsilon"] < default["epsilon"] / 2
    from fedray.tools.describe import describe

    text = describe("privacy")  # what `fedray describe privacy` prints
    assert "privacy.dp.adjacency" in text and "'replace-one'" in text and "privacy.release_rule" in text


def test_dp_without_the_privacy_extra_fails_at_once_naming_the_pip_command(monkeypatch):
    import sys

    from fedray.core.errors import ConfigError

    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    with pytest.raises(ConfigError, match=r"pip install \"fedray\[privacy\]\""):
        fedray.make_config(privacy={"dp": {"clip": 1.0, "noise_multiplier": 1.0}})


@pytest.mark.parametrize("dp", [{"clip": float("inf"), "noise_multiplier": 1.0},
                                {"clip": 1.0, "noise_multiplier": float("inf")}])
def test_an_infinite_clip_or_noise_multiplier_is_refused_not_run_as_nan_statistics_with_an_epsilon(dp):
    """clip = inf clips nothing and makes the noise infinite (the statistics turn NaN, yet the summary
    reported a finite epsilon and private: true); the configuration refuses it, naming the key."""
    from fedray.core.errors import ConfigError

    key = next(k for k, v in dp.items() if v == float("inf"))
    with pytest.raises(ConfigError, match=rf"privacy.dp.{key}: Input should be a finite number"):
        fedray.make_config(privacy={"dp": dp})
    from fedray.tools.describe import describe

    assert "> 0, finite" in next(line for line in describe("privacy").splitlines() if f"privacy.dp.{key}" in line)


# --- item 4: validation and hide_n through the one secure sum -------------------------------------
def test_hide_n_and_fedfuzzdb_under_privacy_go_through_the_secure_sum_and_no_seeded_mask(monkeypatch):
    """The values go through PrivacyLayer.secure_sum (recorded), the server receives masked vectors
    only, and two sessions with the same seed send different masked vectors (no mask derives from
    the configuration)."""
    from fedray.analysis.validation import federated_fuzzy_db

    calls = []
    real = PrivacyLayer.secure_sum

    def spy(self, call, tasks, timeout=None):
        calls.append(call.purpose)
        return real(self, call, tasks, timeout)

    monkeypatch.setattr(PrivacyLayer, "secure_sum", spy)
    C = np.array([[-5.0, -5.0], [0.0, 0.0], [5.0, 5.0]])
    seen = []
    for _ in range(2):
        with Session(algorithm=KM, data=DATA, federation={"n_clients": 5}, runtime=LOCAL, seed=5,
                     **{"output.message_payloads": True}) as s:
            value = federated_fuzzy_db(s, C, hide_n=True)
            up = [u for r, _, c, u in s.layers.report().get("payloads", []) if r == -100]
            seen.append(value)
            assert up and all(getattr(u, "masked", False) for u in up)
            masked = {id(u): u.data.copy() for u in up}
        seen.append(masked)
    assert calls == ["validation", "validation"]
    assert seen[0] == pytest.approx(seen[2], rel=1e-12)
    a, b = list(seen[1].values()), list(seen[3].values())
    assert len(a) == len(b) and all(not np.array_equal(x, y) for x, y in zip(a, b))
    with Session(algorithm=KM, data=DATA, federation={"n_clients": 5}, runtime=LOCAL, seed=5,
                 privacy={"secure_aggregation": True}) as s:
        federated_fuzzy_db(s, C)
    assert calls[-2:] == ["moments", "validation"]  # the set-up moments, then the index


# --- item 6: tiny values ---------------------------------------------------------------------------
def _tiny(payload, shared, client) -> Stats:
    return Stats(big=np.array([1.0, 2.0]), tiny=np.array([3e-22, 0.0]))


def test_a_statistic_too_small_for_the_fixed_point_is_refused_in_one_line_naming_it():
    """Fixed point keeps 2^-64 absolute: 3e-22 would become 0 without a word. The secure sum
    refuses it with a one-line error naming the statistic; exact zeros and normal values pass."""
    with _session() as s:
        layer = PrivacyLayer(s.executor, privacy_settings(s.config), s.config.seed)
        with pytest.raises(DataError, match=r"statistic 'tiny' .* at most 3e-22.*data.scale") as err:
            layer.secure_sum(train(0), {c: Task(_tiny, None, None) for c in range(6)})
        assert "\n" not in str(err.value)
        total = layer.secure_sum(train(1), {c: Task(plugins.column_sums, None, None) for c in range(6)})
        assert total["n"] == pytest.approx(6 * 30)


# --- the threat model's table matches what the summary counts ------------------------------------
def _doc_table() -> dict[str, tuple[set[str], bool]]:
    """Per clustering algorithm of docs/reliability.md's disclosure table: the release kinds and whether
    it lists unprotected messages."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "reliability.md").read_text()
    table = text[text.index("### Disclosures per algorithm"):]
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        kinds = {k.strip("` ") for k in cells[2].split(",")} - {"—", ""}
        for name in cells[0].split(","):
            out[name.strip().strip("`")] = (kinds, cells[3] != "—")
    return out


@pytest.mark.parametrize("name", ["kmeans", "federated-fcm", "fedkmeans", "kfed", "fedfcm", "fedfcm-avg"])
def test_the_disclosure_table_matches_the_summary(name):
    kinds, unprotected = _doc_table()[name]
    res = fedray.run(algorithm={"name": name, "params": {"n_clusters": 3}}, data=DATA,
                     federation={"n_clients": 4, "rounds": 3}, runtime=LOCAL, seed=1,
                     privacy={"secure_aggregation": True})
    p = res.summary["privacy"]
    assert set(p["releases"]) == kinds | {"setup"}  # every run lists the set-up moments
    assert all(v["summed"] == v["calls"] for v in p["releases"].values())
    assert (p["unprotected_messages"] > 0) == unprotected


def test_on_ray_the_session_remembers_the_sums_a_run_released_in_its_server_actor(ray_session):
    """A run on Ray holds a copy of the layers in its server actor; the session's privacy layer must
    learn that run's releases, or a later call could be differenced with them."""
    from fedray.layers.stack import find_layer

    with Session(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": 2}}, data=DATA,
                 federation={"n_clients": 6}, runtime={"backend": "ray", "clients_per_actor": 3}, seed=5,
                 privacy={"secure_aggregation": True}) as s:
        s.run(output=False)
        layer = find_layer(s.layers, PrivacyLayer)
        kinds = {r.kind for r in layer.releases.released}
        assert {"train", "evaluate"} <= kinds
        five = [0, 2, 3, 4, 5]
        from fedray.algorithms.kmeans import lloyd_stats

        C = np.zeros((3, 2))
        with pytest.raises(ReleaseRefusedError, match="a combination of the sums released so far"):
            layer.execute(train(7), {c: Task(lloyd_stats, None, C) for c in five})
