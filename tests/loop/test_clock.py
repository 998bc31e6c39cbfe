"""The simulated clock of a deployment (federation.devices / availability / deadline; fedray.loop.clock).

* Known speeds, bandwidths and a deadline give exact simulated times and exactly the late clients,
  who leave the round through the stragglers' path (clients_late, failures.parquet).
* A client that is not online is never given a training task.
* The clock is data: two runs, and runs that compute differently, give the same simulated clock.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.api.config import make_config
from fedray.core.contract import CohortTasks, Task
from fedray.core.errors import ConfigError
from fedray.data.deployment import Availability, make_availability
from fedray.loop.clock import Clock
from tests import plugins

LOCAL = {"backend": "local", "progress": False}
SIZES = (10, 20, 30, 40)  # rows of clients 0..3


def _arrays() -> object:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(sum(SIZES), 2))
    clients = np.repeat(np.arange(len(SIZES)), SIZES)
    return fedray.from_arrays(X, clients=clients)


def _run(tmp_path=None, **federation) -> fedray.Result:
    # explicit centres: no k-FED round; 3 rounds; every client sampled
    alg = {"name": "kmeans", "params": {"n_clusters": 2, "init": [[-1.0, 0.0], [1.0, 0.0]], "max_rounds": 3,
                                        "tol": 1e-300}}
    return fedray.run(algorithm=alg, runtime=LOCAL, data=_arrays(), federation={"rounds": 3, **federation},
                      output=tmp_path or False)


# 100 FLOPs a sample at 1000 FLOP/s: 0.1 s a row; 32 bytes down (2 x 2 centres) at 32 B/s: 1 s;
# the reply's bytes up at that many bytes a second: 1 s. Client c takes 0.1 n_c + 2 s: 3, 4, 5, 6 s.
def _devices(up: float) -> dict:
    return {"speed": 1000.0, "down": 32.0, "up": up, "flops_per_sample": 100.0}


def _reply_bytes() -> float:
    res = _run()
    per_round = res.clients["bytes_up"].to_numpy() / res.clients["rounds_participated"].to_numpy()
    assert np.all(per_round == per_round[0])
    return float(per_round[0])


def test_known_devices_and_deadline_give_exact_times_and_late_clients():
    up = _reply_bytes()
    free = _run(devices=_devices(up))
    assert free.history["sim_round_s"].tolist() == [6.0, 6.0, 6.0]  # the slowest client, no deadline
    assert free.history["sim_time_s"].tolist() == [6.0, 12.0, 18.0]
    assert free.history["clients_late"].tolist() == [0, 0, 0]

    res = _run(devices=_devices(up), deadline=4.5)
    assert res.history["sim_round_s"].tolist() == [4.5, 4.5, 4.5]  # someone was late: the round lasts its deadline
    assert res.history["sim_time_s"].tolist() == [4.5, 9.0, 13.5]
    assert res.history["clients_late"].tolist() == [2, 2, 2]
    assert res.history["clients_answered"].tolist() == [2, 2, 2]
    late = res.failures
    assert sorted(zip(late["round"], late["client_id"])) == [(r, c) for r in range(3) for c in (2, 3)]
    assert set(late["kind"]) == {"late"} and late["error"].str.contains("federation.deadline=4.5").all()
    assert res.clients["rounds_participated"].tolist() == [3, 3, 0, 0]
    assert res.summary["simulated"]["time_s"] == 13.5 and res.summary["simulated"]["late_deadline"] == 6

    edge = _run(devices=_devices(up), deadline=4.0)  # finishing exactly at the deadline is in time
    assert edge.history["clients_late"].tolist() == [2, 2, 2] and edge.history["sim_round_s"].tolist() == [4.0] * 3


def test_clock_times_follow_the_formula():
    from fedray.data.deployment import Devices

    n = np.array([10.0, 20.0, 30.0])
    dev = Devices(speed=np.array([100.0, 200.0, 400.0]), up=np.array([8.0, 16.0, 32.0]),
                  down=np.array([16.0, 16.0, 16.0]), profile=np.zeros(3, dtype=np.int64))
    clock = Clock(n_samples=n, devices=dev, deadline=3.0, epochs=2)
    tasks = CohortTasks([0, 1, 2], Task(print, None, np.zeros(2)))  # 16 bytes down; cost 6 * 2 values
    t = clock.times(tasks, np.array([0, 1, 2]), np.array([8, 16, 64]))
    # 6 FLOPs a value x 2 values x 2 epochs x n / speed + 16 / 16 + up / up-bandwidth
    assert t.tolist() == [24 * 10 / 100 + 1 + 1, 24 * 20 / 200 + 1 + 1, 24 * 30 / 400 + 1 + 2]
    late, why = clock.late(np.array([0, 1, 2]), t, 0.0)
    assert late.tolist() == [True, True, True]  # a reason code per late client, into the clock's reasons
    assert [clock.reasons()[c] for c in why.tolist()] == ["not finished by federation.deadline=3 s (simulated)"] * 3
    assert clock.round_seconds(np.zeros(0), True) == 3.0
    # client 1 goes offline at 1 s, client 2 is past a 4.5 s deadline: a code each, in client order
    spells = Availability("trace", 3, intervals=np.array([[0, 0.0, 100.0], [1, 0.0, 1.0], [2, 0.0, 100.0]]))
    mixed = Clock(n_samples=n, devices=dev, availability=spells, deadline=4.5, epochs=2)
    late, why = mixed.late(np.array([0, 1, 2]), t, 0.0)
    assert late.tolist() == [False, True, True]
    assert [mixed.reasons()[c] for c in why.tolist()] == [
        "went offline before it finished (federation.availability)",
        "not finished by federation.deadline=4.5 s (simulated)"]


def test_an_offline_client_never_gets_a_training_task(tmp_path):
    trace = tmp_path / "trace.csv"
    pd.DataFrame({"client_id": [0, 1, 1], "start_s": [0.0, 0.0, 50.0], "end_s": [1e9, 5.0, 1e9]}).to_csv(trace,
                                                                                                        index=False)
    # client 1 is offline from 5 s to 50 s; clients 2 and 3 never online. k-FED init asks every client.
    res = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 2, "max_rounds": 6, "tol": 1e-300}},
                     runtime=LOCAL, data=_arrays(), output=tmp_path / "out",
                     federation={"rounds": 6, "availability": {"trace": str(trace)},
                                 "devices": {"speed": 1000.0, "down": 32.0, "up": 1e9, "flops_per_sample": 100.0}},
                     **{"output.messages": True})
    sent = pd.read_parquet(tmp_path / "out" / "messages.parquet")
    down = sent[(sent["direction"] == "down") & (sent["round"] >= 0)]
    assert set(down["client_id"]) <= {0, 1}
    start = np.concatenate([[0.0], res.history["sim_time_s"].to_numpy()[:-1]])
    av = make_availability(make_config(federation={"availability": {"trace": str(trace)}}).federation.availability,
                           4, 0)
    for r, c in zip(down["round"], down["client_id"]):
        assert av.online(start[r])[c], f"client {c} got a task in round {r} while offline"
    assert res.clients["rounds_participated"].tolist()[2:] == [0, 0]


def test_diurnal_sampling_only_draws_online_clients():
    av = make_availability(make_config(federation={"availability": {"generator": "diurnal", "period_s": 100.0,
                                                                    "online": 0.25}}).federation.availability, 400, 3)
    clock = Clock(n_samples=np.ones(400), availability=av)
    for r, now in enumerate(np.linspace(0, 300, 13)):
        ids, wait = clock.sample(3, r, 0.5, float(now))
        assert wait == 0.0 and len(ids) and av.online(now)[ids].all()
        assert len(ids) == min(200, int(av.online(now).sum()))
    nobody = Availability("trace", 3, intervals=np.array([[1.0, 50.0, 60.0]]))
    ids, wait = Clock(n_samples=np.ones(3), availability=nobody).sample(0, 0, 1.0, 10.0)
    assert ids.tolist() == [1] and wait == 40.0  # the clock waits until someone is online


def _clocked(**runtime) -> fedray.Result:
    return fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                      data={"dataset": "blobs", "options": {"points_per_client": 50}}, seed=5,
                      runtime={**LOCAL, **runtime}, output=False,
                      federation={"n_clients": 60, "fraction": 0.5, "rounds": 8, "deadline": 0.05,
                                  "availability": {"generator": "random", "period_s": 0.2, "online": 0.6},
                                  "devices": {"speed": 2e5, "up": 1e5, "down": 1e5, "spread": 1.0}})


def test_two_runs_give_the_same_simulated_clock():
    a, b, c = _clocked(), _clocked(), _clocked(batched=False)  # c computes client by client
    cols = ["round", "clients_sampled", "clients_late", "sim_round_s", "sim_time_s"]
    assert a.history["clients_late"].sum() > 0  # the deadline bites
    for other in (b, c):
        pd.testing.assert_frame_equal(a.history[cols], other.history[cols])
        pd.testing.assert_frame_equal(a.failures, other.failures)


@pytest.mark.parametrize("federation, message", [
    ({"deadline": 3.0}, "federation.deadline: 3 s of simulated time needs federation.devices"),
    ({"devices": {"speed": 1e9}}, "federation.devices: Value error, give profiles, or all of speed, up and down"),
    ({"devices": {"speed": 1.0, "up": 1.0, "down": 0.0}}, "federation.devices.down: Input should be greater than 0"),
    ({"devices": {"profiles": [{"name": "a", "speed": 1, "up": 1, "down": 1}], "speed": 1.0}},
     "give profiles or speed/up/down, not both"),
    ({"availability": {"generator": "diurnal", "trace": "x.csv"}}, "give exactly one of generator"),
    ({"availability": {"generator": "hourly"}}, "federation.availability.generator: Input should be"),
    ({"availability": {"generator": "random", "online": 1.5}}, "federation.availability.online"),
    ({"target": {"metric": "accuracy", "value": 0.9}}, "federation.target: the simulated time to a target needs"),
    ({"deadline": True, "devices": {"speed": 1.0, "up": 1.0, "down": 1.0}}, "federation.deadline"),
])
def test_clock_settings_fail_in_one_line(federation, message):
    with pytest.raises(ConfigError) as err:
        make_config(federation=federation)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_bad_trace_file_fails_in_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"client_id": [0, 9], "start_s": [0.0, 5.0], "end_s": [1.0, 2.0]}).to_csv(bad, index=False)
    for path, message in ((bad, "row 1"), (tmp_path / "missing.csv", "is not a file")):
        with pytest.raises(fedray.FedrayError) as err:
            _run(availability={"trace": str(path)})
        assert "federation.availability.trace" in str(err.value) and message in str(err.value)
        assert "\n" not in str(err.value)


def test_evaluation_only_tasks_are_neither_timed_nor_withheld():
    from fedray.loop.clock import trained

    train, look = Task(print, None, None), Task(print, None, None, evaluation=True)
    tasks = {0: train, 1: look, 2: train, 3: look}
    assert trained(tasks, np.array([0, 1, 2, 3])).tolist() == [True, False, True, False]
    online = np.array([True, True, False, False])
    assert sorted(Clock.only_online(tasks, online)) == [0, 1, 3]  # offline client 3 still evaluates
    kept = Clock.only_online(CohortTasks([0, 1, 2, 3], train), online)
    assert list(kept) == [0, 1]


def test_the_ray_runtime_gives_the_same_simulated_clock(ray_session):
    local, ray = _clocked(), _clocked(backend="ray", num_cpus=2, clients_per_actor=20)
    cols = ["round", "clients_sampled", "clients_late", "sim_round_s", "sim_time_s"]
    pd.testing.assert_frame_equal(local.history[cols], ray.history[cols])
    pd.testing.assert_frame_equal(local.failures, ray.failures)


def test_a_resumed_run_continues_the_simulated_clock(tmp_path):
    from fedray.api import run as run_api

    cfg = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}}, "seed": 5, "runtime": LOCAL,
           "data": {"dataset": "blobs", "options": {"points_per_client": 50}}, "checkpoint": {"every": 1},
           "federation": {"n_clients": 60, "fraction": 0.5, "rounds": 6, "deadline": 0.05,
                          "availability": {"generator": "random", "period_s": 0.2, "online": 0.6},
                          "devices": {"speed": 2e5, "up": 1e5, "down": 1e5, "spread": 1.0}}}
    full = fedray.run(**cfg, output=tmp_path / "full")
    with plugins.interrupt_after_checkpoint(2), pytest.raises(KeyboardInterrupt):
        fedray.run(**cfg, output=tmp_path / "cut")
    resumed = run_api.resume(tmp_path / "cut", progress=False)
    cols = ["round", "clients_sampled", "clients_late", "sim_round_s", "sim_time_s"]
    pd.testing.assert_frame_equal(resumed.history[cols], full.history[cols])
    assert resumed.summary["simulated"] == full.summary["simulated"]


def test_a_diurnal_client_online_the_whole_period_never_goes_offline():
    """online: 1.0 means always online: no spell ends at a period boundary (it did, and a client whose
    training crossed its phase's boundary was made late); a shorter spell still ends where it should."""
    def availability(online):
        cfg = make_config(federation={"availability": {"generator": "diurnal", "period_s": 100.0, "online": online}})
        return make_availability(cfg.federation.availability, 50, 3)

    always = availability(1.0)
    ids = np.arange(50)
    for t in (0.0, 37.5, 99.9, 250.0):
        assert always.online(t).all() and np.isinf(always.online_until(ids, t)).all()
    half = availability(0.5)
    on = np.flatnonzero(half.online(10.0))
    ends = half.online_until(on, 10.0)
    assert np.isfinite(ends).all() and (ends > 10.0).all() and (ends <= 60.0).all()
    assert not half.online(ends.max() + 1e-6)[on[ends.argmax()]]


def test_the_clocks_shortcuts_give_the_same_bits_as_its_formulas():
    """What makes the clock cheap at 10^5 clients must not change a single value: the kept compute and
    download seconds of a full cohort, the remembered diurnal answer for a time, and the remainder
    taken by fmod where the values are not negative, equal the formulas computed afresh."""
    from fedray.data.deployment import Devices

    rng = np.random.default_rng(4)
    n = 1000
    dev = Devices(speed=rng.lognormal(13, 1, n), up=rng.lognormal(11, 1, n), down=rng.lognormal(11, 1, n),
                  profile=np.zeros(n, dtype=np.int64))
    n_samples = rng.integers(1, 500, n).astype(np.float64)
    clock = Clock(n_samples=n_samples, devices=dev, deadline=1.0, epochs=3)
    tasks = CohortTasks(np.arange(n), Task(print, None, np.zeros(7)))  # 56 bytes down
    every = np.arange(n)
    for up in (rng.integers(50, 90, n), rng.integers(10, 20, n)):  # the kept part reused with other replies
        cost = 6.0 * 56 / 8.0
        formula = n_samples * 3.0 * cost / dev.speed + 56.0 / dev.down + up / dev.up
        assert np.array_equal(clock.times(tasks, every, up), formula)
        some = every[::3]  # not the whole cohort: computed per client
        assert np.array_equal(clock.times(tasks, some, up[::3]), formula[::3])

    cfg = make_config(federation={"availability": {"generator": "diurnal", "period_s": 86400.0, "online": 0.4}})
    av = make_availability(cfg.federation.availability, n, 11)
    for t in (0.0, 5e3, 86399.75, 3.3e5):
        x = np.mod(t + av.phase, av.period)
        first = av.online(t)
        assert np.array_equal(first, x < av.on) and av.online(t) is first  # asked again: the same answer
        assert not first.flags.writeable  # a remembered answer cannot be changed by whoever reads it
        on = np.flatnonzero(first)
        assert np.array_equal(av.online_until(on, t), t + (av.on - x[on]))
        assert np.array_equal(av.online_until(every, t), t + (av.on - x))


def test_every_client_means_every_id_once_in_order():
    """The shortcut that reads per-client columns as they are holds only for 0 .. n - 1 in order."""
    from fedray.data.deployment import every_client

    assert every_client(np.arange(5), 5)
    assert not every_client(np.array([0, 2, 1, 3, 4]), 5)  # same ends, not in order
    assert not every_client(np.arange(4), 5) and not every_client(np.zeros(0, dtype=np.int64), 0)
