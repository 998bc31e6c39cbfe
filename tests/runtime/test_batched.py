"""Batched client functions (fedray.batched): one call per host, the same bits as client by client."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.core.contract import Task, batched
from fedray.core.errors import DataError
from fedray.core.stats import Stats
from fedray.data.federation import ClientSpec
from fedray.runtime.host import ClientHost

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
        _ = b.clients[0].labels


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


# --- the batched forms of the statistics algorithms and the evaluation passes --------------------------------
def _forms():
    from fedray.algorithms import fcm, fedkmeans, kmeans
    from fedray.analysis import validation
    from fedray.core import centers

    return {"lloyd_stats": kmeans.lloyd_stats, "fcm_stats": fcm.fcm_stats,
            "client_minibatch_kmeans": fedkmeans.client_minibatch_kmeans,
            "evaluate_pass1": centers.evaluate_pass1, "evaluate_pass2": centers.evaluate_pass2,
            "fuzzy_db_stats": validation.fuzzy_db_stats, "crisp_db_stats": validation.crisp_db_stats}


def _count_calls(monkeypatch) -> dict[str, list[int]]:
    """Wrap every batched form so that a test can tell it was used (and on how many clients)."""
    calls: dict[str, list[int]] = {}
    for name, fn in _forms().items():
        many = fn.__fedray_batched__

        def spy(payloads, shared, batch, _name=name, _many=many):
            calls.setdefault(_name, []).append(len(batch))
            return _many(payloads, shared, batch)

        monkeypatch.setattr(fn, "__fedray_batched__", spy)
    return calls


@pytest.mark.parametrize("algorithm,params,used", [
    ("kmeans", {"n_clusters": 4}, {"lloyd_stats", "evaluate_pass1", "evaluate_pass2"}),
    ("federated-fcm", {"n_clusters": 4}, {"fcm_stats", "evaluate_pass1", "evaluate_pass2"}),
    ("federated-fcm", {"n_clusters": 3, "min_sample_guard": True}, {"fcm_stats"}),
    ("fedkmeans", {"n_clusters": 4, "max_rounds": 4}, {"client_minibatch_kmeans", "evaluate_pass1"}),
    ("fedfcm", {"n_clusters": 3}, {"fuzzy_db_stats", "evaluate_pass1", "evaluate_pass2"}),
    ("kfed", {"n_clusters": 3}, {"evaluate_pass1", "evaluate_pass2"}),
])
def test_every_batched_form_gives_the_plain_functions_bits(algorithm, params, used, monkeypatch, caplog):
    calls = _count_calls(monkeypatch)
    kw = dict(algorithm={"name": algorithm, "params": params}, **BASE)
    with caplog.at_level(logging.DEBUG, logger="fedray.runtime.host"):
        on = fedray.run(runtime={"backend": "local", "batched": True}, **kw)
    assert "batched client function failed" not in caplog.text  # used, not declined
    assert used <= set(calls), f"batched forms not used: {used - set(calls)}"
    assert all(max(calls[u]) >= 2 for u in used)
    calls.clear()
    off = fedray.run(runtime={"backend": "local", "batched": False}, **kw)
    assert not calls, "runtime.batched=false ran a batched form"
    np.testing.assert_array_equal(on.centers, off.centers)
    pd.testing.assert_frame_equal(on.history.drop(columns="wall_s"), off.history.drop(columns="wall_s"))
    assert on.final == off.final


def test_fedkmeans_with_mini_batches_or_epochs_runs_client_by_client_with_the_same_result(monkeypatch):
    calls = _count_calls(monkeypatch)
    kw = dict(algorithm={"name": "fedkmeans", "params": {"n_clusters": 3, "max_rounds": 3, "epochs": 2,
                                                          "batch_size": 7}}, **BASE)
    on = fedray.run(runtime={"backend": "local"}, **kw)
    off = fedray.run(runtime={"backend": "local", "batched": False}, **kw)
    np.testing.assert_array_equal(on.centers, off.centers)
    assert "client_minibatch_kmeans" in calls  # asked, declined (it raised), then the plain function ran


def _host_outcomes(batched_: bool, fn, payload, shared, n: int = 6, ids=None):
    host = ClientHost(_specs(n), 0, False, (2,), batched=batched_)
    ids = list(range(n)) if ids is None else ids
    return host.run(0, [(i, Task(fn, payload, shared, evaluation=True), 0) for i in ids], shared)


@pytest.mark.parametrize("name,payload", [
    ("lloyd_stats", None), ("fcm_stats", {"m": 2.0}), ("fcm_stats", {"m": 1.7, "guard": True}),
    ("client_minibatch_kmeans", {"beta": 0.7, "epochs": 1, "batch_size": None}),
    ("evaluate_pass1", {"n_classes": None, "m": 2.0}), ("fuzzy_db_stats", {"m": 2.0, "q": 1.5}),
    ("crisp_db_stats", {"q": 2.0}), ("fuzzy_db_stats", {"m": 2.0, "mask": {}}),
])
@pytest.mark.parametrize("ids", [None, [0, 2, 3, 5]])  # a view of the host's block, and a copy of some clients
def test_batched_form_on_a_host_equals_the_plain_function_client_by_client(name, payload, ids, caplog):
    fn = _forms()[name]
    if payload and "mask" in payload:  # the ring of the clients taking part
        payload = {**payload, "mask": {"seed": 5, "order": list(range(6)) if ids is None else ids}}
    C = np.array([[-3.0, 1.0], [2.0, 2.0], [0.0, -4.0]])
    with caplog.at_level(logging.DEBUG, logger="fedray.runtime.host"):
        on = _host_outcomes(True, fn, payload, C, ids=ids)
    assert "batched client function failed" not in caplog.text
    off = _host_outcomes(False, fn, payload, C, ids=ids)
    assert [o.client_id for o in on] == [o.client_id for o in off]
    for a, b in zip(on, off):
        assert a.error is None and b.error is None and a.nbytes == b.nbytes
        if b.update is None:  # withheld by the privacy guard
            assert a.update is None
            continue
        assert set(a.update) == set(b.update)
        for k in b.update:
            assert a.update[k].shape == b.update[k].shape
            np.testing.assert_array_equal(a.update[k], b.update[k], err_msg=f"{name}: {k}")


def test_a_stats_block_reply_becomes_one_packed_message_and_per_client_updates():
    from fedray.core.stats import StatsBlock
    from fedray.runtime.clients import PackedOutcomes

    @batched(lambda payloads, shared, batch: StatsBlock(n=batch.sizes.astype(float), s=np.ones((len(batch), 2))))
    def fn(payload, shared, client):
        return Stats(n=np.array(float(client.data.X.shape[0])), s=np.ones(2))

    host = ClientHost(_specs(4), 0, False, (2,))
    parts = host.run_parts(0, [(i, Task(fn), -1) for i in range(4)])
    assert len(parts) == 1 and isinstance(parts[0], PackedOutcomes)
    out = host.run(0, [(i, Task(fn), -1) for i in range(4)])
    assert [float(o.update["n"]) for o in out] == [10.0, 11.0, 12.0, 13.0]
    assert all(o.nbytes == 24 for o in out)


def test_a_batched_form_taking_each_shared_object_covers_clients_of_different_objects_in_one_call():
    """shared="each": one call for the clients of several shared objects (the clusters' models), each
    client given its own object; a form without it is called once per object."""
    calls: list[list[float]] = []

    def many(payloads, shared, batch):
        calls.append(list(shared) if isinstance(shared, list) else [shared] * len(batch))
        return [{"y": s} for s in (shared if isinstance(shared, list) else [shared] * len(batch))]

    def plain(payload, shared, client):
        return {"y": shared}

    each = batched(many, shared="each")(lambda payload, shared, client: plain(payload, shared, client))
    one = batched(many)(lambda payload, shared, client: plain(payload, shared, client))
    host = ClientHost(_specs(4), 0, False, (2,))
    tasks = [(0, 1), (1, 0), (2, 1), (3, -1)]  # (client, shared index): objects 0 and 1, and none
    out = host.run(0, [(c, Task(each), s) for c, s in tasks], 10.0, 20.0)
    assert calls == [[20.0, 10.0, 20.0, None]]
    assert [o.update["y"] for o in sorted(out, key=lambda o: o.client_id)] == [20.0, 10.0, 20.0, None]
    calls.clear()
    out = host.run(0, [(c, Task(one), s) for c, s in tasks], 10.0, 20.0)
    assert sorted(map(len, calls)) == [1, 1, 2]  # one call per shared object
    assert [o.update["y"] for o in sorted(out, key=lambda o: o.client_id)] == [20.0, 10.0, 20.0, None]
    with pytest.raises(ValueError, match="shared must be 'one' or 'each'"):
        batched(many, shared="all")


# --- fedray.total: the same bits however the clients are split into blocks ---------------------------------
def test_total_of_block_rows_does_not_depend_on_how_clients_are_split_among_blocks():
    from fedray.core.stats import StatsBlock, total

    rng = np.random.default_rng(0)
    n = 40
    sums, sse = rng.normal(size=(n, 3, 2)) * 10.0 ** rng.integers(-8, 8, size=(n, 1, 1)), rng.random(n)
    each = [Stats(sums=sums[i], sse=sse[i]) for i in range(n)]
    reference = total(each)
    for cut in ([n], [1] * n, [3] * 13 + [1], [7, 20, 13], [16, 24]):
        rows, start = [], 0
        for size in cut:
            block = StatsBlock(sums=sums[start:start + size], sse=sse[start:start + size])
            rows += block.rows()
            start += size
        t = total(rows)
        np.testing.assert_array_equal(t["sums"], reference["sums"])
        np.testing.assert_array_equal(t["sse"], reference["sse"])
    mixed = StatsBlock(sums=sums[:20], sse=sse[:20]).rows() + each[20:]
    np.testing.assert_array_equal(total(mixed)["sums"], reference["sums"])


def test_total_still_rejects_mismatched_statistics_and_empty_input():
    from fedray.core.stats import StatsBlock, total

    with pytest.raises(ValueError, match="names"):
        total([Stats(a=np.ones(2)), Stats(b=np.ones(2))])
    with pytest.raises(ValueError, match="empty"):
        total([])
    with pytest.raises(ValueError, match="first dimension"):
        StatsBlock(a=np.ones((3, 2)), b=np.ones(2))


def test_batched_forms_equal_plain_on_ray_for_any_clients_per_actor(ray_session):
    kw = dict(seed=3, data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 30},
                            "partition": {"name": "dirichlet", "alpha": 0.5}},
              federation={"n_clients": 7, "rounds": 3, "fraction": 1.0})
    for algorithm in ("kmeans", "federated-fcm"):
        args = dict(kw, algorithm={"name": algorithm, "params": {"n_clusters": 3}})
        ref = fedray.run(runtime={"backend": "local", "batched": False}, **args)
        for cpa in (1, 3, "auto"):
            got = fedray.run(runtime={"backend": "ray", "clients_per_actor": cpa}, **args)
            np.testing.assert_array_equal(got.centers, ref.centers, err_msg=f"{algorithm}, {cpa}")
            pd.testing.assert_frame_equal(got.history.drop(columns="wall_s"), ref.history.drop(columns="wall_s"))
            assert got.final == ref.final


def test_one_task_for_many_clients_travels_as_ids_and_gives_the_same_outcomes():
    from fedray.algorithms.kmeans import lloyd_stats
    from fedray.runtime.tasks import UniformTasks

    C = np.array([[-3.0, 1.0], [2.0, 2.0]])
    task = Task(lloyd_stats, None, C)
    for batched_ in (True, False):
        host = ClientHost(_specs(5), 0, False, (2,), batched=batched_)
        compact = host.run(0, UniformTasks(np.array([0, 2, 3]), task, 0), C)
        listed = host.run(0, [(i, task, 0) for i in (0, 2, 3)], C)
        assert [o.client_id for o in compact] == [0, 2, 3]
        for a, b in zip(compact, listed):
            for k in b.update:
                np.testing.assert_array_equal(a.update[k], b.update[k])
    assert list(UniformTasks(np.array([4, 7]), task, 1)) == [(4, task, 1), (7, task, 1)]
