"""Structural properties that let fedray scale to thousands of clients.

* A round contacts only the actors hosting sampled clients, and builds tasks
  only for the sampled clients: its cost does not grow with the clients that
  sit the round out.
* Client recipes are small and hold no rows: shards are generated (blobs) or
  read (Parquet, one filtered read per actor) inside the actors.
* The ``auto`` layout follows the cluster: one actor per CPU slot, capped by
  the slots of a custom client resource.
"""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd

import fedray
from fedray.algorithms.kmeans import lloyd_stats
from fedray.api.config import DataConfig
from fedray.core.calls import train as train_call
from fedray.core.contract import Task
from fedray.core.seeding import sample_clients
from fedray.data import federation as fed_mod
from fedray.data.federation import build_federation
from fedray.loop.server import Server
from fedray.runtime.local import LocalExecutor
from fedray.runtime.placement import resolve_layout


class _Spy:
    """Stands in for an actor handle and records which methods the executor reaches for."""

    def __init__(self, handle, index: int, calls: list) -> None:
        self._handle, self._index, self._calls = handle, index, calls

    def __getattr__(self, name: str):
        self._calls.append((self._index, name))
        return getattr(self._handle, name)


def test_round_contacts_only_actors_of_sampled_clients(ray_session):
    cfg = fedray.make_config(data={"dataset": "blobs", "options": {"points_per_client": 20}},
                             federation={"n_clients": 12}, runtime={"backend": "ray", "clients_per_actor": 4})
    with fedray.Session(cfg) as session:
        ex = session.executor
        calls: list = []
        ex.actors = [_Spy(a, i, calls) for i, a in enumerate(ex.actors)]
        assert len(ex.actors) == 3
        sampled = [int(c) for c in sample_clients(0, 3, 12, 0.25)]
        task = Task(lloyd_stats, None, np.zeros((3, 2)))
        res = ex.execute(train_call(3), {c: task for c in sampled})
        assert [r.client_id for r in res.replies] == sorted(sampled) and not res.failed
        owners = {ex.owner[c] for c in sampled}
        assert {i for i, _ in calls} == owners and len(calls) == len(owners)  # one call per hosting actor
        calls.clear()
        ex.execute(train_call(4), {5: task})  # client 5 lives in actor 1 (clients 4..7)
        assert calls == [(1, "run")]


class _CountingExecutor(LocalExecutor):
    def __init__(self, inner: LocalExecutor) -> None:
        self.__dict__.update(inner.__dict__)
        self.sent: list[int] = []

    def execute(self, round_, tasks, timeout=None):
        self.sent.append(len(tasks))
        return super().execute(round_, tasks, timeout)


def test_round_builds_tasks_only_for_sampled_clients():
    cfg = fedray.make_config(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box"}},
                             data={"dataset": "blobs", "options": {"points_per_client": 30}},
                             federation={"n_clients": 200, "fraction": 0.05, "rounds": 4},
                             runtime={"backend": "local"})
    with fedray.Session(cfg) as session:
        ex = _CountingExecutor(session.executor)
        server = Server(session.make_algorithm(), ex, seed=0, fraction=0.05, max_rounds=4)
        history = server.run()
    assert ex.sent == [10, 10, 10, 10]  # m = floor(0.05 * 200), never n
    assert [h["clients_sampled"] for h in history] == [10] * 4
    assert all(row["rounds"] <= 4 for row in server.client_rows.values()) and len(server.client_rows) <= 40


def test_blob_recipes_hold_no_rows():
    data = DataConfig(dataset="blobs", options={"points_per_client": 1000, "n_features": 8, "n_centers": 8})
    fed = build_federation(data, 5000, seed=0)
    assert fed.n_clients == 5000
    assert all(s.indices is None for s in fed.specs)
    # a recipe is a few hundred bytes, the shard it describes 64 kB (1000 x 8 float64)
    assert len(pickle.dumps(fed.specs)) / 5000 < 1000


def test_parquet_by_column_driver_reads_no_features_and_actors_filter(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"site": np.repeat([f"s{i}" for i in range(6)], 10), "a": rng.normal(size=60),
                       "b": rng.normal(size=60)})
    path = tmp_path / "t.parquet"
    df.to_parquet(path, index=False)
    reads: list[tuple] = []
    real = fed_mod.read_table

    def spy(p, kind, columns=None, filters=None):
        reads.append((tuple(columns or ()), filters))
        return real(p, kind, columns=columns, filters=filters)

    monkeypatch.setattr(fed_mod, "read_table", spy)
    fed = build_federation(DataConfig(dataset=f"parquet:{path}", client_column="site"), None, seed=0)
    assert reads == [(("site",), None)]  # the driver reads the client column only
    reads.clear()
    shards = fed_mod.materialize_many(fed.specs[2:4])  # what one actor hosting clients 2 and 3 does
    assert len(reads) == 1 and reads[0][1] == [("site", "in", ["s2", "s3"])]
    np.testing.assert_array_equal(shards[1][0], df[df.site == "s3"][["a", "b"]].to_numpy())


def test_auto_layout_is_capped_by_custom_client_slots():
    assert resolve_layout(100, "auto", None, 6.0) == (17, 1.0)
    assert resolve_layout(100, "auto", None, 6.0, max_actors=4) == (25, 1.0)
    assert resolve_layout(3, "auto", None, 6.0, max_actors=4) == (1, 1.0)
    assert resolve_layout(100, 10, None, 6.0, max_actors=4)[0] == 10  # explicit layouts are kept
