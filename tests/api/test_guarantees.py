"""Guarantees that must survive any refactoring: misbehaving plug-ins, misuse of the Python API
and of the estimators, Ctrl-C and kill during a Ray run, a full disk, and ``--resume`` with
another configuration each end in one clear line, never a traceback, a hang or lost data."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.api import checkpoint, outputs
from fedray.api import run as run_api
from fedray.core.errors import FedrayError, OutputError
from fedray.tools.cli import main
from tests import plugins as test_plugins

SMALL = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}}, "data": {"dataset": "sklearn:iris"},
         "federation": {"n_clients": 4, "rounds": 3}, "runtime": {"backend": "local", "progress": False},
         "output": {"plots": False}}
CLI = [sys.executable, "-c", "import sys; from fedray.tools.cli import main; sys.exit(main())"]

PLUGINS = '''


def explode(payload, shared, client):
    raise ZeroDivisionError("client code divided by zero")


class Forever(Mean):
    last = 10 ** 9


class ClientRaises(Mean):
    fn = staticmethod(explode)


class AggregateRaises(Mean):
    def aggregate(self, ctx, replies):
        raise KeyError("missing")


class TasksNotAMapping(Mean):
    def configure_round(self, ctx):
        return 42


class MetricsNotAMapping(Mean):
    def aggregate(self, ctx, replies):
        super().aggregate(ctx, replies)
        return "not a dict"


class ResultNotAMapping(Mean):
    def result(self):
        return 7
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A plug-in module (``fr_guarantees``) in a folder on sys.path; returns that folder."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    test_plugins.write_module(folder, "fr_guarantees", PLUGINS)
    (folder / "fr_broken_import.py").write_text("import numpy\nraise RuntimeError('broken at import')\n")
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in ("fr_guarantees", "fr_broken_import"):
        sys.modules.pop(name, None)


@pytest.fixture
def checkpoint_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(checkpoint.KEY_ENV, raising=False)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert isinstance(exc, FedrayError) and text and "\n" not in text, repr(exc)
    return text


# --- misbehaving plug-ins ----------------------------------------------------------------------
@pytest.mark.parametrize("name, message", [
    ("fr_guarantees:ClientRaises", "ZeroDivisionError: client code divided by zero"),
    ("fr_guarantees:AggregateRaises", "aggregate raised KeyError: 'missing' in round 0"),
    ("fr_guarantees:TasksNotAMapping", "configure_round must return None or a mapping"),
    ("fr_guarantees:MetricsNotAMapping", "aggregate must return a mapping of metrics"),
    ("fr_guarantees:ResultNotAMapping", "result must return a mapping"),
    ("fr_broken_import:X", "RuntimeError: broken at import"),
    ("fr_guarantees:Missing", "has no attribute 'Missing'"),
])
def test_a_misbehaving_plugin_is_one_line(plugins, name, message):
    with pytest.raises(FedrayError) as err:
        fedray.run({**SMALL, "algorithm": {"name": name}})
    assert message in _one_line(err.value)


def test_a_misbehaving_plugin_on_the_cli_is_one_line_without_traceback(plugins, tmp_path):
    proc = subprocess.run([*CLI, "run", "--set", "algorithm.name=fr_guarantees:AggregateRaises", "--set",
                           "runtime.backend=local", "--set", "federation.n_clients=4", "--out", str(tmp_path / "o"),
                           "-q"], cwd=plugins, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fedray: error: algorithm") and "aggregate raised KeyError" in last
    assert "Traceback" not in proc.stderr


# --- misuse of the Python API -------------------------------------------------------------------
@pytest.mark.parametrize("call, message", [
    (lambda: fedray.run(42), "config: expected an ExperimentConfig, a mapping or the path"),
    (lambda: fedray.run("no-such-config.yaml"), "does not exist"),
    (lambda: fedray.run(SMALL, output=5), "output: expected the path of a folder"),
    (lambda: fedray.run(SMALL, overrides=["federation.n_clients"]), "expected KEY=VALUE"),
    (lambda: fedray.run(SMALL, bogus=1), "bogus: unknown parameter"),
    (lambda: fedray.run(SMALL, federation={"n_clients": 0}), "federation.n_clients"),
    (lambda: fedray.Session(fedray.make_config(SMALL)).run("no-such-algorithm"), "unknown algorithm"),
    (lambda: run_api.resume(Path("no-such-folder")), "no checkpoint.pkl there"),
])
def test_misuse_of_the_python_api_is_one_line(call, message):
    with pytest.raises(FedrayError) as err:
        call()
    assert message in str(err.value) and "Traceback" not in str(err.value)


# --- misuse of the estimators ---------------------------------------------------------------------
@pytest.mark.parametrize("misuse, message", [
    (lambda K: K(n_clusters=2, n_clients=2).fit(np.arange(10.0)), "expected a 2-D array"),
    (lambda K: K(n_clusters=2, n_clients=2).fit([["a", "b"]] * 6), "strings are not numeric"),
    (lambda K: K(n_clusters=2, n_clients=2).fit(np.array([[np.nan, 1.0]] * 10)), "non-finite value nan"),
    (lambda K: K(n_clusters=0, n_clients=2).fit(np.random.default_rng(0).random((20, 2))), "n_clusters"),
    (lambda K: K(n_clusters=2, n_clients=2).fit(np.random.default_rng(0).random((20, 3))).predict(np.zeros((2, 2))),
     "X has 2 features, but FederatedKMeans is expecting 3"),
])
def test_misuse_of_the_estimators_is_one_line(misuse, message):
    from fedray.estimators import FederatedKMeans

    with pytest.raises(FedrayError) as err:
        misuse(FederatedKMeans)
    assert message in _one_line(err.value)


def test_an_unfitted_estimator_says_so():
    from sklearn.exceptions import NotFittedError

    from fedray.estimators import FederatedKMeans

    with pytest.raises(NotFittedError, match="not fitted yet"):
        FederatedKMeans(n_clusters=2).predict(np.zeros((3, 2)))


# --- a full disk -------------------------------------------------------------------------------------
def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_writing_outputs_is_one_line_and_overwrite_cleans_up(tmp_path, monkeypatch):
    out = tmp_path / "out"
    with monkeypatch.context() as m:
        m.setattr(pd.DataFrame, "to_parquet", _disk_full)
        with pytest.raises(OutputError) as err:
            fedray.run(SMALL, output=out)
    assert "No space left on device" in _one_line(err.value) and str(out) in str(err.value)
    # what it wrote before the disk filled up is fedray's, so a rerun with --overwrite may replace it
    fedray.run(SMALL, output=out, **{"output.overwrite": True})
    assert (
        json.loads((out / "summary.json").read_text()).get("status") != "failed" and (out / "rounds.parquet").is_file()
    )


def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch,
                                                                                        checkpoint_key):
    out = tmp_path / "out"
    saves = []
    orig = checkpoint._write_private

    def fills_up(path, data):
        saves.append(path)
        if len(saves) > 1:
            _disk_full()
        orig(path, data)

    monkeypatch.setattr(checkpoint, "_write_private", fills_up)
    with pytest.raises(OutputError, match="checkpoint after round 1 cannot be written") as err:
        fedray.run(SMALL, output=out, checkpoint={"every": 1})
    _one_line(err.value)
    assert checkpoint.load(out)["server"]["round"] == 1  # the first checkpoint is intact


# --- --resume with another configuration ----------------------------------------------------------
def test_resume_with_another_configuration_is_refused_in_one_line(tmp_path, checkpoint_key, capsys):
    out = tmp_path / "run"
    fedray.run(SMALL, output=out, checkpoint={"every": 1})
    other = tmp_path / "other.yaml"
    other.write_text(fedray.make_config(SMALL, federation={"n_clients": 6}).to_yaml())
    assert main(["run", str(other), "--resume", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "federation.n_clients (4 in the checkpoint, 6 given)" in err and "\n" not in err
    assert main(["run", "--resume", str(out), "--set", "seed=9", "-q"]) == 2
    assert "seed (0 in the checkpoint, 9 given)" in capsys.readouterr().err
    assert main(["run", "--resume", str(out), "--overwrite", "-q"]) == 2
    assert "--overwrite cannot be given with --resume" in capsys.readouterr().err
    same = tmp_path / "same.yaml"
    same.write_text(fedray.make_config(SMALL).to_yaml())
    assert main(["run", str(same), "--resume", str(out), "-q"]) == 0  # the same configuration: resumed


# --- Ctrl-C and kill during a Ray run ------------------------------------------------------------------
def _start_forever_run(ray_session, plugins: Path, out: Path, env: dict[str, str]) -> subprocess.Popen:
    address = ray_session.get_runtime_context().gcs_address
    args = ["run", "--set", "algorithm.name=fr_guarantees:Forever", "--set", "federation.n_clients=4", "--set",
            "federation.rounds=100000", "--set", f"runtime.address={address}", "--set", "checkpoint.every=1",
            "--set", "output.plots=false", "--out", str(out), "-q"]
    proc = subprocess.Popen([*CLI, *args], cwd=plugins, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    ckpt = out / "checkpoint" / checkpoint.FILENAME
    deadline = time.monotonic() + 240  # a guard against a hang, not a measurement
    while not ckpt.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run never checkpointed: {proc.communicate()[1][-2000:]}")
        time.sleep(0.2)
    return proc


def test_ctrl_c_during_a_ray_run_stops_in_one_line_and_keeps_what_it_had(ray_session, plugins, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = _start_forever_run(ray_session, plugins, out, env)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "fedray: interrupted" and "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("KeyboardInterrupt")
    assert summary["rounds"] >= 1 and len(pd.read_parquet(out / "rounds.parquet")) == summary["rounds"]
    assert json.loads((out / outputs.MARKER).read_text())["pid"] is None  # the folder is free again


def test_a_killed_ray_run_leaves_a_valid_checkpoint_and_a_folder_that_is_not_taken_silently(
        ray_session, plugins, tmp_path, checkpoint_key, capsys):
    out = tmp_path / "out"
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = _start_forever_run(ray_session, plugins, out, env)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9: no handler runs
    proc.communicate(timeout=120)
    assert checkpoint.load(out)["server"]["round"] >= 1  # written whole (temporary file renamed), authenticated
    local = ["--set", "algorithm.name=kmeans", "--set", "data.dataset=sklearn:iris", "--set", "federation.n_clients=4",
             "--set", "federation.rounds=2", "--set", "runtime.backend=local", "--out", str(out), "-q"]
    assert main(["run", *local]) == 2
    assert "is not empty" in capsys.readouterr().err
    # the marker names a dead process: --overwrite may replace what the killed run wrote, all of it
    assert main(["run", *local, "--overwrite"]) == 0
    assert not (out / "checkpoint").exists() and json.loads((out / "summary.json").read_text())["rounds"] == 2
