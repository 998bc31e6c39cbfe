"""Same seed, same bits: local and Ray runtimes, any number of clients per actor."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.runtime.placement import resolve_layout

BASE = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 4}},
            data={"dataset": "blobs", "options": {"n_centers": 4, "points_per_client": 120}},
            federation={"n_clients": 8, "fraction": 0.5, "rounds": 6}, seed=11)


def _strip(h: pd.DataFrame) -> pd.DataFrame:
    return h.drop(columns=["wall_s"])


@pytest.mark.parametrize("algorithm", ["kmeans", "federated-fcm"])
def test_local_and_ray_give_identical_history_and_centres(ray_session, algorithm):
    kw = {**BASE, "algorithm": {"name": algorithm, "params": {"n_clusters": 4}}}
    local = fedray.run(runtime={"backend": "local"}, **kw)
    for cpa in (1, 4):
        on_ray = fedray.run(runtime={"backend": "ray", "clients_per_actor": cpa}, **kw)
        assert on_ray.summary["actors"] == 8 // cpa
        np.testing.assert_array_equal(on_ray.centers, local.centers)
        pd.testing.assert_frame_equal(_strip(on_ray.history), _strip(local.history))
        assert on_ray.final == local.final


def test_sampling_is_seeded_and_sized():
    from fedray.core.seeding import sample_clients

    a = sample_clients(5, 3, 100, 0.25)
    assert len(a) == 25 and len(set(a.tolist())) == 25
    np.testing.assert_array_equal(a, sample_clients(5, 3, 100, 0.25))
    assert not np.array_equal(a, sample_clients(5, 4, 100, 0.25))
    assert len(sample_clients(5, 0, 3, 0.1)) == 1  # m = max(1, floor(fraction * n))


def test_different_seeds_differ():
    a = fedray.run(runtime={"backend": "local"}, **BASE)
    b = fedray.run(runtime={"backend": "local"}, **{**BASE, "seed": 12})
    assert not np.array_equal(a.centers, b.centers)


def test_layout_auto_fills_cpu_slots():
    assert resolve_layout(1000, "auto", None, 2.0) == (500, 1.0)
    assert resolve_layout(3, "auto", None, 8.0) == (1, 1.0)
    cpa, cpus = resolve_layout(8, 1, None, 2.0)
    assert cpa == 1 and cpus * 8 <= 2.0


def _torch_loaded(actors, wait: float) -> list[bool]:
    """Whether each actor's process has imported torch, polled for up to ``wait`` seconds."""
    import sys
    import time

    import ray

    t0 = time.monotonic()
    while True:
        got = ray.get([a.__ray_call__.remote(lambda self: "torch" in sys.modules) for a in actors])
        if all(got) or time.monotonic() - t0 > wait:
            return got
        time.sleep(0.1)


def test_client_actors_import_torch_early_for_neural_methods_and_never_for_clustering(ray_session):
    """A session whose algorithm needs torch has its actors import it while they start (not in the
    first round); a clustering session leaves torch out of its actors until a neural run asks."""
    import warnings

    from fedray.api.session import Session
    from fedray.core.errors import SharedSamplesWarning

    data = {"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [30, 40]}}
    base = dict(data=data, federation={"n_clients": 4, "rounds": 1}, runtime={"backend": "ray", "progress": False})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        with Session(algorithm={"name": "kmeans"}, **base) as s:
            s.run(output=False)
            assert _torch_loaded(s.executor.actors, 0) == [False, False]
            s._preload_for("fedavg")  # what run("fedavg") does first
            assert _torch_loaded(s.executor.actors, 60) == [True, True]
        with Session(algorithm={"name": "fedavg", "params": {"model": "cnn8"}}, **base) as s:
            assert _torch_loaded(s.executor.actors, 60) == [True, True]


def test_each_ray_run_gets_its_own_server_and_none_is_left_waiting_after_a_run(ray_session):
    """A ray session starts its first run's server actor ahead (beside the client actors); each run
    gets its own actor, killed after the run, and no spare is started for a run that is not asked for;
    runs back to back give the same bits as a run in a session of its own; closing the session kills a
    server started ahead that no run took."""
    import ray
    from ray.exceptions import RayActorError

    kw = {**BASE, "runtime": {"backend": "ray", "progress": False}}
    alone = fedray.run(**kw)
    s = fedray.Session(**kw)
    try:
        first = s._spare_server
        assert first is not None
        a = s.run(output=False)
        assert s._spare_server is None  # nothing started for a next run nobody asked for
        with pytest.raises(RayActorError):
            ray.get(first.state.remote(), timeout=60)           # the used server is gone
        b = s.run(output=False)
        assert s._spare_server is None
        for r in (a, b):
            np.testing.assert_array_equal(r.centers, alone.centers)
            pd.testing.assert_frame_equal(_strip(r.history), _strip(alone.history))
    finally:
        s.close()
    unused = fedray.Session(**kw)
    spare = unused._spare_server
    unused.close()
    assert unused._spare_server is None
    with pytest.raises(RayActorError):
        ray.get(spare.state.remote(), timeout=60)


def test_a_server_actor_without_a_run_says_so_in_one_line(ray_session):
    import ray
    from ray.exceptions import RayTaskError

    from fedray.actors.server_actor import ServerActor

    actor = ServerActor.remote()
    try:
        with pytest.raises(RayTaskError, match="has not started a run"):
            ray.get(actor.step.remote(), timeout=60)
    finally:
        ray.kill(actor)


def test_a_run_whose_server_started_ahead_died_starts_a_new_one(ray_session, caplog):
    """Killed processes: the actor kept for the next run dies while it waits; the run says so in one
    warning line, starts a fresh server and gives the same bits."""
    import ray

    kw = {**BASE, "runtime": {"backend": "ray", "progress": False}}
    alone = fedray.run(**kw)
    with fedray.Session(**kw) as s:
        ray.kill(s._spare_server)
        with caplog.at_level("WARNING", logger="fedray"):
            r = s.run(output=False)
    np.testing.assert_array_equal(r.centers, alone.centers)
    assert any("started ahead for this run is gone" in m for m in caplog.messages)
