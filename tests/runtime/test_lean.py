"""Client actors load only what they use.

A client actor's process imports ``fedray`` (Ray unpickles the actor class from
``fedray.actors.client_actor``) and the modules of the tasks it runs. pandas, pyarrow, scipy,
cryptography, matplotlib and numba must not come with them: they cost about 110 MiB and 1.7 s of
import in every actor, and a clustering run's client never uses them (numba loads at the first fused
pass that is worth compiling; cryptography with secure aggregation). The house test
(tests/core/test_house.py) checks the imports themselves; this checks a real run's actors.
"""
from __future__ import annotations

import numpy as np

import fedray

#: What a client of a run without secure aggregation must not load (numba may: the fused passes).
NOT_IN_CLIENTS = ("pandas", "pyarrow", "scipy", "matplotlib", "cryptography")


def test_the_public_names_still_load_on_first_use():
    """The facade's lazy names are the real objects (the lean import hides nothing)."""
    from fedray.api.session import Session

    assert fedray.Session is Session
    assert callable(fedray.run) and callable(fedray.make_config)
    assert "Session" in dir(fedray)


def test_client_actors_of_a_ray_run_load_none_of_them(ray_session):
    """A real k-means run on Ray, one actor per client, no secure aggregation: after the run (set-up,
    rounds and the final evaluation) no client actor has imported pandas, pyarrow, scipy, matplotlib
    or cryptography, while each has imported what its tasks use (numpy, the k-means module)."""
    with fedray.Session(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                        data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 30}},
                        federation={"n_clients": 3, "rounds": 2}, seed=1,
                        runtime={"backend": "ray", "clients_per_actor": 1, "progress": False}) as s:
        result = s.run()
        assert np.all(np.isfinite(result.centers))
        actors = s.executor.actors
        assert len(actors) == 3
        probe = NOT_IN_CLIENTS + ("numpy", "fedray.algorithms.kmeans")
        seen = ray_session.get([a.imported.remote(probe) for a in actors], timeout=120)
    for got in seen:
        assert set(got) == {"numpy", "fedray.algorithms.kmeans"}, got
