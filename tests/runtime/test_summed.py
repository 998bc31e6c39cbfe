"""Summed calls (``Task(summed=True)``): on Ray, hosts add their clients' updates in client order, each
continuing the sum of the hosts before it, and send only the sum; its bits are those of adding every
client's reply on the server. Reading a single reply of such a call is a one-line error."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.algorithms.kmeans import lloyd_stats
from fedray.api.config import make_config
from fedray.core import calls
from fedray.core.contract import CohortTasks, Task
from fedray.core.errors import FedrayError
from fedray.core.stats import total
from fedray.data.federation import build_federation
from fedray.runtime import host as host_mod
from fedray.runtime.backends import make_executor

KW = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 4, "init": "random-box"}},
          data={"dataset": "blobs", "options": {"n_centers": 4, "points_per_client": 7, "n_features": 3},
                "scale": "standard"},
          federation={"n_clients": 60, "rounds": 5}, seed=11)


def _executor(n: int, per_actor: int):
    cfg = make_config(**{**KW, "federation": {"n_clients": n}},
                      runtime={"backend": "ray", "clients_per_actor": per_actor, "progress": False})
    fed = build_federation(cfg.data, n, cfg.seed)
    ex = make_executor("ray", fed.specs, cfg.seed, False, fed.sample_shape, cfg.runtime)
    ex.sums_in_hosts = True  # no layer above it
    return ex


@pytest.mark.parametrize("per_actor", [7, 25])
def test_hosts_sum_gives_the_bits_of_the_servers_sum(ray_session, monkeypatch, per_actor):
    """The sum the hosts send (chained over actors, each in chunks) equals, byte for byte, the total of
    the per-client replies of the same call; and the replies carry no update of their own."""
    ex = _executor(60, per_actor)
    try:
        C = np.random.default_rng(0).normal(size=(4, 3))
        ids = np.arange(3, 60, 2)
        summed = ex.execute(calls.train(1), CohortTasks(ids, Task(lloyd_stats, None, C, summed=True)))
        plain = ex.execute(calls.train(1), CohortTasks(ids, Task(lloyd_stats, None, C)))
        assert summed.replies.summed_total is not None and plain.replies.summed_total is None
        a, b = total(summed.replies), total(plain.replies)
        assert list(a) == list(b)
        for k in a:
            assert a[k].tobytes() == b[k].tobytes(), k
        np.testing.assert_array_equal(summed.replies.columns()[0], ids)
        with pytest.raises(FedrayError, match=r"summed=True.*fedray.total"):
            summed.replies[0]
    finally:
        ex.shutdown()


def test_a_run_with_summed_rounds_equals_the_local_and_per_client_runs(ray_session):
    """k-means declares its training task summed: the run on Ray (several hosts, hosts adding) gives
    the same centres, history and metrics as the local runtime and as client-by-client replies."""
    runs = [fedray.run(runtime={"backend": "local", "batched": False, "progress": False}, **KW),
            fedray.run(runtime={"backend": "ray", "clients_per_actor": 7, "progress": False}, **KW),
            fedray.run(runtime={"backend": "ray", "progress": False}, **{**KW, "federation": {
                "n_clients": 60, "rounds": 5, "fraction": 0.4}})]
    ref, ray_run = runs[0], runs[1]
    np.testing.assert_array_equal(ray_run.centers, ref.centers)
    cols = [c for c in ref.history.select_dtypes("number").columns if not c.endswith("_s")]
    for c in cols:
        assert np.array_equal(ray_run.history[c].to_numpy(), ref.history[c].to_numpy(), equal_nan=True), c
    local_part = fedray.run(runtime={"backend": "local", "progress": False},
                            **{**KW, "federation": {"n_clients": 60, "rounds": 5, "fraction": 0.4}})
    np.testing.assert_array_equal(runs[2].centers, local_part.centers)


def test_layers_that_read_each_reply_turn_the_hosts_sum_off(ray_session):
    """With the message log on, every client's reply must reach the server: the hosts do not add them."""
    with fedray.Session(runtime={"backend": "ray", "progress": False}, output={"messages": True}, **KW) as s:
        assert s.executor.sums_in_hosts is False
    with fedray.Session(runtime={"backend": "ray", "progress": False}, **KW) as s:
        assert s.executor.sums_in_hosts is True


def test_hosts_fold_in_chunks_as_one_pass(monkeypatch):
    """A host's fold over its kept chunks continues a running sum exactly (local host, tiny chunks)."""
    from fedray.data.recipes import RecipeRange
    from fedray.runtime.host import ClientHost

    monkeypatch.setattr(host_mod, "BATCH_ROWS", 20)
    src = {"kind": "blobs", "seed": 3, "alpha": None, "n_centers": 4, "n_features": 3, "points_per_client": 7,
           "cluster_std": 1.0, "center_box": (-5.0, 5.0), "weights": None}
    a, b = ClientHost(RecipeRange(src, 0, 30), 3, False, (3,)), ClientHost(RecipeRange(src, 30, 50), 3, False, (3,))
    C = np.random.default_rng(1).normal(size=(4, 3))
    task = Task(lloyd_stats, None, C)
    out_a = a.run_kept(0, host_mod.UniformTasks(np.arange(30), task, 0), C)
    out_b = b.run_kept(0, host_mod.UniformTasks(np.arange(30, 50), task, 0), C)
    assert out_a[0] == out_b[0] == "kept"
    acc = b.fold_kept(a.fold_kept(None))
    whole = total([o.update for o in a.run(0, [(c, task, 0) for c in range(30)], C)]
                  + [o.update for o in b.run(0, [(c, task, 0) for c in range(30, 50)], C)])
    for k in ("sums", "counts"):
        assert acc[k].tobytes() == whole[k].tobytes(), k
