"""A run's client actors are reserved at once (one placement group), in the session's Ray instance (2 CPUs).

* :func:`client_bundles` gives one bundle per actor, with the layout the run uses;
* a request that can never fit the cluster fails in one line before anything waits;
* a run whose resources other work holds waits, says so, and starts when they are free
  (or fails in one line after ``runtime.queue_timeout``);
* inside an existing placement group (a Ray Tune trial) no new group is made: the
  actors go into its bundles 1, 2, ..., and a group too small fails in one line;
* the run's own group is given back when the run ends.
"""
from __future__ import annotations

import logging
import threading

import pytest

import fedray
from fedray.api.config import ExperimentConfig
from fedray.api.settings import client_bundles
from fedray.core.errors import ConfigError, RoundFailedError
from fedray.runtime import placement
from fedray.runtime.placement import fit_into, layout_for, reserve

pytestmark = pytest.mark.usefixtures("ray_session")


def _cfg(**runtime) -> ExperimentConfig:
    return ExperimentConfig.model_validate({"federation": {"n_clients": 50}, "runtime": runtime})


def _groups(state: str = "CREATED") -> int:
    import ray

    return sum(1 for g in ray.util.placement_group_table().values() if g["state"] == state)


def test_client_bundles_follow_the_runs_layout():
    # 50 clients on 2 CPUs: two actors of one CPU (the "auto" layout), one bundle each
    assert client_bundles(_cfg()) == [{"CPU": 1.0}, {"CPU": 1.0}]
    # a trial's share fixes the CPUs of "auto"; GPUs and custom resources join each bundle
    spec = _cfg(client_resources={"num_gpus": 0.25, "custom": {"edge": 1}})
    assert client_bundles(spec, total_cpus=4) == [{"CPU": 1.0, "GPU": 0.25, "edge": 1.0}] * 4
    # an explicit layout: 10 actors share the 2 CPUs
    assert client_bundles(_cfg(clients_per_actor=5)) == [{"CPU": 0.2}] * 10
    # the same layout inside a group made of those bundles (what a Tune trial runs in)
    tot = sum(b["CPU"] for b in client_bundles(_cfg(), total_cpus=3))
    assert layout_for(_cfg().runtime, 50, total_cpus=tot).n_actors == 3
    with pytest.raises(ConfigError, match="n_clients"):
        client_bundles(_cfg().runtime)


def test_a_request_that_never_fits_fails_in_one_line(monkeypatch):
    cfg = _cfg(client_resources={"num_cpus": 1.5}, clients_per_actor=10)  # 5 actors x 1.5 CPU > 2 CPUs
    with pytest.raises(ConfigError) as err:
        reserve(layout_for(cfg.runtime, 50), cfg.runtime)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("runtime.client_resources.num_cpus: 5 client actors need 7.5 CPU")
    with pytest.raises(ConfigError, match=r"custom\.fedray_client: .* 0 fedray_client"):
        bad = _cfg(client_resources={"custom": {"fedray_client": 1}})
        reserve(layout_for(bad.runtime, 50), bad.runtime)
    import ray

    # two nodes of 2 CPUs: 3 CPUs in all would fit, one actor of 3 CPUs fits no node
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0})
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 2.0}}] * 2)
    placement.check_fits([{"CPU": 1.5}, {"CPU": 1.5}])
    with pytest.raises(ConfigError, match="asks for 3 CPU, more than any one node has"):
        placement.check_fits([{"CPU": 3.0}])
    # a cluster that grows on demand: no error (the group would wait for the autoscaler)
    placement.check_fits([{"CPU": 3.0}], wait_for_nodes=True)


def test_a_run_waits_for_resources_held_elsewhere_and_says_so(monkeypatch, caplog):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    monkeypatch.setattr(placement, "WAIT_FIRST_S", 0.2)
    cfg = _cfg(queue_timeout=1.0)
    holder = placement_group([{"CPU": 2.0}])  # another run holds the whole cluster
    ray.get(holder.ready(), timeout=60)
    try:
        with caplog.at_level(logging.WARNING, logger="fedray.runtime.placement"):
            with pytest.raises(RoundFailedError) as err:
                reserve(layout_for(cfg.runtime, 50), cfg.runtime)
        assert "\n" not in str(err.value) and "runtime.queue_timeout=1 s" in str(err.value)
        assert any("waiting for resources for" in r.getMessage() for r in caplog.records)
        assert _groups("PENDING") == 0, "a run that gives up removes its pending group"
        # without a queue timeout the run waits until the holder is gone, then gets the cluster
        release = threading.Timer(1.0, remove_placement_group, args=(holder,))
        release.start()
        got = reserve(layout_for(_cfg().runtime, 50), _cfg().runtime)
        release.join()
        assert got.owned and got.indices == [0, 1]
        got.release()
    finally:
        remove_placement_group(holder)
    assert _groups() == 0


def test_a_second_run_of_this_process_that_could_never_start_fails_in_one_line():
    first = reserve(layout_for(_cfg().runtime, 50), _cfg().runtime)  # two 1-CPU actors: the whole cluster
    try:
        with pytest.raises(ConfigError, match="this process already holds 2 of the cluster's 2 CPU"):
            reserve(layout_for(_cfg().runtime, 50), _cfg().runtime)
    finally:
        first.release()
    second = reserve(layout_for(_cfg().runtime, 50), _cfg().runtime)  # released: it fits again
    second.release()
    assert _groups() == 0


def test_fit_into_a_trials_group():
    trial = [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 0.5, "GPU": 1.0}]
    assert fit_into(trial, [{"CPU": 0.5}] * 3) == [1, 1, 2]  # bundle 0 (the trial's driver) is never used
    with pytest.raises(ConfigError, match=r"fedray.client_bundles\(config\)"):
        fit_into(trial, [{"CPU": 1.0}] * 3)
    with pytest.raises(ConfigError):
        fit_into([{"CPU": 4.0}], [{"CPU": 0.1}])  # only the driver's bundle


RUN = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}}, "data": {"dataset": "sklearn:wine"},
       "federation": {"n_clients": 6}, "seed": 5}


def _run_in_group(runtime: dict) -> tuple[bool, list[int], list]:
    """Inside a placement group (as a Ray Tune trial): where the run's actors go, and a run's centres."""
    cfg = ExperimentConfig.model_validate({"federation": {"n_clients": 6}, "runtime": runtime})
    got = reserve(layout_for(cfg.runtime, 6), cfg.runtime)
    res = fedray.run(**RUN, runtime={"backend": "ray", **runtime})
    return got.owned, got.indices, res.centers.tolist()


def test_inside_a_trials_group_no_new_group_is_made():
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    before = len(ray.util.placement_group_table())
    trial = placement_group([{"CPU": 0.2}] + client_bundles(_cfg(), n_clients=6, total_cpus=1.6))
    ray.get(trial.ready(), timeout=60)
    try:
        fn = ray.remote(_run_in_group).options(num_cpus=0.2, scheduling_strategy=PlacementGroupSchedulingStrategy(
            trial, placement_group_bundle_index=0))
        owned, indices, centers = ray.get(fn.remote({}), timeout=300)
        assert not owned and indices == [1], "the actors go into the trial's bundles, never bundle 0"
        assert len(ray.util.placement_group_table()) == before + 1, "no group besides the trial's"
        assert centers == fedray.run(**RUN, runtime={"backend": "local"}).centers.tolist()
        too_small = ray.remote(_run_in_group).options(num_cpus=0.2, scheduling_strategy=(
            PlacementGroupSchedulingStrategy(trial, placement_group_bundle_index=0)))
        with pytest.raises(ray.exceptions.RayTaskError, match="cannot hold its"):
            # two actors of one CPU each; the group's client bundle has one CPU
            ray.get(too_small.remote({"clients_per_actor": 3, "client_resources": {"num_cpus": 1}}), timeout=300)
    finally:
        remove_placement_group(trial)


def test_queue_timeout_says_how_often_a_waiting_run_reports_as_the_code_does():
    """`fedray describe runtime` gives the intervals of the "waiting for resources" lines that
    placement.py uses (it said "every minute" while the first line comes after 5 s)."""
    from fedray.runtime.placement import WAIT_FIRST_S, WAIT_MAX_S
    from fedray.tools.describe import describe

    line = next(x for x in describe("runtime").splitlines() if "runtime.queue_timeout" in x)
    assert f"doubling from {WAIT_FIRST_S:g} s to {WAIT_MAX_S:g} s" in line, line
