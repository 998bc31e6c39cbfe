"""Privacy: secure aggregation changes nothing but what the server sees; DP clips, noises and
accounts; the minimum-sample guard withholds small clients' statistics."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.core.errors import ConfigError
from fedray.core.stats import Stats
from fedray.layers.privacy import MOD, SCALE, MaskedStats, decode, dp_epsilon, mask_peers
from fedray.layers.privacy.guards import with_contributors

LOCAL = {"backend": "local"}
# An explicit start: under privacy the random box comes from secure moments, not clients' extremes.
START = [[-6.0, -6.0], [-6.0, 6.0], [6.0, -6.0], [6.0, 6.0]]
FCM = {"name": "federated-fcm", "params": {"n_clusters": 4, "init": START, "max_rounds": 8}}
BLOBS = dict(data={"dataset": "blobs", "options": {"n_centers": 4, "points_per_client": 80}},
             federation={"n_clients": 8, "rounds": 8}, seed=2, runtime=LOCAL)


pytestmark = pytest.mark.quiet_log(logging.ERROR)


def _payloads(res) -> dict[tuple[int, int, int], object]:
    return {(r, a, c): u for r, a, c, u in res.extras["payloads"]}


@pytest.mark.parametrize("algorithm", [FCM, {"name": "kmeans", "params": {"n_clusters": 4, "max_rounds": 6}}])
def test_secure_aggregation_gives_the_same_centres_and_the_server_sees_only_masked_vectors(algorithm):
    kw = dict(algorithm=algorithm, **BLOBS, **{"output.message_payloads": True})
    box = [(-12.0, 12.0), (-12.0, 12.0)]  # the same box (random-box start) for both runs
    plain = fedray.run(privacy={"feature_bounds": box}, **kw)
    masked = fedray.run(privacy={"secure_aggregation": True, "feature_bounds": box}, **kw)
    np.testing.assert_allclose(masked.centers, plain.centers, rtol=1e-9, atol=1e-9)
    assert abs(masked.final["objective"] - plain.final["objective"]) <= 1e-9 * plain.final["objective"]
    log = masked.messages
    up = log[log["direction"] == "up"]
    assert "stats" not in set(up["kind"])  # no client sum reached the server unmasked
    assert (up.loc[up["function"].str.contains("stats|evaluate_pass"), "kind"] == "masked").all()
    assert set(plain.messages.loc[plain.messages["direction"] == "up", "kind"]) >= {"stats"}
    # Each masked vector looks nothing like the client's true sums, and (double masking) not even the
    # round's vectors added up give the total: the server also needs the self-masks of the survivors,
    # which it gets only from t shares in the unmasking step.
    true = _payloads(plain)
    seen = _payloads(masked)
    rounds = sorted({k[0] for k, v in seen.items() if isinstance(v, MaskedStats) and k[0] >= 0})
    assert rounds
    for rnd in rounds:
        keys = sorted(k for k, v in seen.items() if k[0] == rnd and isinstance(v, MaskedStats))
        # (crisp per-cluster sums travel with their contributor indicators: per-cluster support)
        total_true = sum(
            (with_contributors(true[k]) for k in keys), start=with_contributors(true[keys[0]]).zero()
        ).flat()
        acc = [0] * len(total_true)
        for k in keys:
            ints = seen[k].ints()
            assert len(ints) == len(total_true)
            assert not np.allclose(decode(ints), with_contributors(true[k]).flat(), rtol=1e-3)
            assert max(ints) > MOD // 4  # masked integers spread over the whole ring
            acc = [a + b for a, b in zip(acc, ints)]
        assert not np.allclose(decode([a % MOD for a in acc]), total_true, rtol=1e-3)
    acc = masked.summary["privacy"]
    assert acc["masked_messages"] > 0 and acc["protocol_messages"] > 0
    assert acc["recovered_masks"] == 0 and acc["reconstructed_keys"] == 0 and acc["refused_rounds"] == 0


@pytest.mark.parametrize("neighbors", [None, 6])
def test_masks_of_clients_that_did_not_answer_are_removed(neighbors):
    faults = {"crash_probability": 0.3}
    plain = fedray.run(algorithm=FCM, faults=faults, **BLOBS)
    # release_rule "count": random dropouts give successive rounds cohorts a client or two apart; the
    # strict rule would refuse those sums (tests/layers/test_guarantees.py), here they are released and counted
    masked = fedray.run(algorithm=FCM, faults=faults, privacy={"secure_aggregation": True, "mask_neighbors": neighbors,
                                                               "secagg_threshold": 0.34, "release_rule": "count"},
                        **BLOBS)
    assert plain.history["clients_failed"].sum() > 0
    np.testing.assert_allclose(masked.centers, plain.centers, rtol=1e-9, atol=1e-9)
    assert masked.summary["privacy"]["recovered_masks"] > 0
    assert masked.summary["privacy"]["reconstructed_keys"] > 0  # from Shamir shares held by survivors
    assert masked.summary["privacy"]["disclosures"].get("differencing", 0) > 0


def test_mask_peers_are_symmetric_and_every_mask_cancels():
    cohort = [0, 2, 3, 5, 8, 9, 11]
    for k in (None, 2, 4):
        peers = mask_peers(cohort, k, 1, 3, 0)
        assert all(i in peers[j] for i in cohort for j in peers[i])
        assert all(len(p) == (len(cohort) - 1 if k is None else k) for p in peers.values())


def test_fixed_point_encoding_is_exact_to_2_pow_minus_64():
    from fedray.layers.privacy import encode

    x = np.array([0.1, -3.5e9, 1e-12, 123456.789, -0.0])
    back = decode([v % MOD for v in encode(x)])
    np.testing.assert_allclose(back, x, rtol=1e-15, atol=1.0 / SCALE)


def test_dp_clips_each_client_and_adds_noise_from_a_secret_stream():
    """Noise is drawn from the OS on each client: two runs with one seed differ (not reproducible,
    as documented). The seeded variant reproduces, and its account says plainly it is not private."""
    clip = 5.0
    kw = dict(algorithm=FCM, **BLOBS, **{"output.message_payloads": True})
    nearly = fedray.run(privacy={"dp": {"clip": clip, "noise_multiplier": 1e-12}}, **kw)
    for (rnd, _, _), upd in _payloads(nearly).items():
        if rnd >= 0 and isinstance(upd, Stats):
            assert np.linalg.norm(upd.flat()) <= clip * (1 + 1e-9)
    noisy = fedray.run(privacy={"dp": {"clip": clip, "noise_multiplier": 0.5}}, **kw)
    again = fedray.run(privacy={"dp": {"clip": clip, "noise_multiplier": 0.5}}, **kw)
    assert not np.allclose(noisy.centers, again.centers)
    assert not np.allclose(noisy.centers, nearly.centers)
    acc = noisy.summary["privacy"]["dp"]
    n = acc["noised_rounds"]
    assert n == len(noisy.history) and acc["mode"] == "local" and acc["private"] is True
    assert acc["epsilon"] == pytest.approx(dp_epsilon([0.5] * n, 1e-5)["epsilon"])
    # Explicit start: only statistics were sent in training; the evaluation passes are exact, not noised,
    # so the account must say the guarantee does not cover everything.
    assert acc["covers_all_messages"] is False and acc["unnoised_releases"]["evaluate"] > 0
    seeded = {"dp": {"clip": clip, "noise_multiplier": 0.5, "seeded_noise": True}}
    a, b = fedray.run(privacy=seeded, **kw), fedray.run(privacy=seeded, **kw)
    np.testing.assert_array_equal(a.centers, b.centers)
    assert a.summary["privacy"]["dp"]["private"] is False
    assert "not private" in a.summary["privacy"]["dp"]["noise"]


def test_dp_account_grows_with_releases_and_shrinks_with_noise():
    eps = lambda z, T: dp_epsilon([z] * T, 1e-5)["epsilon"]  # noqa: E731
    assert eps(1.0, 20) > eps(1.0, 10) > eps(2.0, 10)


def test_distributed_dp_with_secure_aggregation_splits_the_noise_over_the_cohort():
    kw = dict(algorithm=FCM, **BLOBS)
    dp = {"clip": 50.0, "noise_multiplier": 1.0, "seeded_noise": True}  # seeded: a reproducible comparison
    res = fedray.run(privacy={"secure_aggregation": True, "dp": dp}, **kw)
    acc = res.summary["privacy"]["dp"]
    assert acc["mode"] == "distributed"
    assert acc["epsilon"] == pytest.approx(dp_epsilon([1.0] * acc["noised_rounds"], 1e-5)["epsilon"])  # all answered
    local = fedray.run(privacy={"dp": dp}, **kw)
    err = lambda r: np.abs(np.sort(r.centers, axis=0) - np.sort(fedray.run(**kw).centers, axis=0)).max()  # noqa: E731
    assert err(res) < err(local)  # one noise draw in the sum instead of one per client


def test_minimum_sample_guard_withholds_small_clients(tmp_path):
    rng = np.random.default_rng(0)
    sizes = {"big-a": 60, "big-b": 60, "tiny": 5}  # tiny: 5 * 2 features <= 4 * 3 + 1 statistics
    rows = [pd.DataFrame({"x": rng.normal(size=n) + 3 * i, "y": rng.normal(size=n), "site": s})
            for i, (s, n) in enumerate(sizes.items())]
    path = tmp_path / "sites.csv"
    pd.concat(rows).to_csv(path, index=False)
    res = fedray.run(algorithm=FCM, data={"dataset": f"csv:{path}", "client_column": "site"},
                     federation={"n_clients": None, "rounds": 5}, runtime=LOCAL, seed=0,
                     privacy={"min_samples_guard": True}, **{"output.messages": True})
    log = res.messages
    train_up = log[(log["direction"] == "up") & (log["round"] >= 0)]
    tiny = sorted(res.clients.loc[res.clients["name"] == "tiny", "client_id"])[0]
    assert set(train_up.loc[train_up["client_id"] == tiny, "kind"]) == {"none"}
    assert set(train_up.loc[train_up["client_id"] != tiny, "kind"]) == {"stats"}
    assert res.summary["privacy"]["withheld"] == len(res.history)
    assert np.isfinite(res.centers).all()


def test_privacy_config_errors():
    with pytest.raises(ConfigError, match=r"privacy.dp.clip: .*greater than 0"):
        fedray.make_config(privacy={"dp": {"clip": -1, "noise_multiplier": 1}})
    with pytest.raises(ConfigError, match=r"privacy.mask_neighbors: .*greater than or equal to 2"):
        fedray.make_config(privacy={"secure_aggregation": True, "mask_neighbors": 1})
