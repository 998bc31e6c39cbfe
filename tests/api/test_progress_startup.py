"""Progress of the steps whose length is not known (start-up, select-k, sweeps) and the headlines
of a run's table. Properties held: a long step is announced when it starts and keeps reporting
while it blocks; ``progress=False`` prints nothing; the table and summary.json show start-up apart
from the run and say what an accuracy was measured on; config errors are one line."""
from __future__ import annotations

import io
import time

import numpy as np
import pytest

import fedray
from fedray.api import progress
from fedray.api.progress import Activity, showing


def _lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "fedray.api.progress"]


def _wait_for(seen, guard: float = 120.0) -> float:
    """Block (as ray.init blocks the caller) until ``seen()`` holds; the seconds it took. The guard only
    stops a hang: the test waits for the event, not for a length of time."""
    t0 = time.perf_counter()
    while not seen():
        assert time.perf_counter() - t0 < guard, "the reporting thread never wrote its line"
        time.sleep(0.02)
    return time.perf_counter() - t0


def test_a_blocking_step_is_announced_at_once_and_reported_while_it_blocks(caplog, monkeypatch):
    monkeypatch.setattr(Activity, "every", 0.3)
    with caplog.at_level("INFO", logger="fedray.api.progress"):
        act = Activity("start-up")
        t0 = time.perf_counter()
        act.stage("starting Ray on this machine", "Ray")
        assert _lines(caplog) == ["start-up: starting Ray on this machine ..."]  # before the step blocks
        blocked = _wait_for(lambda: sum("still starting Ray" in ln for ln in _lines(caplog)) >= 2)
        act.close("ready")
        whole = time.perf_counter() - t0
    lines = _lines(caplog)
    assert lines[0] == "start-up: starting Ray on this machine ..."
    assert sum("still starting Ray" in ln for ln in lines) >= 2 and lines[-1] == "start-up: ready"
    assert blocked <= act.stages["Ray"] <= whole  # the step's own seconds, the whole of its blocking


def test_progress_false_and_showing_false_print_nothing(caplog, capsys):
    with caplog.at_level("INFO", logger="fedray.api.progress"):
        Activity("start-up", False).stage("x")
        with showing(False):
            a = Activity("start-up")
            a.stage("y")
            a.close("done")
            bar = progress.Progress("kmeans", 3)
            bar.update({"phase": "train"})
            bar.close()
    assert not _lines(caplog) and not capsys.readouterr().err


def test_without_a_logging_handler_lines_go_to_standard_error(monkeypatch, capsys):
    """A plain script configures no logging: the lines must still appear (on stderr)."""
    monkeypatch.setattr(progress.log, "hasHandlers", lambda: False)
    a = Activity("start-up")
    a.stage("reading sklearn:iris into 4 clients")
    a.close("ready in 0.1 s")
    err = capsys.readouterr().err
    assert "start-up: reading sklearn:iris into 4 clients ..." in err and "start-up: ready in 0.1 s" in err


def test_on_a_terminal_one_line_is_redrawn_and_an_inner_step_writes_into_it(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    monkeypatch.setattr("sys.stderr", out)
    outer = Activity("select-k")
    outer.stage("K=3 (2 of 4)")
    inner = Activity("start-up")
    assert inner.mode == "inner"
    inner.stage("starting Ray")
    time.sleep(0.6)
    assert outer.text == "K=3 (2 of 4) · start-up: starting Ray"
    deeper = Activity("data")
    deeper.stage("checks")
    assert outer.text == "K=3 (2 of 4) · start-up: starting Ray · data: checks"
    deeper.close()
    inner.close("ready")
    assert outer.text == "K=3 (2 of 4)"
    outer.close("done")
    text = out.getvalue()
    assert (
        "\rselect-k: K=3 (2 of 4) · start-up: starting Ray ... 0 s" in text
        and text.endswith("\n")
        and text.rstrip().endswith("\rselect-k: done")
    )


def test_session_start_up_reports_each_step_around_ray(ray_session, caplog, monkeypatch):
    """The start-up steps wrap the real calls: a slow Ray start is reported while it blocks."""
    import fedray.api.session as session_mod

    real = session_mod.ensure_ray
    blocked: list[float] = []

    def slow(*args, **kwargs):  # a Ray start that lasts until the reporting thread has said so
        blocked.append(_wait_for(lambda: any("still starting Ray" in ln for ln in _lines(caplog))))
        return real(*args, **kwargs)

    monkeypatch.setattr(session_mod, "ensure_ray", slow)
    monkeypatch.setattr(Activity, "every", 0.25)
    with caplog.at_level("INFO", logger="fedray.api.progress"):
        res = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3}}, data={"dataset": "sklearn:iris"},
                         federation={"n_clients": 4}, runtime={"backend": "ray", "num_cpus": 2}, output=False)
    lines = _lines(caplog)
    at = {k: next(i for i, ln in enumerate(lines) if k in ln) for k in (
        "start-up: reading sklearn:iris into 4 clients", "start-up: starting Ray", "still starting Ray",
        "start-up: starting the client actors", "start-up: ready in", "kmeans: running")}
    assert list(at.values()) == sorted(at.values())
    steps = res.summary["startup_steps"]
    assert steps["Ray"] >= blocked[0] > 0 and set(steps) >= {"data", "Ray", "client actors", "data checks"}
    table = res.table()
    assert "start-up (once a session)" in table and "wall time" not in table
    assert f"{res.summary['startup_s']:.2f} s" in table


def test_the_table_and_summary_say_what_the_accuracy_was_measured_on():
    pytest.importorskip("torch")
    res = fedray.run(algorithm={"name": "fedavg", "params": {"epochs": 1}},
                     data={"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [40, 80]}},
                     federation={"n_clients": 8, "fraction": 0.5, "rounds": 2},
                     runtime={"backend": "local", "progress": False}, output=False)
    c = res.clients
    assert (c["n_train"] + c["n_test"] == c["n_samples"]).all()
    assert (c["n_test"] == np.maximum(np.round(0.15 * c["n_samples"]), 1)).all()
    on = res.summary["accuracy_measured_on"]
    assert on == {"clients": 8, "of_clients": 8, "test_rows": int(c["n_test"].sum()),
                  "train_rows": int(c["n_train"].sum())}
    assert res.final["accuracy"] == pytest.approx(float(c["accuracy"].mean()))
    h = res.history
    assert (h["clients_trained"] == 4).all() and (h["clients_evaluated"] == 8).all()
    last = res.summary["last_round_accuracy"]
    assert last == {"round": 1, "accuracy": float(h["accuracy"].iloc[-1])}
    table = res.table()
    assert f"accuracy (final)            {res.final['accuracy']:.4f}" in table
    assert f"{on['test_rows']} test rows" in table and "accuracy, round 1" in table


def test_tunes_last_report_carries_the_final_accuracy():
    from fedray.analysis.tune import final_report

    rep = final_report({"round": 9, "accuracy": 0.28, "objective": 3.0}, {"accuracy": 0.20, "objective": 2.0})
    assert rep["accuracy"] == 0.20 and rep["round_accuracy"] == 0.28 and rep["final_accuracy"] == 0.20
    assert rep["objective"] == 3.0 and rep["final_objective"] == 2.0  # only the accuracy is replaced


@pytest.mark.parametrize("kwargs, line", [
    ({"federation": {"n_client": 3}}, "federation.n_client: unknown parameter (did you mean 'n_clients'"),
    ({"runtme": {}}, "runtme: unknown parameter (did you mean 'runtime'?)"),
    ({"algorithm": {"name": "kmeans", "params": {"n_cluster": 3}}},
     "algorithm.params (kmeans).n_cluster: unknown parameter (did you mean 'n_clusters'?); got 3"),
    ({"federation": {"fraction": 1.5, "rounds": 0}}, "2 invalid values: federation.fraction: Input should be less "
     "than or equal to 1; got 1.5 | federation.rounds"),
])
def test_configuration_errors_are_one_line_with_near_names(kwargs, line):
    with pytest.raises(fedray.ConfigError) as err:
        fedray.make_config(**kwargs)
    assert line in str(err.value) and "\n" not in str(err.value)


def test_a_run_that_fails_before_writing_leaves_no_folder(tmp_path):
    (tmp_path / "data").mkdir()
    out = tmp_path / "out"
    with pytest.raises(fedray.FedrayError):
        fedray.run(data={"dataset": "benchmark:sipu/s1", "data_dir": str(tmp_path / "data")},
                   runtime={"backend": "local", "progress": False}, output=out)
    assert not out.exists()


def test_default_output_folders_are_new_for_each_run(tmp_path, monkeypatch):
    from fedray.tools.cli import _default_out

    monkeypatch.chdir(tmp_path)
    first = _default_out("kmeans")
    first.mkdir(parents=True)
    second = _default_out("kmeans")
    assert second != first and second.name.startswith(first.name)
