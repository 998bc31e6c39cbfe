"""A user's own layer on the layer protocol (fedray.layers.base): it sees every call's traffic, can change
it, plugs in by reference or as an object like an algorithm, sits below privacy, and a bad one fails in
one line before any data is read."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import fedray
from examples.plugins.layers import DropClient, TrafficLog
from fedray.core.calls import train
from fedray.core.contract import Reply
from fedray.core.errors import ConfigError
from fedray.core.stats import Stats
from fedray.layers.base import Layer, LayerExecutor
from fedray.layers.stack import build_stack, find_layer
from fedray.runtime.executor import ExecResult

BASE = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": 4}}, seed=3,
            data={"dataset": "sklearn:iris", "scale": "standard"}, federation={"n_clients": 6, "rounds": 4},
            runtime={"backend": "local", "progress": False})


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("fedray").setLevel(logging.ERROR)
    yield
    logging.getLogger("fedray").setLevel(logging.NOTSET)


class UpdateSpy:
    """Records, for every reply that reaches it, whether the update was a client's own statistics or masked."""

    name = "update-spy"

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def wrap_tasks(self, call, tasks):
        return tasks

    def finish(self, call, tasks, result):
        self.kinds += ["stats" if isinstance(r.update, Stats) else "masked" if getattr(r.update, "masked", False)
                       else "other" for r in result.replies]
        return result


def test_the_examples_are_layers_and_the_stack_is_built_from_a_list():
    log, drop = TrafficLog(), DropClient(1)
    assert isinstance(log, Layer) and isinstance(drop, Layer)

    class Bottom:  # the smallest executor: every client answers its task's function with None
        inner = None
        sums_in_hosts = False

        def execute(self, call, tasks, timeout=None):
            return ExecResult([Reply(c, None, 0.0, 8) for c in sorted(tasks)])

        def report(self):
            return {}

        def reset_records(self):
            pass

    bottom = Bottom()
    top = build_stack(bottom, [log, drop])  # log at the bottom, drop on top of it
    assert isinstance(top, LayerExecutor) and top.layer is drop and top.inner.layer is log
    assert find_layer(top, LayerExecutor) is top
    res = top.execute(train(0), dict.fromkeys(range(3)))
    assert [r.client_id for r in res.replies] == [0, 2] and res.failed == [1]
    assert log.rows[0]["answered"] == [0, 1, 2]  # below the drop, the log saw client 1's reply
    assert top.report()["layers"]["traffic-log"] == log.rows


def test_a_user_layer_sees_each_rounds_traffic_and_changes_nothing_it_passes_on():
    """A pass-through layer sees every training round (the clients sampled, those that answered, the
    bytes the history counts) and the evaluation calls; the run gives the same bits as without it, and
    the layer's record reaches the Result."""
    plain = fedray.run(**{**BASE, "federation": {"n_clients": 6, "rounds": 4, "fraction": 0.5}}, output=False)
    res = fedray.run(**{**BASE, "federation": {"n_clients": 6, "rounds": 4, "fraction": 0.5}}, layers=[TrafficLog()],
                     output=False)
    np.testing.assert_array_equal(res.centers, plain.centers)
    rows = res.extras["layers"]["traffic-log"]  # the run's record (the object starts afresh for each run)
    rounds = [r for r in rows if r["kind"] == "train"]
    h = res.history
    assert [r["round"] for r in rounds] == list(h["round"])
    assert [len(r["asked"]) for r in rounds] == list(h["clients_sampled"])
    assert list(h["clients_sampled"][1:]) == [3] * (len(h) - 1)  # after k-means' set-up round over everyone
    assert [len(r["answered"]) for r in rounds] == list(h["clients_answered"])
    assert [r["bytes_up"] for r in rounds] == list(h["bytes_up"])
    assert len({tuple(r["asked"]) for r in rounds}) > 1  # the cohorts it saw are the sampled ones, not everyone
    assert any(r["kind"] == "evaluate" for r in rows)


def test_a_user_layer_by_reference_changes_each_rounds_traffic():
    """``layers: [{name: ..., params: ...}]``: the layer keeps client 0's training replies from the server,
    so each round counts it failed (a row of the failures table naming the layer) and the result moves."""
    plain = fedray.run(**BASE, output=False)
    res = fedray.run(**BASE, layers=[{"name": "examples.plugins.layers:DropClient", "params": {"client_id": 0}}],
                     output=False)
    assert list(res.history["clients_failed"]) == [1] * len(res.history)
    assert list(res.history["clients_answered"]) == [5] * len(res.history)
    f = res.extras["failures"]
    assert set(f["client_id"]) == {0} and f["error"].str.contains("dropped by the drop-client layer").all()
    assert not np.array_equal(res.centers, plain.centers)
    assert res.config.to_dict()["layers"] == [{"name": "examples.plugins.layers:DropClient",
                                               "params": {"client_id": 0}}]


def test_a_user_layer_sits_below_privacy_and_sees_only_masked_vectors():
    """Under secure aggregation the statistics that reach a user layer are masked vectors, never a client's
    own sums (without privacy the same layer sees the sums themselves)."""
    spy, plain = UpdateSpy(), UpdateSpy()
    fedray.run(**BASE, privacy={"secure_aggregation": True}, layers=[spy], output=False)
    fedray.run(**BASE, layers=[plain], output=False)
    assert "masked" in spy.kinds and "stats" not in spy.kinds
    assert "stats" in plain.kinds and "masked" not in plain.kinds


@pytest.mark.parametrize("entry, says", [
    ("no_such_module_x:Layer", "layers[0].name"),
    ({"name": "examples.plugins.layers:DropClient", "params": {"client_id": -1}}, "layers[0].params"),
    ({"name": "examples.plugins.layers:DropClient", "color": "red"}, "layers"),
    ({"name": "examples.plugins.layers:TrafficLog", "params": {"nope": 1}}, "layers[0].params"),
    (object(), "is not a fedray layer"),
])
def test_a_bad_layer_fails_in_one_line_before_any_data_is_read(entry, says):
    with pytest.raises(ConfigError) as exc:
        fedray.make_config(**BASE, layers=[entry])
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_a_user_layer_on_ray_gives_the_bits_and_the_record_of_the_local_runtime(ray_session):
    kw = {**BASE, "layers": ["examples.plugins.layers:TrafficLog"]}
    local = fedray.run(**kw, output=False)
    on_ray = fedray.run(**{**kw, "runtime": {"backend": "ray", "progress": False}}, output=False)
    np.testing.assert_array_equal(on_ray.centers, local.centers)
    assert on_ray.extras["layers"]["traffic-log"] == local.extras["layers"]["traffic-log"]
