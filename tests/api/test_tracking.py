"""output.trackers: what TensorBoard's EventAccumulator and MLflow's client read back from a run's files."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fedray
from fedray.core.errors import ConfigError
from tests import plugins

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")

ROUNDS = 6
BASE = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 8, "tol": 1e-12}},
            data={"dataset": "sklearn:digits"}, federation={"n_clients": 4, "rounds": ROUNDS},
            runtime={"backend": "local", "progress": False})


def _cfg(tmp_path, plots=False, **extra):
    return fedray.make_config(**BASE, output={"trackers": ["tensorboard", "mlflow"], "plots": plots,
                                              "mlflow_tracking_uri": (tmp_path / "mlruns").as_uri(),
                                              "mlflow_experiment": "tracking-test"}, **extra)


def _scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def _client(tmp_path):
    from mlflow.tracking import MlflowClient

    return MlflowClient((tmp_path / "mlruns").as_uri())


def _runs(tmp_path):
    client = _client(tmp_path)
    exp = client.get_experiment_by_name("tracking-test")
    return client, client.search_runs([exp.experiment_id])


def test_tensorboard_and_mlflow_hold_every_round_the_config_the_summary_and_the_plots(tmp_path):
    """Every round's objective is a TensorBoard scalar and an MLflow metric at step = round, with the
    history's values; the configuration is MLflow parameters and TensorBoard hyperparameters; the
    final metrics and the plots are there too."""
    out = tmp_path / "run"
    res = fedray.run(_cfg(tmp_path, plots=True), output=out)
    hist = res.history.set_index("round")
    train = hist["objective"].dropna()
    assert len(train) == ROUNDS - 1

    acc = _scalars(out / "tensorboard")
    events = acc.Scalars("objective")
    assert [e.step for e in events] == list(train.index)
    np.testing.assert_allclose([e.value for e in events], train.to_numpy(), rtol=1e-6)  # float32 in the file
    assert [e.step for e in acc.Scalars("center_shift")] == list(hist["center_shift"].dropna().index)
    assert acc.Scalars("final/ari")[0].value == pytest.approx(res.final["ari"], rel=1e-6)
    assert "plots/convergence" in acc.Tags()["images"]
    assert "_hparams_/session_start_info" in acc.Tags()["tensors"] + list(acc.summary_metadata)

    client, runs = _runs(tmp_path)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm.name"] == "kmeans"
    assert run.data.params["algorithm.params.n_clusters"] == "8"
    assert run.data.params["federation.rounds"] == str(ROUNDS)
    history = client.get_metric_history(run.info.run_id, "objective")
    assert [m.step for m in history] == list(train.index)
    assert [m.value for m in history] == list(train.to_numpy())  # float64 in MLflow: exact
    assert run.data.metrics["final.ari"] == res.final["ari"]
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "config.yaml", "plots"} <= arts
    assert "plots/convergence.png" in {a.path for a in client.list_artifacts(run.info.run_id, "plots")}


def test_a_resumed_run_continues_the_same_tensorboard_and_mlflow_runs(tmp_path):
    """Interrupted after round 2 (checkpoint after round 1), then resumed: one MLflow run (marked KILLED,
    then FINISHED), one TensorBoard run, and each round's value exactly once (round 2, computed twice, is
    neither lost nor doubled), equal to an uninterrupted run."""
    out = tmp_path / "run"
    cfg = _cfg(tmp_path, checkpoint={"every": 2})
    with pytest.raises(KeyboardInterrupt):
        fedray.run(cfg, output=out, on_round=[plugins.Interrupt(2)])
    client, runs = _runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "KILLED"
    run_id = runs[0].info.run_id

    res = fedray.resume(out)
    client, runs = _runs(tmp_path)
    assert [r.info.run_id for r in runs] == [run_id]
    assert runs[0].info.status == "FINISHED"
    train = res.history.set_index("round")["objective"].dropna()
    ref = fedray.run(**BASE).history.set_index("round")["objective"].dropna()
    assert list(train.to_numpy()) == list(ref.to_numpy())
    history = client.get_metric_history(run_id, "objective")
    assert [m.step for m in history] == list(ref.index)  # round 2, computed twice, sent once
    assert [m.value for m in history] == list(ref.to_numpy())

    assert [p.name for p in (out / "tensorboard").iterdir() if p.is_dir()] == []  # one run: one folder
    events = _scalars(out / "tensorboard").Scalars("objective")
    assert [e.step for e in events] == list(ref.index)
    np.testing.assert_allclose([e.value for e in events], ref.to_numpy(), rtol=1e-6)


def test_a_tracker_that_is_not_installed_fails_at_once_with_the_pip_command(tmp_path, monkeypatch):
    """With mlflow not importable, the configuration is refused before anything runs, in one line
    naming the extra to install."""
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed: importlib cannot find it
    with pytest.raises(ConfigError, match=r'mlflow asked for but not installed; install it with: '
                                          r'pip install "fedray\[tracking\]"') as info:
        fedray.make_config(**BASE, output={"trackers": ["mlflow"]})
    assert "\n" not in str(info.value)
    assert not (tmp_path / "mlruns").exists()


def test_trackers_need_an_output_folder_and_are_named_once(tmp_path):
    """No output folder, or a tracker named twice, is a one-line configuration error."""
    with pytest.raises(ConfigError, match="output.trackers: .* need an output folder"):
        fedray.run(**BASE, **{"output.trackers": ["tensorboard"]})
    with pytest.raises(ConfigError, match="each tracker at most once"):
        fedray.make_config(**BASE, output={"trackers": ["tensorboard", "tensorboard"]})
    with pytest.raises(ConfigError, match="output.trackers"):
        fedray.make_config(**BASE, output={"trackers": ["wandb"]})
    with pytest.raises(ConfigError) as info:  # the value once, not twice ("...; got [...]; got [...]")
        fedray.make_config(**BASE, output={"trackers": ["mlflow", "mlflow"]})
    assert str(info.value).count("['mlflow', 'mlflow']") == 1


def test_describe_output_lists_the_tracking_options(capsys):
    """`fedray describe output` lists trackers and the MLflow options."""
    from fedray.tools.cli import main

    assert main(["describe", "output"]) in (0, None)
    text = capsys.readouterr().out
    for key in ("output.trackers", "output.mlflow_tracking_uri", "output.mlflow_experiment"):
        assert key in text


def test_a_tracked_run_does_not_import_torch(tmp_path):
    """TensorBoard files come from tensorboard's own writer: a tracked k-means run never imports torch
    (a fresh interpreter)."""
    import subprocess

    code = ("import sys, fedray; fedray.run(algorithm={'name': 'kmeans'}, data={'dataset': 'sklearn:iris'}, "
            "federation={'n_clients': 3, 'rounds': 3}, runtime={'backend': 'local', 'progress': False}, "
            f"**{{'output.trackers': ['tensorboard', 'mlflow'], 'output.plots': False, "
            f"'output.mlflow_tracking_uri': {(tmp_path / 'mlruns').as_uri()!r}}}, output={str(tmp_path / 'run')!r}); "
            "assert 'torch' not in sys.modules, 'torch was imported'; "
            "assert 'tensorboard' in sys.modules and 'mlflow' in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_tracker_that_fails_during_a_run_is_named_and_the_run_goes_on(tmp_path, caplog):
    """The MLflow store vanishes after round 2: a warning names the MLflow tracker, the run finishes with all
    its rounds, and TensorBoard still gets every round."""
    import logging
    import shutil

    def remove_store(row):
        if row["round"] == 2:
            shutil.rmtree(tmp_path / "mlruns")

    with caplog.at_level(logging.WARNING, logger="fedray.api.tracking"):
        res = fedray.run(_cfg(tmp_path), output=tmp_path / "run", on_round=[remove_store])
    assert len(res.history) == ROUNDS
    assert any("MLflowTracker failed" in r.getMessage() and "goes on without it" in r.getMessage()
               for r in caplog.records)
    steps = [e.step for e in _scalars(tmp_path / "run" / "tensorboard").Scalars("objective")]
    assert steps == list(range(1, ROUNDS))


def test_an_unreachable_mlflow_server_fails_the_run_after_one_retry_not_minutes_of_them(tmp_path, monkeypatch):
    """Opening the MLflow tracker on an HTTP server that is not there asks MLflow for one retry (its default,
    seven with exponential back-off, kept a typo in the port waiting about four minutes), then fails in one
    line naming the URI; the user's own MLFLOW_HTTP_REQUEST_MAX_RETRIES is left as it was."""
    import mlflow.store.tracking.rest_store as rest_store
    import mlflow.utils.rest_utils as rest_utils
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT

    seen = []

    def refused(*args, **kwargs):
        seen.append((MLFLOW_HTTP_REQUEST_MAX_RETRIES.get(), MLFLOW_HTTP_REQUEST_TIMEOUT.get()))
        raise ConnectionError("connection refused")

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    monkeypatch.setattr(rest_utils, "http_request", refused)
    monkeypatch.setattr(rest_store, "http_request", refused)
    uri = "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match=r"output.mlflow_tracking_uri: MLflow cannot use 'http://127.0.0.1:9'"
                       ) as info:
        fedray.run(fedray.make_config(**BASE, output={"trackers": ["mlflow"], "mlflow_tracking_uri": uri}),
                   output=tmp_path / "run")
    assert "\n" not in str(info.value)
    assert seen and all(retries <= 1 and timeout <= 10 for retries, timeout in seen)
    assert not (tmp_path / "run").exists()  # the error comes before the output folder is made
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


@pytest.mark.parametrize("entry", ["run", "session"])
def test_a_bad_mlflow_uri_fails_before_the_clients_are_built_and_writes_nothing(tmp_path, monkeypatch, entry):
    """A tracking URI MLflow cannot use is a one-line ConfigError raised before the clients are built
    (fedray.run) or before the output folder is claimed (Session.run): no output folder, no partial
    outputs, no tracking.json."""
    import fedray.api.run as api_run
    from fedray.api.session import Session

    cfg = fedray.make_config(**BASE, output={"trackers": ["tensorboard", "mlflow"],
                                             "mlflow_tracking_uri": "nosuchscheme://x/y"})
    out = tmp_path / "run"
    if entry == "run":
        def no_clients(*a, **k):
            raise AssertionError("the clients were built before the tracking URI was checked")

        monkeypatch.setattr(api_run, "Session", no_clients)
        with pytest.raises(ConfigError, match=r"^output.mlflow_tracking_uri: MLflow cannot use 'nosuchscheme") as info:
            fedray.run(cfg, output=out)
    else:
        with Session(cfg) as session, pytest.raises(ConfigError, match=r"^output.mlflow_tracking_uri") as info:
            session.run(output=out)
    assert "\n" not in str(info.value)
    assert not out.exists()


def test_tracking_json_is_written_when_the_trackers_open_and_close_not_every_round(tmp_path, monkeypatch):
    """tracking.json is written twice in a run (when the trackers open: the MLflow run's id; when they
    close: the last round sent), not once per round, and ends with the last round and the run's id."""
    import json

    from fedray.api.tracking import STATE_FILE, Trackers

    writes = []
    original = Trackers._write_state

    def counted(self):
        writes.append(dict(self.state))
        original(self)

    monkeypatch.setattr(Trackers, "_write_state", counted)
    out = tmp_path / "run"
    res = fedray.run(_cfg(tmp_path), output=out)
    assert len(writes) == 2
    state = json.loads((out / STATE_FILE).read_text())
    assert state["last_round"] == int(res.history["round"].max())
    _, runs = _runs(tmp_path)
    assert state["mlflow_run_id"] == runs[0].info.run_id
