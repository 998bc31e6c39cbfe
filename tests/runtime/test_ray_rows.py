"""Clients as rows on Ray: hosts big enough to split an evaluation into chunks give the local
runtime's bits, and the executor's accounting sums its hosts."""
from __future__ import annotations

import numpy as np

import fedray
from fedray.api.config import make_config
from fedray.data.federation import build_federation
from fedray.runtime import host as host_mod
from fedray.runtime.backends import make_executor

N_CLIENTS, POINTS, PER_ACTOR = 30_000, 20, 15_000
KW = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
          data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": POINTS, "n_features": 2}},
          federation={"n_clients": N_CLIENTS, "rounds": 1, "fraction": 0.002}, seed=5)


def test_an_evaluation_split_into_chunks_on_ray_equals_the_local_run(ray_session):
    """Each of the 2 actors holds more rows than a host hands a batched form at once, so the final
    evaluation over every client runs in chunks there (replies stored chunk by chunk); the final
    metrics and centres are the local run's bits."""
    assert PER_ACTOR * POINTS > host_mod.BATCH_ROWS, "the hosts would not split the evaluation"
    local = fedray.run(runtime={"backend": "local", "progress": False}, **KW)
    on_ray = fedray.run(runtime={"backend": "ray", "clients_per_actor": PER_ACTOR, "progress": False}, **KW)
    assert on_ray.summary["actors"] == 2
    np.testing.assert_array_equal(on_ray.centers, local.centers)
    numeric = {k for k, v in local.final.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numeric, local.final
    for k in numeric:
        assert np.array_equal(on_ray.final[k], local.final[k], equal_nan=True), k


def test_ray_accounting_sums_over_the_actors(ray_session):
    """executor.accounting(): hosts = actors, clients = the population, rows = every client's rows."""
    cfg = make_config(**{**KW, "federation": {"n_clients": 1000}},
                      runtime={"backend": "ray", "clients_per_actor": 400, "progress": False})
    fed = build_federation(cfg.data, 1000, cfg.seed)
    ex = make_executor("ray", fed.specs, cfg.seed, True, fed.sample_shape, cfg.runtime)
    try:
        acc = ex.accounting()
    finally:
        ex.shutdown()
    assert acc["hosts"] == 3 and acc["clients"] == 1000
    assert acc["rows"] == 1000 * POINTS * (2 + 1) * 8
    assert acc["state"] == 0 and acc["index"] <= 32 * 1000 + 3 * 64
