"""Hostile privacy tests (issue 13, items 1 and 2): what an honest-but-curious server can and
cannot learn. Each test plays the attacker with everything the server holds (configuration, seed,
relayed public keys and ciphertexts, masked messages, the shares it is given) and checks that
the attack fails; where a disclosure cannot be avoided, it checks that the privacy account
counts it."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.api.session import Session
from fedray.api.settings import privacy_settings
from fedray.core.calls import train
from fedray.core.contract import Task
from fedray.core.errors import ConfigError, RoundFailedError
from fedray.core.seeding import client_rng
from fedray.core.stats import Stats
from fedray.layers.messages import find_own_rows
from fedray.layers.privacy import MOD, PrivacyLayer, decode
from tests import plugins

LOCAL = {"backend": "local"}
START = [[-6.0, -6.0], [-6.0, 6.0], [6.0, -6.0], [6.0, 6.0]]
BLOBS = dict(data={"dataset": "blobs", "options": {"n_centers": 4, "points_per_client": 80}},
             federation={"n_clients": 8, "rounds": 6}, seed=2, runtime=LOCAL)


pytestmark = pytest.mark.quiet_log()


def _old_pair_mask(seed: int, i: int, j: int, round_: int, attempt: int, length: int) -> list[int]:
    """The seed-keyed derivation of the previous implementation (what config.yaml alone gave away)."""
    lo, hi = (i, j) if i < j else (j, i)
    b = np.random.default_rng(np.random.SeedSequence([seed, 0x5A, lo, hi, round_, attempt])).bytes(32 * length)
    return [int.from_bytes(b[k : k + 32], "little") for k in range(0, len(b), 32)]


def _session(n_clients: int = 6, **privacy) -> Session:
    return Session(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                   data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 20}},
                   federation={"n_clients": n_clients}, runtime=LOCAL, seed=5,
                   privacy={"secure_aggregation": True, **privacy})


def test_same_seed_gives_identical_centres_and_different_masked_messages():
    """Acceptance: results derive from the seed, masks do not."""
    kw = dict(algorithm={"name": "federated-fcm", "params": {"n_clusters": 4, "init": START, "max_rounds": 6}},
              privacy={"secure_aggregation": True}, **BLOBS, **{"output.message_payloads": True})
    a, b = fedray.run(**kw), fedray.run(**kw)
    np.testing.assert_array_equal(a.centers, b.centers)
    pa = {(r, at, c): u for r, at, c, u in a.extras["payloads"] if getattr(u, "masked", False)}
    pb = {(r, at, c): u for r, at, c, u in b.extras["payloads"] if getattr(u, "masked", False)}
    assert pa and pa.keys() == pb.keys()
    assert all(not np.array_equal(pa[k].data, pb[k].data) for k in pa)


def test_the_server_cannot_compute_a_surviving_clients_mask():
    """Acceptance: with the configuration, the seed, the relayed public keys and ciphertexts, the
    masked messages and even the survivors' self-masks (which the server reconstructs), one
    client's message does not unmask; the old seed-keyed derivation does not unmask it either.
    The attack harness is checked by unmasking with the client's own secret key."""
    from fedray.layers.privacy import pair_seed, prg

    with _session() as s:
        layer = PrivacyLayer(s.executor, privacy_settings(s.config), s.config.seed)
        cohort = list(range(6))
        res = layer.execute(train(3), {c: Task(plugins.column_sums, None, None) for c in cohort})
        truth = {cid: plugins.column_sums(None, None, c).flat() for cid, c in s.executor.host.clients.items()}
        tr = layer.transcript
        u, L = 2, 3
        y = tr["masked"][u].ints()
        # Nothing on the server side holds a private key: only public keys and ciphertexts.
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        def walk(o):
            if isinstance(o, dict):
                return any(walk(v) for v in list(o.keys()) + list(o.values()))
            if isinstance(o, (list, tuple, set)):
                return any(walk(v) for v in o)
            return isinstance(o, X25519PrivateKey)

        assert not walk(tr) and not walk(layer.__dict__)
        # 1. The old derivation from the seed.
        old = list(y)
        for p in tr["peers"][u]:
            m = _old_pair_mask(s.config.seed, u, p, 3, 0, L)
            old = [(a - b) if u < p else (a + b) for a, b in zip(old, m)]
        assert not np.allclose(decode([v % MOD for v in old]), truth[u], rtol=1e-3)
        # 2. Everything the server holds, plus the self-mask b_u it reconstructs: the pairwise masks remain.
        inst = s.executor.host.clients[u].secrets["instances"][(tr["run"], tr["instance"])]
        without_self = [a - b for a, b in zip(y, prg(inst["b"], L))]
        assert not np.allclose(decode([v % MOD for v in without_self]), truth[u], rtol=1e-3)
        # 3. The harness is right: with u's own secret key (which only u holds) the message unmasks.
        full = list(without_self)
        for p in tr["peers"][u]:
            m = prg(pair_seed(inst["s_sk"], tr["s_pk"][p], tr["run"], tr["instance"], u, p), L)
            full = [(a - b) if u < p else (a + b) for a, b in zip(full, m)]
        np.testing.assert_allclose(decode([v % MOD for v in full]), truth[u], rtol=1e-12)
        # And the total the algorithm receives is exact.
        np.testing.assert_allclose(res.replies[0].update.flat(), sum(truth.values()), rtol=1e-12)


def test_dropout_after_key_sharing_is_recovered_exactly_from_shares():
    """Acceptance: two clients drop after sharing their keys; the survivors' shares rebuild the
    dropped clients' keys and the total of the survivors is exact to 1e-9."""
    with _session() as s:
        layer = PrivacyLayer(s.executor, privacy_settings(s.config), s.config.seed)
        tasks = {c: Task(plugins.crash_listed, {"crash": (1, 4)}, None) for c in range(6)}
        res = layer.execute(train(0), tasks)
        assert res.failed == [1, 4]
        truth = {cid: plugins.column_sums(None, None, c).flat() for cid, c in s.executor.host.clients.items()}
        want = sum(truth[c] for c in (0, 2, 3, 5))
        got = sum(r.update.flat() for r in res.replies)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        assert layer.account["reconstructed_keys"] == 2
        assert layer.account["recovered_masks"] == 2 * 4  # each dropped client masked with 4 survivors
        assert sorted(layer.transcript["revealed"]["s"]) == [1, 4]  # only dropped clients' keys rebuilt


def test_a_cohort_or_survivor_set_below_the_threshold_is_refused_never_unmasked():
    """Acceptance: too small a cohort is refused before anything is sent; too few survivors means
    the masked vectors are discarded (reported), never unmasked; config catches it up front."""
    with _session(min_cohort=4) as s:
        layer = PrivacyLayer(s.executor, privacy_settings(s.config), s.config.seed)
        with pytest.raises(RoundFailedError, match=r"cohort of 3 client\(s\) is below privacy.min_cohort=4"):
            layer.execute(train(0), {c: Task(plugins.column_sums, None, None) for c in (0, 1, 2)})
        res = layer.execute(train(1), {c: Task(plugins.crash_listed, {"crash": (0, 1, 2)}, None) for c in range(6)})
        assert res.replies == [] and res.failed == list(range(6))
        assert "secure aggregation refused" in res.errors[3]
        assert layer.account["refused_rounds"] == 2
    with pytest.raises(ConfigError, match=r"privacy.min_cohort: .*samples 2"):
        fedray.make_config(federation={"n_clients": 4, "fraction": 0.5},
                           privacy={"secure_aggregation": True, "cohorts": "random"})
    # whole blocks (the default without DP): one block of all 4 clients a round, which is enough
    fedray.make_config(federation={"n_clients": 4, "fraction": 0.5}, privacy={"secure_aggregation": True})


def test_dp_noise_cannot_be_removed_with_the_seed_unless_the_debugging_option_says_so():
    """The old local-DP noise was client_rng(seed, client, round, 29, attempt): subtracting it gave
    the clipped statistics back. Now it is drawn from the OS; the seeded variant still can be
    removed, and its account says it is not private."""
    base = dict(algorithm={"name": "federated-fcm", "params": {"n_clusters": 4, "init": START, "max_rounds": 1}},
                **BLOBS, **{"output.message_payloads": True})
    clip, z = 5.0, 0.5

    def round0(res):
        return {c: u for r, _, c, u in res.extras["payloads"] if r == 0}

    clean = round0(fedray.run(privacy={"dp": {"clip": clip, "noise_multiplier": 1e-300}}, **base))

    def attack(res):
        errs = []
        for c, u in round0(res).items():
            x = u.flat() - client_rng(2, c, 0, 29, 0).normal(0.0, z * clip, size=u.flat().size)
            errs.append(np.abs(x - clean[c].flat()).max())
        return max(errs)

    secret = fedray.run(privacy={"dp": {"clip": clip, "noise_multiplier": z}}, **base)
    assert attack(secret) > 1e-3
    assert secret.summary["privacy"]["dp"]["private"] is True
    seeded = fedray.run(privacy={"dp": {"clip": clip, "noise_multiplier": z, "seeded_noise": True}}, **base)
    assert attack(seeded) < 1e-9
    assert seeded.summary["privacy"]["dp"]["private"] is False


def test_minmax_scaling_from_client_extremes_is_refused_under_privacy():
    with pytest.raises(ConfigError, match=r"^data.scale: 'minmax' .*refused under privacy; use data.scale='standard'"
                                          r" .* or give privacy.feature_bounds$"):
        fedray.make_config(data={"scale": "minmax"}, privacy={"secure_aggregation": True})
    cfg = fedray.make_config(data={"scale": "minmax"}, privacy={"min_samples_guard": True,
                                                                 "feature_bounds": [[0, 8]] * 4})
    assert cfg.data.scale == "minmax"


def _sites(tmp_path, sizes: dict[str, int], d: int = 2):
    rng = np.random.default_rng(0)
    frames = [pd.DataFrame({**{f"x{j}": rng.normal(size=n) + 4 * (i % 3) * (j == 0) for j in range(d)}, "site": s})
              for i, (s, n) in enumerate(sizes.items())]
    path = tmp_path / "sites.csv"
    pd.concat(frames).to_csv(path, index=False)
    return f"csv:{path}"


def test_set_up_under_privacy_sends_no_per_client_sums_or_extremes(tmp_path, monkeypatch):
    """describe() sent a one-row client's row as its min, max and sum; under privacy the moments
    are summed securely and standard scaling is unchanged (1e-9)."""
    data = {"dataset": _sites(tmp_path, {"big": 40, "mid": 20, "one": 1}), "client_column": "site",
            "scale": "standard"}
    kw = dict(algorithm={"name": "kmeans"}, data=data, federation={"n_clients": None}, runtime=LOCAL)
    from fedray.runtime.host import ClientHost

    sent = []  # what each session's hosts reported: were per-client moments in it?
    describe = ClientHost.describe

    def spy(self, private=False):
        out = describe(self, private)
        sent.append(all(getattr(out, k) is not None for k in ("min", "max", "sum", "sumsq")))
        return out

    monkeypatch.setattr(ClientHost, "describe", spy)
    with Session(**kw) as plain, Session(**kw, privacy={"secure_aggregation": True}) as private:
        assert sent == [True, False]
        for a, b in zip(plain.scaler, private.scaler):
            np.testing.assert_allclose(a, b, rtol=1e-9)
        X1 = [X for cid, X, _ in private.executor.gather_data(False) if X.shape[0] == 1][0]
        assert not np.isin(X1, private.info.feature_min).any() and not np.isin(X1, private.info.feature_max).any()


def test_projection_and_density_under_privacy_do_not_send_a_one_row_clients_row(tmp_path, monkeypatch):
    from fedray.runtime.local import LocalExecutor

    data = {"dataset": _sites(tmp_path, {"big": 40, "mid": 20, "one": 1}, d=3), "client_column": "site"}
    kw = dict(algorithm={"name": "kmeans"}, data=data, federation={"n_clients": None}, runtime=LOCAL)
    with Session(**kw) as plain:
        want = plain.projection_2d()
    seen = []
    orig = LocalExecutor.execute

    def spy(self, round_, tasks, timeout=None):
        res = orig(self, round_, tasks, timeout)
        seen.extend(res.replies)
        return res

    with Session(**kw, privacy={"secure_aggregation": True}) as s:
        monkeypatch.setattr(LocalExecutor, "execute", spy)
        mean, axes = s.projection_2d()
        s.density_2d(projection=(mean, axes))
        shards = {cid: X for cid, X, _ in s.executor.gather_data(False)}
    np.testing.assert_allclose(mean, want[0], rtol=1e-9)
    np.testing.assert_allclose(np.abs(axes), np.abs(want[1]), rtol=1e-7, atol=1e-9)
    assert seen and not any(isinstance(r.update, Stats) for r in seen)  # masked or protocol messages only
    assert not [r.client_id for r in seen if find_own_rows(r.update, shards[r.client_id])]


KM = {"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box", "max_rounds": 3}}


def _leaks(data, privacy=None, algorithm=KM):
    cfg = fedray.make_config(algorithm=algorithm, data=data, federation={"n_clients": None, "rounds": 3},
                             runtime=LOCAL, seed=1, privacy=privacy or {}, **{"output.message_payloads": True})
    with Session(cfg) as s:
        res = s.run(output=False)
        shards = {cid: X for cid, X, _ in s.executor.gather_data(labels=False)}
    flagged = [(r, c) for r, _, c, u in res.extras["payloads"] if find_own_rows(u, shards[c])]
    return flagged, res


def test_tiny_clients_and_singleton_clusters_leak_rows_unless_protected_and_every_leak_is_counted(tmp_path):
    """Clients of 1, 2 and 3 rows next to a big one. Without protection, per-cluster sums of one
    point are rows (in training and in the evaluation pass). Under secure aggregation no message
    holds a row; with the guards alone (no masking) none either; with the sample guard only, the
    singleton clusters that still reach the server are counted as disclosures."""
    data = {"dataset": _sites(tmp_path, {"big": 60, "one": 1, "two": 2, "three": 3}), "client_column": "site"}
    plain, _ = _leaks(data)
    assert plain and any(r < 0 for r, _ in plain) and any(r >= 0 for r, _ in plain)
    masked, res = _leaks(data, {"secure_aggregation": True})
    assert masked == []
    assert res.summary["privacy"]["unprotected_messages"] == 0
    guarded, res = _leaks(data, {"min_samples_guard": True, "min_cluster_count": 2})
    assert guarded == []
    assert np.isfinite(res.centers).all() and res.summary["privacy"]["disclosures_total"] == 0
    counted, res = _leaks(data, {"min_samples_guard": True})
    assert counted  # the evaluation pass (not guarded by the sample guard) still shows rows ...
    assert res.summary["privacy"]["disclosures"].get("small_clusters", 0) >= len(counted)  # ... all counted
    assert res.summary["privacy"]["disclosures_total"] > 0


def test_the_kfed_start_is_an_unprotected_message_and_is_counted(tmp_path):
    """k-FED local centres of a one-row client are its row; they are not statistics, so secure
    aggregation cannot hide them: they must show up as unprotected messages."""
    data = {"dataset": _sites(tmp_path, {"big": 60, "one": 1, "two": 2, "three": 3}), "client_column": "site"}
    flagged, res = _leaks(data, {"secure_aggregation": True}, {"name": "kmeans", "params": {"n_clusters": 3,
                                                                                          "max_rounds": 2}})
    assert flagged and {r for r, _ in flagged} == {0}
    assert res.summary["privacy"]["unprotected_messages"] >= len(flagged)


def test_privacy_account_is_json_and_holds_no_secret():
    with _session() as s:
        layer = PrivacyLayer(s.executor, privacy_settings(s.config), s.config.seed)
        layer.execute(train(0), {c: Task(plugins.crash_listed, {"crash": (2,)}, None) for c in range(6)})
        rep = layer.report()["privacy"]
        text = json.dumps(rep)
        assert "instances" not in text and "s_sk" not in text
        assert rep["reconstructed_keys"] == 1
        assert all("secrets" not in st for st in s.executor.get_state(list(range(6))).values())
