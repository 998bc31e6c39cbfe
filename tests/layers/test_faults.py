"""Faults: crashed and late clients are dropped and counted, rounds go on or fail clearly,
crashed actors come back with their shards rebuilt, and results stay reproducible."""
from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.core.errors import ConfigError, RoundFailedError
from fedray.layers.faults import fault_plan

LOCAL = {"backend": "local"}
FAULTS = {"crash_probability": 0.2, "delay_probability": 0.125, "delay_seconds": 5.0}  # 10% of all clients late
BLOBS = dict(data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 60}, "scale": "standard"},
             federation={"n_clients": 6, "rounds": 4}, seed=5)


pytestmark = pytest.mark.quiet_log(logging.ERROR)


def _strip(h: pd.DataFrame) -> pd.DataFrame:
    return h.drop(columns=["wall_s"])


def test_fcm_on_s1_with_crashes_and_stragglers_converges_to_the_fault_free_ari(data_dir):
    """20% of the 50 clients crash at random each round and 10% answer after the deadline."""
    base = dict(data={"dataset": "benchmark:sipu/s1", "data_dir": str(data_dir), "scale": "standard"},
                federation={"n_clients": 50, "rounds": 60}, seed=0, runtime={**LOCAL, "round_timeout": 1.0})
    ref = fedray.run(algorithm={"name": "federated-fcm", "params": {"n_clusters": 15}}, **base)
    start = ref.model["initial_centers"].tolist()  # same start for both runs, as in the paper's comparison
    alg = {"name": "federated-fcm", "params": {"n_clusters": 15, "tol": 0.03, "init": start}}
    clean = fedray.run(algorithm=alg, **base)
    faulty = fedray.run(algorithm=alg, faults=FAULTS, **base)
    assert clean.summary["converged"] and faulty.summary["converged"]
    assert abs(faulty.final["ari"] - clean.final["ari"]) <= 0.02
    assert clean.final["ari"] > 0.95
    h = faulty.history
    assert h["clients_failed"].sum() > 0 and h["clients_late"].sum() > 0
    assert (h["clients_answered"] + h["clients_failed"] + h["clients_late"] == h["clients_sampled"]).all()
    f = faulty.failures
    assert set(f["kind"]) == {"failed", "late"} and f["injected"].all()
    assert len(f) == h["clients_failed"].sum() + h["clients_late"].sum()
    assert clean.failures.empty and clean.history["clients_failed"].sum() == 0


def test_fault_plan_is_seeded_and_per_client():
    from fedray.api.config import FaultsConfig

    f = FaultsConfig(crash_probability=0.3, delay_probability=0.5, delay_seconds=2.0, crashes=[(4, 7)])
    crash, delay = fault_plan(f, 1, 4, 0, list(range(40)))
    again = fault_plan(f, 1, 4, 0, list(range(40)))
    assert (crash, delay) == again and 7 in crash and not crash & set(delay)
    sub_crash, sub_delay = fault_plan(
        f, 1, 4, 0, list(range(0, 40, 2))
    )  # a client's fate does not depend on the cohort
    assert sub_crash == {c for c in crash if c % 2 == 0} and sub_delay == {c: d for c, d in delay.items() if c % 2 == 0}
    assert fault_plan(f, 1, 4, 1, list(range(40)))[0] != crash  # a retry draws a new plan, without the listed crash
    assert 7 not in fault_plan(FaultsConfig(crashes=[(4, 7)]), 1, 4, 1, list(range(40)))[0]
    assert fault_plan(f, 1, -1, 0, list(range(40))) == (set(), {})  # evaluation passes are left alone


def test_listed_crashes_drop_exactly_those_clients_and_equal_a_run_without_them():
    alg = {"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box", "max_rounds": 4}}
    faulty = fedray.run(algorithm=alg, runtime=LOCAL, faults={"crashes": [[1, 0], [1, 1], [2, 5]]}, **BLOBS)
    h = faulty.history.set_index("round")
    assert h.loc[1, "clients_failed"] == 2 and h.loc[2, "clients_failed"] == 1 and h.loc[0, "clients_failed"] == 0
    assert sorted(map(tuple, faulty.failures[["round", "client_id"]].to_numpy().tolist())) == [(1, 0), (1, 1), (2, 5)]
    assert "crashed in round 1 (injected fault)" in faulty.failures["error"].iloc[0]
    assert faulty.summary["failures"] == {
        "failed": 3,
        "late": 0,
        "late_spillover": 0,
        "in_evaluation": 0,
        "injected": 3,
    }


def test_too_few_answers_retry_then_fail_with_a_clear_message():
    alg = {"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box", "max_rounds": 3}}
    crashes = [[1, c] for c in range(4)]  # round 1, first attempt: 2 of 6 answer
    fed = {**BLOBS["federation"], "min_clients": 3}
    kw = {**BLOBS, "federation": fed}
    with pytest.raises(RoundFailedError, match=r"round 1: 2 of 6 clients answered \(4 failed, 0 late\); "
                                               r"federation.min_clients=3; set federation.round_retries"):
        fedray.run(algorithm=alg, runtime=LOCAL, faults={"crashes": crashes}, **kw)
    ok = fedray.run(algorithm=alg, runtime=LOCAL, faults={"crashes": crashes},
                    **{**kw, "federation": {**fed, "round_retries": 1}})
    h = ok.history.set_index("round")
    assert h.loc[1, "attempts"] == 2 and h.loc[1, "clients_answered"] == 6  # listed crashes hit the first attempt only
    assert (ok.failures["attempt"] == 0).all() and len(ok.failures) == 4
    with pytest.raises(RoundFailedError, match=r"retried 2 time\(s\) \(federation.round_retries=2\)"):
        fedray.run(algorithm=alg, runtime=LOCAL, faults={"crash_probability": 0.95},
                   **{**kw, "federation": {**fed, "round_retries": 2}})


def test_crashed_client_loses_its_state():
    from fedray.core.contract import Task
    from fedray.data import ClientSpec
    from fedray.layers.faults import crash_client
    from fedray.runtime.host import ClientHost

    host = ClientHost([ClientSpec(0, {"kind": "blobs", "seed": 0, "alpha": None, "n_centers": 2, "n_features": 2,
                                      "points_per_client": 5, "cluster_std": 1.0, "center_box": (-5, 5)}, None)],
                      0, False, (2,))
    host.clients[0].state["model"] = 1
    out = host.run(0, [(0, Task(crash_client), -1)])
    assert out[0].error and "InjectedCrash" in out[0].error and not out[0].user_error
    assert "model" not in host.clients[0].state
    assert host.feature_names == ("x0", "x1")  # the shard's column names are the host's, not the state's


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(faults={"crash_probability": 1.0}), r"faults.crash_probability: .*less than 1"),
        (
            dict(faults={"crash_scope": "actor", "crashes": [[0, 1]]}),
            r"faults.crash_scope: 'actor' .* runtime.backend='ray'",
        ),
        (
            dict(faults={"crash_scope": "actor", "crashes": [[0, 1]]}, runtime={"backend": "ray", "max_restarts": 0}),
            r"runtime.max_restarts > 0",
        ),
        (dict(faults={"delay_probability": 0.1, "delay_seconds": 3}), r"set runtime.round_timeout"),
        (dict(faults={"crashes": [[0, 99]]}), r"faults.crashes: \(0, 99\)"),
    ],
)
def test_fault_config_errors_name_the_key(kwargs, match):
    kwargs.setdefault("runtime", LOCAL)
    with pytest.raises(ConfigError, match=match):
        fedray.make_config(**kwargs)


def test_ray_actor_crashes_and_outside_kills_restart_actors_with_rebuilt_scaled_shards(ray_session):
    """Three actors of two clients. An actor killed from outside before the run and an injected
    actor crash in round 1 each drop that actor's clients for one round; the restarted actors
    rebuild and rescale their shards, so the run equals a local run without those clients then."""
    from fedray.api.session import Session

    alg = {"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box", "max_rounds": 4, "tol": 1e-12}}
    cfg = fedray.make_config(algorithm=alg, runtime={"backend": "ray", "clients_per_actor": 2, "max_restarts": -1},
                             faults={"crash_scope": "actor", "crashes": [[1, 2]]}, **BLOBS)
    with Session(cfg) as s:
        actor = s.executor.actors[2]
        pid, adopted = ray_session.get(actor.incarnation.remote())
        assert adopted
        ray_session.kill(actor, no_restart=False)
        assert _new_incarnation(ray_session, actor, pid)[1] is False  # restarted, not set up yet
        on_ray = s.run(output=False)
    same = fedray.run(algorithm=alg, runtime=LOCAL, faults={"crashes": [[0, 4], [0, 5], [1, 2], [1, 3]]}, **BLOBS)
    np.testing.assert_array_equal(on_ray.centers, same.centers)
    pd.testing.assert_frame_equal(_strip(on_ray.history), _strip(same.history))
    f = on_ray.failures
    assert f[["round", "client_id"]].to_numpy().tolist() == [[0, 4], [0, 5], [1, 2], [1, 3]]
    assert "actor 2 was restarted" in f["error"].iloc[0] and "actor 1 failed" in f["error"].iloc[2]
    assert f["injected"].tolist() == [False, False, True, False]  # the plan named client 2; client 3 shared its actor


def _new_incarnation(ray, actor, old_pid: int, timeout: float = 120.0) -> tuple[int, bool]:
    """Wait until Ray has restarted ``actor`` (so that the kill falls before round 0)."""
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            inc = ray.get(actor.incarnation.remote(), timeout=30)
            if inc[0] != old_pid:
                return inc
        except RayActorError:  # restarting
            pass
        time.sleep(0.2)
    raise AssertionError("the actor was not restarted")
