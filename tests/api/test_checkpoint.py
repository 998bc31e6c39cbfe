"""Checkpoint and resume: a run interrupted after a checkpoint and resumed ends exactly like
the run that was not interrupted (centres, history, failures, messages, client state)."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.algorithms.kmeans import FederatedKMeans, lloyd_stats
from fedray.api import checkpoint
from fedray.api import run as run_api
from fedray.api.runner import Runner
from fedray.api.session import Session
from fedray.core.contract import Task
from fedray.core.errors import ConfigError
from fedray.core.stats import Stats, total
from fedray.tools.cli import main
from tests import plugins

BASE = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box", "tol": 1e-12,
                                                     "max_rounds": 9}},
            data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 50}, "scale": "standard"},
            federation={"n_clients": 8, "fraction": 0.5, "rounds": 9}, seed=3, checkpoint={"every": 2},
            **{"output.plots": False})


pytestmark = pytest.mark.quiet_log(logging.ERROR)


def counting_stats(payload: None, centers: np.ndarray, client) -> Stats:
    """Lloyd statistics plus the number of rounds this client took part in (kept in its state)."""
    client.state["visits"] = client.state.get("visits", 0) + 1
    return Stats(**lloyd_stats(payload, centers, client), visits=np.array(float(client.state["visits"])))


class CountingKMeans(FederatedKMeans):
    """Federated k-means whose clients keep state, to check that checkpoints carry it."""

    def configure_round(self, ctx):
        tasks = super().configure_round(ctx)
        if tasks is None:
            return None
        task = Task(counting_stats, None, self.centers)
        return {cid: task for cid in tasks}

    def aggregate(self, ctx, replies):
        metrics = super().aggregate(ctx, replies)
        metrics["visits"] = float(total(r.update for r in replies)["visits"])
        return metrics



def _run_counting(cfg, out):
    with Session(cfg) as s:
        alg = CountingKMeans(s.make_algorithm().params, s.info, cfg.seed)
        return s.run(alg, output=out)


def _same(a, b):
    np.testing.assert_array_equal(a.centers, b.centers)
    pd.testing.assert_frame_equal(a.history.drop(columns="wall_s"), b.history.drop(columns="wall_s"))
    pd.testing.assert_frame_equal(a.failures, b.failures)
    assert a.final == b.final


def test_interrupted_and_resumed_run_equals_the_uninterrupted_one(tmp_path):
    cfg = fedray.make_config(runtime={"backend": "local"}, faults={"crash_probability": 0.25},
                             **{**BASE, "output.messages": True})
    full = _run_counting(cfg, tmp_path / "full")
    assert full.history["clients_failed"].sum() > 0 and full.history["visits"].iloc[-1] > 4
    with plugins.interrupt_after_checkpoint(3), pytest.raises(KeyboardInterrupt):
        _run_counting(cfg, tmp_path / "cut")
    # the interrupted run left what it had: the 4 rounds done, marked failed
    assert len(pd.read_parquet(tmp_path / "cut" / "rounds.parquet")) == 4
    assert json.loads((tmp_path / "cut" / "summary.json").read_text())["status"] == "failed"
    saved = checkpoint.load(tmp_path / "cut")
    assert saved["server"]["round"] == 4 and any(st.get("visits") for st in saved["clients"].values())
    resumed = run_api.resume(tmp_path / "cut")
    _same(resumed, full)  # client visit counters included: client state came back from the checkpoint
    pd.testing.assert_frame_equal(resumed.messages, full.messages)
    assert resumed.output_dir == tmp_path / "cut"
    assert (tmp_path / "cut" / "messages.parquet").exists() and (tmp_path / "cut" / "failures.parquet").exists()


def test_cli_resume_on_ray_equals_an_uninterrupted_local_run(ray_session, tmp_path, capsys):
    cfg = fedray.make_config(runtime={"backend": "ray", "clients_per_actor": 4}, **BASE)
    with plugins.interrupt_after_checkpoint(1), pytest.raises(KeyboardInterrupt):
        fedray.run(cfg, output=tmp_path / "cut")
    assert main(["run", "--resume", str(tmp_path / "cut"), "-q"]) == 0
    assert "outputs:" in capsys.readouterr().out
    resumed = pd.read_parquet(tmp_path / "cut" / "rounds.parquet")
    local = fedray.run(fedray.make_config(cfg, runtime={"backend": "local"}), output=tmp_path / "local")
    pd.testing.assert_frame_equal(resumed.drop(columns="wall_s"), local.history.drop(columns="wall_s"))
    np.testing.assert_array_equal(np.load(tmp_path / "cut" / "model.npz")["centers"], local.model["centers"])


def test_checkpoint_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match=r"checkpoint.every=2 needs a folder: set output.directory"):
        fedray.run(runtime={"backend": "local"}, **BASE)
    with pytest.raises(ConfigError, match=r"--resume .*no checkpoint.pkl there"):
        run_api.resume(tmp_path)
    bad = tmp_path / "checkpoint.pkl"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(ConfigError, match=r"is not a readable checkpoint"):
        run_api.resume(tmp_path)
    assert main(["run", "--resume", str(Path(tmp_path) / "nowhere")]) == 2


FCM = {"n_clusters": 3, "m": 2.0, "tol": 1e-12, "max_rounds": 9}


def test_a_run_given_another_algorithm_is_saved_and_resumed_as_that_algorithm(tmp_path):
    """``Session.run("federated-fcm", ...)`` on a session configured for k-means: config.yaml, the summary
    and the checkpoint name federated-fcm and its parameters, so new parameters for it are accepted on
    resume (they were checked against k-means', and refused, while the config named the session's)."""
    cfg = fedray.make_config(runtime={"backend": "local"}, **BASE)
    with plugins.interrupt_after_checkpoint(3), pytest.raises(KeyboardInterrupt), Session(cfg) as s:
        s.run("federated-fcm", FCM, output=tmp_path / "cut")
    saved = checkpoint.load(tmp_path / "cut")["config"]["algorithm"]
    assert saved["name"] == "federated-fcm" and saved["params"]["m"] == 2.0
    resumed = run_api.resume(tmp_path / "cut", algorithm_params={"m": 1.5})
    assert resumed.config.algorithm.name == "federated-fcm" and resumed.config.algorithm.params["m"] == 1.5
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["config"]["algorithm"]["name"] == "federated-fcm"
    with Session(cfg) as s:  # the session's own algorithm: its config section is kept as given
        assert s.run(output=tmp_path / "own").config.algorithm == cfg.algorithm


def test_a_checkpoint_whose_config_names_another_algorithm_takes_the_run_algorithms_params(tmp_path):
    """Checkpoints written before the run's config named the algorithm it ran: on resume with new
    parameters, the saved section is replaced by the algorithm in the checkpoint's state."""
    cfg = fedray.make_config(runtime={"backend": "local"}, **BASE)
    with mock.patch.object(Runner, "algorithm_entry", lambda self, alg: self.session.config.algorithm), \
            plugins.interrupt_after_checkpoint(3), pytest.raises(KeyboardInterrupt), Session(cfg) as s:
        s.run("federated-fcm", FCM, output=tmp_path / "old")
    assert checkpoint.load(tmp_path / "old")["config"]["algorithm"]["name"] == "kmeans"
    resumed = run_api.resume(tmp_path / "old", algorithm_params={"m": 1.5})
    assert resumed.config.algorithm.name == "federated-fcm" and resumed.config.algorithm.params["m"] == 1.5
    assert resumed.history["round"].iloc[-1] >= 4
