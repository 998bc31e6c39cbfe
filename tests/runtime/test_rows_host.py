"""The client host keeps clients as rows: what it holds per client, and that resident,
non-resident and chunked hosts give the same bits."""
from __future__ import annotations

import numpy as np
import pytest

import fedray.runtime.host as host_mod
from fedray.algorithms.kmeans import lloyd_stats
from fedray.core.centers import evaluate_pass1
from fedray.core.contract import Task, batched
from fedray.core.stats import Stats
from fedray.data.recipes import RecipeRange
from fedray.runtime.host import ClientHost
from fedray.runtime.tasks import UniformTasks

N, PTS, D = 20_000, 10, 8


def _range(n: int = N, pts: int = PTS, d: int = D, start: int = 0) -> RecipeRange:
    source = {"kind": "blobs", "seed": 0, "alpha": None, "points_per_client": pts, "n_features": d, "n_centers": 5,
              "cluster_std": 1.0, "center_box": (-10.0, 10.0), "weights": None}
    return RecipeRange(source, start, start + n)


def _host(n: int = N, resident: bool = True, **kw) -> ClientHost:
    return ClientHost(_range(n), 0, False, (D,), resident=resident, **kw)


def _write_x(payload, shared, client):
    client.state["x"] = 1
    return Stats(n=np.array([1.0]))


def _read_x(payload, shared, client):
    return Stats(x=np.array([float(client.state.get("x", 0))]))


def _leave_empty(payload, shared, client):
    client.state  # noqa: B018 - touching state makes an empty dict, which the host must forget
    return Stats(n=np.array([float(client.data.X.shape[0])]))


def _plain_sizes(payload, shared, client):
    """No batched form: runs client by client."""
    X = client.data.X
    return Stats(s=X.sum(axis=0), r=client.rng.random(2))


def _updates(outcomes):
    assert all(o.error is None for o in outcomes), [o.error for o in outcomes if o.error][:2]
    return [(o.client_id, {k: np.asarray(v).tobytes() for k, v in o.update.items()}) for o in outcomes]


# --- accounting ---------------------------------------------------------------
def test_accounting_rows_and_at_most_32_bytes_per_client_besides_rows():
    """A host of 20,000 clients keeps their rows (X and y as 8-byte values) and, besides them, only
    ids and offsets: at most 32 bytes per client. A non-resident host keeps no rows."""
    acc = _host().accounting()
    assert acc["clients"] == N
    assert acc["rows"] == N * PTS * (D + 1) * 8
    besides = sum(v for k, v in acc.items() if k not in ("rows", "clients"))
    assert besides <= 32 * N, acc
    assert acc["state"] == acc["secrets"] == acc["shards"] == 0
    lazy = _host(resident=False).accounting()
    assert lazy["rows"] == 0 and lazy["clients"] == N
    assert sum(v for k, v in lazy.items() if k not in ("rows", "clients")) <= 32 * N


def test_state_costs_only_the_clients_that_have_some_and_persists():
    """Writing state on 100 clients makes ``state`` grow for those 100 only; a task that leaves state
    empty costs nothing (empty dicts are forgotten); a later run reads the state; get_state returns
    only clients with state."""
    host = _host()
    assert host.accounting()["state"] == 0
    host.run(0, [(c, Task(_leave_empty), -1) for c in range(0, 500)])
    assert host.accounting()["state"] == 0 and host.states == {}
    written = list(range(1000, 1100))
    host.run(0, [(c, Task(_write_x), -1) for c in written])
    acc = host.accounting()
    assert sorted(host.states) == written
    assert 0 < acc["state"] <= 100 * 1000, acc  # 100 small dicts, not 20,000
    assert host.accounting()["state"] == acc["state"]
    host.run(1, [(c, Task(_leave_empty), -1) for c in range(900, 1200)])
    assert host.accounting()["state"] == acc["state"], "a task that writes nothing changed the state held"
    got = host.run(2, [(c, Task(_read_x), -1) for c in (999, 1000, 1099, 1100)])
    assert [float(o.update["x"][0]) for o in got] == [0.0, 1.0, 1.0, 0.0]
    assert set(host.get_state([998, 1000, 1050, 1100, 5000])) == {1000, 1050}
    assert host.get_state([1000])[1000] == {"x": 1}


# --- resident and non-resident hosts ------------------------------------------
@pytest.fixture(scope="module")
def pair():
    n = 3000
    return ClientHost(_range(n), 0, False, (D,), resident=True), ClientHost(_range(n), 0, False, (D,), resident=False)


def _compare_hosts(a: ClientHost, b: ClientHost) -> None:
    for cid in (0, 1, 1234, 2999):
        (Xa, ya), (Xb, yb) = a.shard(cid), b.shard(cid)
        assert Xa.tobytes() == Xb.tobytes() and ya.tobytes() == yb.tobytes() and Xa.shape == Xb.shape
    da, db = a.describe(), b.describe()
    for key in ("ids", "n", "n_features", "classes"):
        assert getattr(da, key).tobytes() == getattr(db, key).tobytes(), key
    for key in ("sum", "sumsq", "min", "max"):
        assert np.concatenate(getattr(da, key)).tobytes() == np.concatenate(getattr(db, key)).tobytes(), key
    assert (da.names, da.errors, da.bad_values) == (db.names, db.errors, db.bad_values)
    assert [t.tobytes() for t in da.totals()] == [t.tobytes() for t in db.totals()]
    centers = a.shard(7)[0][:5].copy()
    ids = np.arange(0, 3000, 3)
    for tasks in (UniformTasks(ids, Task(lloyd_stats, None, centers), 0),
                  [(c, Task(_plain_sizes), -1) for c in ids[:200].tolist()]):
        assert _updates(a.run(1, tasks, centers)) == _updates(b.run(1, tasks, centers))


def test_non_resident_host_gives_the_same_bits_as_a_resident_one(pair):
    """shard, describe (every field), a batched kmeans task and a plain per-client task: the same
    bits whether the rows are kept or generated again."""
    a, b = pair
    assert a.resident and not b.resident
    _compare_hosts(a, b)


def test_non_resident_host_applies_the_scaler_to_regenerated_rows(pair):
    """After apply_scaler the regenerated rows are scaled exactly as the kept ones."""
    a, b = ClientHost(_range(3000), 0, False, (D,)), ClientHost(_range(3000), 0, False, (D,), resident=False)
    tot = a.describe().totals()
    mean = tot[0] / (3000 * PTS)
    scale = np.sqrt(tot[1] / (3000 * PTS) - mean ** 2)
    for h in (a, b):
        h.apply_scaler(mean, scale)
    assert not np.array_equal(a.shard(5)[0], pair[0].shard(5)[0]), "the scaler did nothing"
    _compare_hosts(a, b)


# --- chunking -----------------------------------------------------------------
def _block_bits(parts):
    out = []
    for p in parts:
        block = p.block()
        out.append((p.client_ids.tobytes(), {k: block.column(k).tobytes() for k in block.arrays}))
    return out


def _joined(parts):
    ids = np.concatenate([p.client_ids for p in parts])
    names = parts[0].arrays.keys()
    return ids.tobytes(), {k: np.concatenate([p.block().column(k) for p in parts]).tobytes() for k in names}


@pytest.mark.parametrize("fn, payload", [(lloyd_stats, None), (evaluate_pass1, {"n_classes": 5})])
def test_chunked_batched_calls_equal_the_unchunked_one(fn, payload, monkeypatch):
    """With BATCH_ROWS small a host splits a batched call into chunks of clients; the chunks'
    outcomes, joined, are the same bits as one call's; a sink receives each chunk's part."""
    host = ClientHost(_range(500), 0, False, (D,))
    centers = host.shard(3)[0][:4].copy()
    ids = np.arange(500)
    evaluation = fn is evaluate_pass1
    tasks = UniformTasks(ids, Task(fn, payload, centers, evaluation=evaluation), 0)
    whole = host.run_parts(0, tasks, centers)
    assert len(whole) == 1
    monkeypatch.setattr(host_mod, "BATCH_ROWS", 37)  # 3 clients of 10 rows per chunk
    seen = []
    parts = host.run_parts(0, tasks, centers, sink=lambda p: seen.append(p) or p)
    assert len(parts) == len(seen) == 167 and [len(p.client_ids) for p in seen[:2]] == [3, 3]
    assert all(a is b for a, b in zip(parts, seen))
    assert _joined(parts) == _joined(whole)
    per_client = host.run(0, tasks, centers)
    assert _updates(per_client) == _updates(host_mod.unpack_outcomes(whole))


def _sizes_many(payloads, shared, batch):
    CALLS.append(len(batch))
    return [Stats(n=np.array([float(s)])) for s in batch.sizes.tolist()]


CALLS: list[int] = []


@batched(_sizes_many, split=False)
def _unsplit_sizes(payload, shared, client):
    return Stats(n=np.array([float(client.data.X.shape[0])]))


@batched(_sizes_many)
def _split_sizes(payload, shared, client):
    return Stats(n=np.array([float(client.data.X.shape[0])]))


def test_a_form_declared_split_false_is_never_split(monkeypatch):
    """batched(..., split=False): one call for all the host's clients whatever BATCH_ROWS says
    (a form that may be split is split, so the setting is in effect)."""
    host = ClientHost(_range(200), 0, False, (D,), resident=False)
    monkeypatch.setattr(host_mod, "BATCH_ROWS", 37)
    monkeypatch.setattr(host_mod, "REGENERATE_CHUNK", 50)
    CALLS.clear()
    out = host.run(0, UniformTasks(np.arange(200), Task(_unsplit_sizes), -1))
    assert CALLS == [200] and len(out) == 200
    CALLS.clear()
    host.run(0, UniformTasks(np.arange(200), Task(_split_sizes), -1))
    assert len(CALLS) == 67 and sum(CALLS) == 200


def test_non_resident_host_regenerates_in_chunks_of_regenerate_chunk(monkeypatch):
    """A non-resident host never generates the rows of more than REGENERATE_CHUNK clients at once."""
    host = ClientHost(_range(200), 0, False, (D,), resident=False)
    monkeypatch.setattr(host_mod, "REGENERATE_CHUNK", 64)
    CALLS.clear()
    host.run(0, UniformTasks(np.arange(200), Task(_split_sizes), -1))
    assert CALLS == [64, 64, 64, 8]


# --- host.clients -------------------------------------------------------------
def test_clients_mapping():
    """host.clients: len, id order, KeyError for an id the host lacks, state assignment persists."""
    host = ClientHost(_range(50, start=100), 0, False, (D,))
    clients = host.clients
    assert len(clients) == 50
    assert list(clients) == list(range(100, 150))
    assert 120 in clients and 99 not in clients and 150 not in clients
    for bad in (99, 150, -1):
        with pytest.raises(KeyError):
            clients[bad]
    c = clients[120]
    assert c.id == 120 and c.name == "client-120" and c.data.X.tobytes() == host.shard(120)[0].tobytes()
    clients[121].state = {"w": 3}
    clients[122].state["v"] = 4
    assert clients[121].state == {"w": 3} and clients[122].state == {"v": 4}
    assert host.get_state([120, 121, 122]) == {121: {"w": 3}, 122: {"v": 4}}
