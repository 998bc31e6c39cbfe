"""Summed calls (``Task(summed=True)``): on Ray, hosts add their clients' updates in client order, each
continuing the sum of the hosts before it, and send only the sum; its bits are those of adding every
client's reply on the server. Reading a single reply of such a call is a one-line error."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.algorithms.fcm import fcm_stats
from fedray.algorithms.fedkmeans import client_minibatch_kmeans
from fedray.algorithms.kmeans import lloyd_stats
from fedray.api.config import make_config
from fedray.core import calls
from fedray.core.centers import evaluate_pass1, evaluate_pass2
from fedray.core.contract import CohortTasks, Task, batched
from fedray.core.errors import FedrayError
from fedray.core.stats import Stats, StatsBlock, total
from fedray.data.federation import build_federation
from fedray.runtime import host as host_mod
from fedray.runtime import summed as summed_mod
from fedray.runtime.backends import make_executor
from fedray.runtime.tasks import UniformTasks

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
    ex.sum_min_clients = 1  # the hosts add however few clients each holds
    return ex


# name: (client function, payload, evaluation); the shared object is the centres (a pass-2 dict for it)
SUMMED_TASKS = {"kmeans": (lloyd_stats, None, False),
                "federated-fcm": (fcm_stats, {"m": 2.0, "guard": False, "objective": True}, False),
                "fedkmeans": (client_minibatch_kmeans, {"beta": 0.5, "epochs": 1, "batch_size": None}, False),
                "evaluate_pass1": (evaluate_pass1, {"n_classes": 4, "m": 2.0}, True),
                "evaluate_pass2": (evaluate_pass2, None, True)}


@pytest.mark.parametrize("name", list(SUMMED_TASKS))
@pytest.mark.parametrize("per_actor", [7, 25])
def test_hosts_sum_gives_the_bits_of_the_servers_sum(ray_session, monkeypatch, per_actor, name):
    """The sum the hosts send (chained over actors, each in chunks) equals, byte for byte, the total of
    the per-client replies of the same call; and the replies carry no update of their own."""
    fn, payload, evaluation = SUMMED_TASKS[name]
    ex = _executor(60, per_actor)
    try:
        C = np.random.default_rng(0).normal(size=(4, 3))
        shared = {"centers": C, "means": C + 0.25} if fn is evaluate_pass2 else C
        ids = np.arange(3, 60, 2)
        call = calls.evaluate(0) if evaluation else calls.train(1)
        summed = ex.execute(call, CohortTasks(ids, Task(fn, payload, shared, evaluation=evaluation, summed=True)))
        plain = ex.execute(call, CohortTasks(ids, Task(fn, payload, shared, evaluation=evaluation)))
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


def test_a_run_with_summed_rounds_equals_the_local_and_per_client_runs(ray_session, monkeypatch):
    """k-means declares its training task summed: the run on Ray (several hosts, hosts adding) gives
    the same centres, history and metrics as the local runtime and as client-by-client replies."""
    monkeypatch.setattr(summed_mod, "SUM_MIN_CLIENTS", 1)  # read by the executor, which the server actor gets
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


def test_hosts_holding_few_clients_each_send_per_client_replies_with_the_same_bits(ray_session):
    """Below SUM_MIN_CLIENTS clients a host (one client an actor here), a summed call skips the hosts'
    chain: its replies arrive per client, and their total has the bits of the chained sum."""
    assert summed_mod.hosts_sum(2000, 2) and not summed_mod.hosts_sum(2000, 3)
    assert not summed_mod.hosts_sum(1, 1, 1) and summed_mod.hosts_sum(2, 2, 1)
    ex = _executor(12, 1)
    try:
        C = np.random.default_rng(2).normal(size=(4, 3))
        ids = np.arange(12)
        chained = ex.execute(calls.train(1), CohortTasks(ids, Task(lloyd_stats, None, C, summed=True)))
        ex.sum_min_clients = summed_mod.SUM_MIN_CLIENTS
        direct = ex.execute(calls.train(1), CohortTasks(ids, Task(lloyd_stats, None, C, summed=True)))
        assert chained.replies.summed_total is not None and direct.replies.summed_total is None
        np.testing.assert_array_equal(direct.replies.columns()[0], ids)
        a, b = total(chained.replies), total(direct.replies)
        assert list(a) == list(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
    finally:
        ex.shutdown()


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
    out_a = a.keep(0, UniformTasks(np.arange(30), task, 0), C)
    out_b = b.keep(0, UniformTasks(np.arange(30, 50), task, 0), C)
    assert out_a.kept is not None and out_b.kept is not None and not out_a.parts and not out_b.parts
    acc = b.fold_kept(a.fold_kept(None))
    whole = total([o.update for o in a.run(0, [(c, task, 0) for c in range(30)], C)]
                  + [o.update for o in b.run(0, [(c, task, 0) for c in range(30, 50)], C)])
    for k in ("sums", "counts"):
        assert acc[k].tobytes() == whole[k].tobytes(), k


def _count_many(payloads, shared, batch):
    if 30 in batch.ids.tolist():
        raise ValueError("this host's clients run one by one")
    for c in batch.clients:
        c.state["runs"] = c.state.get("runs", 0) + 1
    return StatsBlock(n=batch.sizes.astype(np.float64), s=np.ones((len(batch), 2)))


@batched(_count_many)
def _count(payload, shared, client):
    client.state["runs"] = client.state.get("runs", 0) + 1
    return Stats(n=np.asarray(float(len(client.data.X))), s=np.ones(2))


def test_a_host_answering_client_by_client_turns_the_call_per_client_without_running_anyone_twice(ray_session):
    """One host's batched form declines (it holds client 30), so it answers client by client: the call's
    replies are then per client, the other hosts' kept replies fetched rather than computed again, so
    every client ran exactly once and the replies equal those of the plain call."""
    ex = _executor(60, 10)
    try:
        ids = np.arange(60)
        summed = ex.execute(calls.train(1), CohortTasks(ids, Task(_count, None, None, summed=True)))
        assert summed.replies.summed_total is None and not summed.failed
        assert {c: st["runs"] for c, st in ex.get_state(ids.tolist()).items()} == dict.fromkeys(range(60), 1)
        plain = ex.execute(calls.train(2), CohortTasks(ids, Task(_count, None, None)))
        assert [r.client_id for r in summed.replies] == [r.client_id for r in plain.replies] == list(range(60))
        for a, b in zip(summed.replies, plain.replies):
            assert a.update["n"] == b.update["n"] and np.array_equal(a.update["s"], b.update["s"])
    finally:
        ex.shutdown()


@pytest.mark.parametrize("name, params, summed", [
    ("kmeans", {}, True), ("fedkmeans", {"batch_size": 3}, True), ("federated-fcm", {}, True),
    ("federated-fcm", {"min_sample_guard": True}, False)])
def test_algorithms_whose_update_reads_only_the_total_declare_their_round_task_summed(ray_session, name, params,
                                                                                    summed, monkeypatch):
    """The round tasks of k-means, FedKMeans and FCM are summed (FCM's guard withholds some clients'
    replies, which its update counts one by one: not summed then), and so are the evaluation passes; on
    Ray, with hosts adding, every run gives the local runtime's centres, history and final metrics."""
    kw = {**KW, "algorithm": {"name": name, "params": {"n_clusters": 4, "init": "random-box", **params}}}
    monkeypatch.setattr(summed_mod, "SUM_MIN_CLIENTS", 1)  # the hosts add 7 clients each
    runs = [fedray.run(runtime={"backend": "local", "progress": False}, **kw),
            fedray.run(runtime={"backend": "ray", "clients_per_actor": 7, "progress": False}, **kw)]
    with fedray.Session(runtime={"backend": "local", "progress": False}, **kw) as s:
        alg = s.make_algorithm()
        assert alg.round_task().summed is summed
        assert alg.evaluation_task(0, None).summed is True  # the evaluation reads totals only
    np.testing.assert_array_equal(runs[1].centers, runs[0].centers)
    cols = [c for c in runs[0].history.select_dtypes("number").columns if not c.endswith("_s")]
    for c in cols:
        assert np.array_equal(runs[1].history[c].to_numpy(), runs[0].history[c].to_numpy(), equal_nan=True), c
    for k in ("objective", "sse", "davies_bouldin", "ari", "nmi", "acc"):  # the summed evaluation's bits
        assert np.array_equal(runs[1].final[k], runs[0].final[k], equal_nan=True), k


def test_a_host_keeps_at_most_keep_bytes_and_sends_the_rest_on(monkeypatch):
    """Past KEEP_BYTES of kept replies a host stops keeping: the parts past it go to the store as they
    are computed and it answers per client, with every client's reply exactly once and the bits of the
    plain call; under the budget it keeps them all."""
    from fedray.data.recipes import RecipeRange
    from fedray.runtime.clients import unpack_outcomes
    from fedray.runtime.host import ClientHost

    monkeypatch.setattr(host_mod, "BATCH_ROWS", 20)  # chunks of 2 clients of 7 rows
    src = {"kind": "blobs", "seed": 3, "alpha": None, "n_centers": 4, "n_features": 3, "points_per_client": 7,
           "cluster_std": 1.0, "center_box": (-5.0, 5.0), "weights": None}
    host = ClientHost(RecipeRange(src, 0, 30), 3, False, (3,))
    C = np.random.default_rng(1).normal(size=(4, 3))
    task = Task(lloyd_stats, None, C)
    stored = []

    def store(part):
        stored.append(part)
        return ("stored", len(stored) - 1)

    assert host.keep(0, UniformTasks(np.arange(30), task, 0), C, store=store).kept is not None
    assert not stored and len(host._kept) == 15
    per_chunk = sum(a.nbytes for a in host._kept[0].arrays.values())
    monkeypatch.setattr(host_mod, "KEEP_BYTES", 3 * per_chunk)  # three chunks are kept, the other 12 stored
    out = host.keep(0, UniformTasks(np.arange(30), task, 0), C, store=store)
    assert out.kept is None and len(stored) == 12 and host._kept is None
    parts = [stored[p[1]] if isinstance(p, tuple) else p for p in out.parts]
    got = {o.client_id: o.update for o in unpack_outcomes(parts)}
    assert sorted(got) == list(range(30))
    plain = {o.client_id: o.update for o in host.run(0, [(c, task, 0) for c in range(30)], C)}
    for c in range(30):
        for k in ("sums", "counts", "sse"):
            assert np.asarray(got[c][k], dtype=np.float64).tobytes() == np.asarray(plain[c][k]).tobytes(), (c, k)
