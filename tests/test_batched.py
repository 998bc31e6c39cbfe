"""Batched client functions (fedray.batched): one call per host, the same bits as client by client."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.algorithm import Task, batched
from fedray.client import ClientHost
from fedray.data.federation import ClientSpec
from fedray.errors import DataError
from fedray.stats import Stats

BASE = dict(data={"dataset": "sklearn:wine", "scale": "standard", "partition": {"name": "dirichlet", "alpha": 0.5}},
            federation={"n_clients": 9, "rounds": 5}, seed=3)


def _run(algorithm: str, fraction: float, batched_: bool, **runtime):
    return fedray.run(algorithm={"name": algorithm, "params": {"n_clusters": 4}},
                      runtime={"backend": "local", "batched": batched_, **runtime},
                      **{**BASE, "federation": {**BASE["federation"], "fraction": fraction}})


@pytest.mark.parametrize("fraction", [1.0, 0.5])  # consecutive clients (a view) and a subset (a copy)
def test_batched_kmeans_equals_client_by_client_bit_for_bit(fraction, monkeypatch):
    from fedray.algorithms import kmeans

    calls = []
    many = kmeans.lloyd_stats.__fedray_batched__
    monkeypatch.setattr(kmeans.lloyd_stats, "__fedray_batched__", lambda *a: calls.append(len(a[2])) or many(*a))
    on = _run("kmeans", fraction, True)
    assert calls and max(calls) >= 4, "the batched form was not used"
    off = _run("kmeans", fraction, False)
    np.testing.assert_array_equal(on.centers, off.centers)
    pd.testing.assert_frame_equal(on.history.drop(columns="wall_s"), off.history.drop(columns="wall_s"))


def _specs(n: int) -> list[ClientSpec]:
    return [ClientSpec(i, {"kind": "blobs", "seed": 0, "alpha": None, "n_centers": 2, "n_features": 2,
                           "points_per_client": 10 + i, "cluster_std": 1.0, "center_box": (-5, 5)}, None)
            for i in range(n)]


def _sizes(payload, shared, client):
    if client.id == 2:
        raise DataError("client 2 refuses")
    return Stats(n=np.array(float(client.data.X.shape[0])))


def test_a_failing_batched_form_falls_back_to_the_plain_function_which_names_the_client():
    seen = []

    @batched(lambda payloads, shared, batch: seen.append(len(batch)) or 1 / 0)
    def fn(payload, shared, client):
        return _sizes(payload, shared, client)

    host = ClientHost(_specs(4), 0, False, (2,))
    out = host.run(0, [(i, Task(fn), -1) for i in range(4)])
    assert seen == [4]
    assert [o.client_id for o in out] == [0, 1, 2, 3]
    assert out[2].error and "client 2 refuses" in out[2].error and out[2].user_error
    assert [float(o.update["n"]) for o in out if o.error is None] == [
        host.clients[i].data.X.shape[0] for i in (0, 1, 3)]


def test_a_batched_form_with_the_wrong_number_of_updates_is_not_trusted():
    @batched(lambda payloads, shared, batch: [Stats(n=np.array(-1.0))])
    def fn(payload, shared, client):
        return Stats(n=np.array(float(client.data.X.shape[0])))

    out = ClientHost(_specs(3), 0, False, (2,)).run(0, [(i, Task(fn), -1) for i in range(3)])
    assert all(float(o.update["n"]) > 0 for o in out)


def test_client_batch_rows_offsets_and_owner_match_each_clients_shard():
    host = ClientHost(_specs(5), 0, False, (2,))
    got = {}

    def many(payloads, shared, batch):
        got["batch"] = batch
        return [None] * len(batch)

    fn = batched(many)(lambda p, s, c: None)
    host.run(0, [(i, Task(fn), -1) for i in (0, 2, 3)])
    b = got["batch"]
    assert list(b.ids) == [0, 2, 3] and b.labels is None  # training tasks of unsupervised runs see no labels
    for pos, cid in enumerate(b.ids):
        np.testing.assert_array_equal(b.X[b.offsets[pos]:b.offsets[pos + 1]], host.clients[cid].data.X)
        assert (b.owner[b.offsets[pos]:b.offsets[pos + 1]] == pos).all()
    with pytest.raises(AttributeError):
        b.clients[0].labels


def test_scaling_in_place_on_the_block_gives_the_same_shards():
    host = ClientHost(_specs(3), 0, False, (2,))
    before = {i: host.clients[i].data.X.copy() for i in range(3)}
    shift, scale = np.array([1.0, -2.0]), np.array([3.0, 0.5])
    host.apply_scaler(shift, scale)
    for i in range(3):
        np.testing.assert_array_equal(host.clients[i].data.X, (before[i] - shift) / scale)


def test_batched_rejects_a_non_function():
    with pytest.raises(TypeError):
        batched(3)
