"""A server that outlives a run: secure aggregation across runs over the same clients, across a
resume, and per cluster. The curious server keeps every sum of every run (the federation's release
log); least squares over all of them must single out no client."""
from __future__ import annotations

import json

import numpy as np
import pytest

import fedray
from fedray.algorithms.kmeans import FederatedKMeans
from fedray.api.checkpoint import load
from fedray.api.session import Session
from fedray.core.errors import ReleaseRefusedError
from fedray.core.stats import total
from fedray.layers.privacy import PrivacyLayer
from fedray.layers.privacy.release import forget_releases
from fedray.layers.stack import find_layer

LOCAL = {"backend": "local"}
KM = {"n_clusters": 3, "max_rounds": 15, "tol": 1e-300, "settle_window": 0}


def _twenty_clients() -> fedray.ArrayData:
    """The same 20 clients whatever the run's seed: three blobs, 30 rows each."""
    rng = np.random.default_rng(2026)
    centres = np.array([[0.0, 0.0], [6.0, 6.0], [-6.0, 5.0]])
    X = np.concatenate([centres[i % 3] + rng.normal(size=(30, 2)) for i in range(20)])
    return fedray.from_arrays(X, clients=np.repeat(np.arange(20), 30))


pytestmark = pytest.mark.quiet_log()


def _rows(log, n: int) -> np.ndarray:
    """Every un-noised released cohort of the moments (column sums, per-cluster sums and counts...) as
    rows of an incidence matrix: what least squares over all released sums works with."""
    rows = [np.isin(np.arange(n), sorted(r.clients)).astype(float) for r in log.released
            if not r.noised and any(s.split(":")[0] in ("s", "ss", "n", "sums", "counts", "sse") for s in r.statistics)]
    return np.array(rows)


def _isolated(A: np.ndarray) -> list[int]:
    """Clients i whose own value is a combination of the rows of A (e_i in their row space)."""
    out = []
    for i in range(A.shape[1]):
        e = np.zeros(A.shape[1])
        e[i] = 1.0
        y = np.linalg.lstsq(A.T, e, rcond=None)[0]
        if np.allclose(A.T @ y, e, atol=1e-8):
            out.append(i)
    return out


def _seed_loop(seeds, privacy) -> tuple[list, object]:
    """Run k-means once per seed over the same 20 clients (fraction 0.5), each in its own session as a
    seed loop would; returns each run's outcome (a Result or the refusal) and the federation's log."""
    data = _twenty_clients()
    outcomes, log = [], None
    for seed in seeds:
        with Session(algorithm={"name": "kmeans", "params": KM}, data=data, runtime=LOCAL, seed=seed,
                     federation={"fraction": 0.5, "rounds": 15}, privacy=privacy) as s:
            try:
                outcomes.append(s.run(output=False))
            except ReleaseRefusedError as exc:
                outcomes.append(exc)
            layer = find_layer(s.layers, PrivacyLayer)
            assert log is None or layer.releases is log  # one log for the federation, whatever the session
            log = layer.releases
    return outcomes, log


def test_five_runs_with_seeds_1_to_5_over_the_same_clients_with_blocks_isolate_no_client():
    """Blocks, fraction 0.5, no DP, seeds 1-5: every run goes to its end, and least squares over all
    the sums of all five runs (set-up, training and evaluation) gives no client's own value."""
    outcomes, log = _seed_loop(range(1, 6), {"secure_aggregation": True, "cohorts": "blocks"})
    assert all(isinstance(o, fedray.Result) for o in outcomes)
    A = _rows(log, 20)
    assert A.shape[0] > 5 * 5 and _isolated(A) == []
    assert log.isolation() == {"isolated_clients": 0, "small_groups": 0}


def test_ten_runs_with_the_default_cohorts_isolate_no_client():
    """Secure aggregation and fraction 0.5, nothing else (cohorts: auto samples whole blocks without DP):
    ten seeds over the same clients all finish and together isolate nobody."""
    outcomes, log = _seed_loop(range(1, 11), {"secure_aggregation": True})
    assert all(isinstance(o, fedray.Result) for o in outcomes)
    assert outcomes[0].summary["stop_reason"] in ("converged", "rounds done", "round cap")
    assert _isolated(_rows(log, 20)) == []


def test_random_cohorts_over_runs_are_refused_before_any_client_is_isolated():
    """The review's case: random cohorts, no DP, seeds 1-5. The log outlives each run, so a later run's
    sum that would isolate a client with the earlier runs' sums is refused; nothing released isolates."""
    outcomes, log = _seed_loop(range(1, 6), {"secure_aggregation": True, "cohorts": "random"})
    assert any(isinstance(o, ReleaseRefusedError) for o in outcomes)
    assert _isolated(_rows(log, 20)) == []


def test_fraction_half_and_secure_aggregation_alone_run_to_the_end_or_stop_at_once_naming_the_fix():
    """Secure aggregation at fraction 0.5 and nothing else runs to the end; forcing random cohorts
    stops at once with one line naming run, round, the clients singled out and the fixes: the
    refusal is not a client failure and is never retried (round_retries 3 notwithstanding)."""
    kw = dict(algorithm={"name": "kmeans", "params": KM}, data=_twenty_clients(), runtime=LOCAL, seed=3)
    res = fedray.run(federation={"fraction": 0.5, "round_retries": 3}, privacy={"secure_aggregation": True}, **kw)
    assert res.summary["privacy"]["release_rule"]["refused"] == 0
    forget_releases()
    with pytest.raises(ReleaseRefusedError) as exc:
        fedray.run(federation={"fraction": 0.5, "round_retries": 3},
                   privacy={"secure_aggregation": True, "cohorts": "random"}, **kw)
    msg = str(exc.value)
    assert "\n" not in msg and "retried" not in msg and "clients answered" not in msg
    assert msg.startswith("run kmeans (seed 3): round ") and "would single out" in msg
    assert "fixes: privacy.cohorts='blocks'" in msg


class SpyKMeans(FederatedKMeans):
    """k-means that keeps, for each training round, the centres it sent and the total it got back."""

    seen: list[tuple[list[int], np.ndarray, dict[str, np.ndarray]]] = []

    def update(self, ctx, replies):
        if self.centers is not None and replies:
            t = total(replies)
            SpyKMeans.seen.append(([r.client_id for r in replies], self.centers.copy(),
                                   {k: np.array(v) for k, v in t.items()}))
        return super().update(ctx, replies)


def test_on_non_iid_shards_no_unnoised_per_cluster_component_comes_from_fewer_than_min_cohort_clients():
    """Label-skewed shards (8 clients, Dirichlet 0.05 over six blobs): a cluster often has points at one or two
    clients only. Every
    released per-cluster sum and count with a nonzero value came from at least min_cohort = 3 clients
    (counted here from the clients' own data and the centres of the round), the others were zeroed,
    and the summary counts them."""
    SpyKMeans.seen = []
    with Session(algorithm={"name": "kmeans", "params": {"n_clusters": 6, "max_rounds": 8}}, runtime=LOCAL,
                 seed=4, data={"dataset": "blobs", "options": {"n_centers": 6, "points_per_client": 40},
                               "partition": {"name": "dirichlet", "alpha": 0.05}},
                 federation={"n_clients": 8}, privacy={"secure_aggregation": True}) as s:
        res = s.run(SpyKMeans, output=False)
        X = {c: s.executor.host.clients[c].data.X for c in range(8)}
    assert SpyKMeans.seen
    zeroed_here = 0
    for cohort, C, t in SpyKMeans.seen:
        contributors = np.zeros(C.shape[0], dtype=int)
        for c in cohort:
            d2 = ((X[c][:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
            contributors += np.bincount(d2.argmin(axis=1), minlength=C.shape[0]) > 0
        released = t["counts"] > 0
        assert np.all(contributors[released] >= 3)
        zeroed = (contributors > 0) & (contributors < 3)
        assert np.all(t["counts"][zeroed] == 0) and np.all(t["sums"][zeroed] == 0)
        zeroed_here += int(zeroed.sum())
    assert zeroed_here > 0  # the case arose
    assert res.summary["privacy"]["low_support_clusters"] >= zeroed_here


def _resume_case(tmp_path, crashes_before, crashes_after):
    """12 clients in 4 fixed blocks (blocks_seed 0: {2,3,11}, {6,7,9}, {0,1,10}, {4,5,8}), fraction 0.5
    (round 3 samples blocks {6,7,9} and {4,5,8}), a checkpoint every 2 rounds; the first run stops after
    round 4 (rounds 3 and 4 released after its checkpoint), and a new process resumes it with other
    clients failing."""
    out = tmp_path / "run"
    cfg = dict(algorithm={"name": "kmeans", "params": {**KM, "max_rounds": 8}}, runtime=LOCAL, seed=7,
               data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 30}},
               federation={"n_clients": 12, "rounds": 8, "fraction": 0.5}, privacy={"secure_aggregation": True},
               checkpoint={"every": 2})

    def stop(row):
        if row["round"] == 4:
            raise KeyboardInterrupt

    with Session(faults={"crashes": crashes_before}, **cfg) as s, pytest.raises(KeyboardInterrupt):
        s.run(output=out, on_round=[stop])
    first = [r for r in find_layer(s.layers, PrivacyLayer).releases.released if r.kind == "train"]
    forget_releases()  # the resumed run is a new process: it knows only the journal beside the outputs
    with Session(faults={"crashes": crashes_after}, **cfg) as s:
        try:
            outcome = s.run(resume_from=load(out), output=out)
        except ReleaseRefusedError as exc:
            outcome = exc
        log = find_layer(s.layers, PrivacyLayer).releases
    return first, outcome, log


def _round(log, r: int) -> set[frozenset[int]]:
    return {x.clients for x in log.released if x.kind == "train" and x.round == r and x.attempt == 0}


def test_a_resumed_run_with_other_failures_releases_nothing_that_isolates_a_client(tmp_path):
    """Round 3 lost client 4 in the first run (summed over block {6,7,9}) and loses client 6 after the
    resume. The resumed run loads the journal (rounds 3 and 4 were appended as they were released), and
    round 3 is released again only over whole blocks; all the sums of both runs together isolate nobody."""
    first, outcome, log = _resume_case(tmp_path, [(3, 4)], [(3, 6)])
    assert {r.round for r in first} >= {3, 4}
    assert set(first) <= set(log.released)  # the journal brought the first run's rounds 3 and 4 back
    assert frozenset({6, 7, 9}) in _round(log, 3)
    assert isinstance(outcome, (fedray.Result, ReleaseRefusedError))
    assert _round(log, 3) <= {frozenset({6, 7, 9}), frozenset({4, 5, 8})}  # whole blocks only
    assert _isolated(_rows(log, 12)) == []
    assert log.isolation()["isolated_clients"] == 0


def test_a_resumed_run_releases_a_round_again_only_over_its_first_cohort(tmp_path):
    """Round 3 lost client 4 the first time; after the resume everybody answers it: the sum is taken over
    the first cohort again ({6,7,9}), so it adds nothing the server did not have, and the run finishes
    with nobody isolated."""
    first, outcome, log = _resume_case(tmp_path, [(3, 4)], [])
    assert isinstance(outcome, fedray.Result)
    assert _round(log, 3) == {frozenset({6, 7, 9})}
    assert outcome.summary["privacy"]["release_rule"]["narrowed"] >= 1
    assert _isolated(_rows(log, 12)) == []


@pytest.mark.parametrize("seed, crash", [(1, 0.05), (2, 0.1), (3, 0.15), (4, 0.1)])
def test_with_blocks_a_dropout_is_always_narrowed_to_the_whole_blocks_that_answered(seed, crash):
    """Crashes at 5-15 % with block cohorts (the review: 4 of 4 runs failed at round 3-4, an early
    dropout having passed the rule without being narrowed). Every un-noised sum is now a union of
    whole blocks, so later block cohorts are never refused: no run stops on the release rule."""
    from fedray.core.seeding import client_blocks

    with Session(algorithm={"name": "kmeans", "params": KM}, data=_twenty_clients(), runtime=LOCAL, seed=seed,
                 federation={"fraction": 0.5, "rounds": 15, "round_retries": 2},
                 faults={"crash_probability": crash}, privacy={"secure_aggregation": True}) as s:
        try:
            s.run(output=False)
        except ReleaseRefusedError as exc:  # pragma: no cover - the failure this test guards against
            pytest.fail(f"refused: {exc}")
        except fedray.RoundFailedError:
            pass  # every client of a round failing is a fault, not the rule
        log = find_layer(s.layers, PrivacyLayer).releases
    blocks = client_blocks(0, 20, 3)
    for r in log.released:
        ids = np.array(sorted(r.clients))
        assert np.isin(blocks, blocks[ids]).sum() == ids.size, (r.kind, r.round, sorted(r.clients))
    assert log.isolation()["isolated_clients"] == 0


def test_negligible_dp_noise_does_not_let_a_sum_past_the_rule(tmp_path):
    """noise_multiplier 1e-9 (the review recovered 20/20 column sums; epsilon 6.6e19): such noise is too
    weak to count (dp.WEAK_NOISE_EPSILON), so the rule treats the sums as un-noised and refuses the one
    that would isolate a client; what was released isolates nobody and the refusal says why."""
    from fedray.layers.privacy.dp import WEAK_NOISE_EPSILON, gaussian_delta

    assert gaussian_delta(1e-9 / 2, WEAK_NOISE_EPSILON) == 1.0 and gaussian_delta(2.0, WEAK_NOISE_EPSILON) < 1e-30
    with Session(algorithm={"name": "kmeans", "params": KM}, data=_twenty_clients(), runtime=LOCAL, seed=1,
                 federation={"fraction": 0.5, "rounds": 15},
                 privacy={"secure_aggregation": True, "dp": {"clip": 100.0, "noise_multiplier": 1e-9}}) as s:
        with pytest.raises(ReleaseRefusedError, match="would single out"):
            s.run(output=tmp_path / "weak")
        assert _isolated(_rows(find_layer(s.layers, PrivacyLayer).releases, 20)) == []
    summary = json.loads((tmp_path / "weak" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["privacy"]["weak_noise"] >= 1
    forget_releases()
    with Session(algorithm={"name": "kmeans", "params": KM}, data=_twenty_clients(), runtime=LOCAL, seed=1,
                 federation={"fraction": 0.5, "rounds": 15},
                 privacy={"secure_aggregation": True, "dp": {"clip": 100.0, "noise_multiplier": 4.0}}) as s:
        res = s.run(output=False)  # real noise: the sums are covered by DP, the run finishes
    p = res.summary["privacy"]
    assert p["weak_noise"] == 0 and p["release_rule"]["refused"] == 0
    assert p["releases"]["train"]["noised"] == p["releases"]["train"]["calls"] > 0


def test_two_processes_sharing_a_journal_decide_against_each_others_sums(tmp_path):
    """Two logs over one journal folder (two Tune trials' processes): a sum one of them released is read
    in by the other before it decides, so the other refuses the sum a client apart from it."""
    from fedray.layers.privacy.journal import Journal
    from fedray.layers.privacy.release import Release, ReleaseLog

    stats = frozenset({"sums:(3, 2)"})
    a, b = ReleaseLog(3), ReleaseLog(3)
    a.attach(Journal(tmp_path, "f" * 32))
    b.attach(Journal(tmp_path, "f" * 32))
    a.add(Release("train", 1, 0, frozenset(range(10)), stats, False, "trial-a"))
    with b.held():
        verdict, _, exposure = b.decide(frozenset(range(9)), stats, False)
    assert verdict == "refused" and exposure.smallest == (9,)
    c = ReleaseLog(3)  # a third process, later: it starts from both the journal's sums
    assert c.attach(Journal(tmp_path, "f" * 32)) == 1 and c.released == a.released


def test_a_journal_that_is_a_link_is_refused(tmp_path):
    from fedray.core.errors import OutputError
    from fedray.layers.privacy.journal import Journal
    from fedray.layers.privacy.release import ReleaseLog

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    for kind in ("symlink", "hardlink"):
        folder = tmp_path / kind
        folder.mkdir()
        path = folder / f"releases-{'e' * 32}.jsonl"
        path.symlink_to(outside) if kind == "symlink" else path.hardlink_to(outside)
        with pytest.raises(OutputError, match="release journal"):
            ReleaseLog(3).attach(Journal(folder, "e" * 32))
    assert outside.read_text() == "precious"


def test_secure_aggregation_with_blocks_accepts_a_fraction_whose_clients_alone_would_be_too_few():
    """10 clients at fraction 0.2 sample 2 clients one by one (refused up front under min_cohort 3), but
    one whole block of at least 3 under cohorts: auto / blocks, which is accepted."""
    fedray.make_config(federation={"n_clients": 10, "fraction": 0.2}, privacy={"secure_aggregation": True})
    with pytest.raises(fedray.ConfigError, match="privacy.min_cohort"):
        fedray.make_config(federation={"n_clients": 10, "fraction": 0.2},
                           privacy={"secure_aggregation": True, "cohorts": "random"})
