"""Progress and stop reasons: a run says how far it is and why it ended.

* Without a terminal (a pipe, a CI log) the CLI logs about 20 progress lines, each
  with the round total, an ETA and the round's headline metrics; ``-q`` silences them.
* The total is the round cap, or the algorithm's own budget when smaller.
* A run ended by the round cap, not by the algorithm, warns in one line and records
  ``stop_reason: round cap``, whatever the algorithm (with a budget or a plug-in without
  one); an unset ``federation.rounds`` is the algorithm's budget, so nothing is cut.
"""
from __future__ import annotations

import re
import subprocess
import sys

import json

import numpy as np
import pytest
import yaml

import fedray
from fedray.algorithm import Algorithm
from fedray.stats import Stats, total

CLI = [sys.executable, "-c", "import sys; from fedray.cli import main; sys.exit(main())"]


def test_non_tty_runs_log_progress_lines_with_a_total(tmp_path):
    args = ["run", "--set", "runtime.backend=local", "--set", "algorithm.name=federated-fcm",
            "--set", "algorithm.params.tol=1e-300", "--set", "algorithm.params.max_rounds=200",
            "--set", "algorithm.params.objective=true", "--set", "federation.rounds=60", "--out", str(tmp_path / "a")]
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if re.match(r"federated-fcm: round \d+/60 \(\d+%\)", ln)]
    assert 15 <= len(lines) <= 25  # about 20 lines whatever the length of the run
    assert all("ETA" in ln for ln in lines) and "objective" in lines[-1] and "center_shift" in lines[-1]
    quiet = subprocess.run([*CLI, "run", "-q", *args[1:-1], str(tmp_path / "b")], capture_output=True, text=True,
                           timeout=120)
    assert quiet.returncode == 0 and "round 1/60" not in quiet.stderr


def test_the_total_is_the_algorithms_budget_when_smaller(tmp_path):
    proc = subprocess.run([*CLI, "run", "--set", "runtime.backend=local", "--set", "algorithm.params.max_rounds=9",
                           "--set", "algorithm.params.tol=1e-300", "--out", str(tmp_path / "a")],
                          capture_output=True, text=True, timeout=120)
    assert "kmeans: round 1/10 (10%)" in proc.stderr  # 9 training rounds and the k-FED start


def test_a_run_ended_by_the_round_cap_says_so(caplog):
    with caplog.at_level("WARNING", logger="fedray"):
        capped = fedray.run(algorithm={"name": "federated-fcm", "params": {"tol": 1e-300, "max_rounds": 50}},
                            federation={"rounds": 5}, runtime={"backend": "local", "progress": False}, output=False)
    assert capped.summary["stop_reason"] == "round cap" and capped.summary["converged"] is False
    assert any("stopped at the round cap federation.rounds=5" in r.getMessage() for r in caplog.records)
    done = fedray.run(runtime={"backend": "local", "progress": False}, output=False)
    assert done.summary["stop_reason"] == "converged"


def _count(x, shared, client):
    """Client task of the plug-in below: its number of rows."""
    return Stats(n=np.array(float(client.data.X.shape[0])))


class Forever(Algorithm):
    """A plug-in without a budget or a stopping rule of its own."""

    def configure_round(self, ctx):
        return {c: fedray.Task(_count, None) for c in ctx.sampled}

    def aggregate(self, ctx, replies):
        return {"n": float(total(r.update for r in replies)["n"])}

    def result(self):
        return {}


def _cap_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "round cap" in r.getMessage()]


@pytest.mark.parametrize("algorithm", [
    {"name": "kmeans", "params": {"tol": 1e-300, "max_rounds": 50}},
    {"name": "fedkmeans", "params": {"max_rounds": 50}},
    {"name": "federated-fcm", "params": {"tol": 1e-300, "max_rounds": 50, "init": "random-box"}},
    {"name": "tests.test_progress:Forever"},
])
def test_the_cap_ends_any_run_with_one_warning_line_and_its_stop_reason(algorithm, caplog, tmp_path):
    with caplog.at_level("WARNING", logger="fedray"):
        res = fedray.run(algorithm=algorithm, federation={"n_clients": 4, "rounds": 4},
                         runtime={"backend": "local", "progress": False}, output=tmp_path / "o")
    assert res.summary["rounds"] == 4 and res.summary["stop_reason"] == "round cap"
    assert len(_cap_warnings(caplog)) == 1
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["stop_reason"] == "round cap" and summary["round_cap"] == 4


def test_a_plugin_without_a_budget_is_capped_at_100_rounds_and_says_so(caplog):
    with caplog.at_level("WARNING", logger="fedray"):
        res = fedray.run(algorithm={"name": "tests.test_progress:Forever"}, federation={"n_clients": 2},
                         runtime={"backend": "local", "progress": False}, output=False)
    assert res.summary["rounds"] == 100 and res.summary["round_cap"] == 100
    assert res.summary["stop_reason"] == "round cap" and len(_cap_warnings(caplog)) == 1


def test_unset_rounds_is_the_algorithms_budget_and_the_run_records_it(caplog, tmp_path):
    """fedkmeans with T = 150 (above the old fixed cap of 100) runs its 150 training rounds after
    its start round; config.yaml and summary.json hold the resolved cap, and a run from that
    config.yaml does the same."""
    alg = {"name": "fedkmeans", "params": {"max_rounds": 150}}
    assert fedray.make_config(fedray.make_config(algorithm=alg).to_dict()).federation.rounds is None
    with caplog.at_level("WARNING", logger="fedray"):
        res = fedray.run(algorithm=alg, federation={"n_clients": 4}, runtime={"backend": "local", "progress": False},
                         output=tmp_path / "a")
    train = res.history[res.history["phase"] == "train"]
    assert len(train) == 150 and res.summary["rounds"] == 151 and res.summary["round_cap"] == 151
    assert res.summary["stop_reason"] == "algorithm" and not _cap_warnings(caplog)
    saved = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert saved["federation"]["rounds"] == 151
    again = fedray.run(str(tmp_path / "a" / "config.yaml"), output=False)
    np.testing.assert_array_equal(again.centers, res.centers)


def test_a_cap_equal_to_the_budget_is_no_cut(caplog):
    """fedkmeans: a start round and T = 6 training rounds fill a cap of 7 exactly."""
    with caplog.at_level("WARNING", logger="fedray"):
        res = fedray.run(algorithm={"name": "fedkmeans", "params": {"max_rounds": 6}},
                         federation={"n_clients": 4, "rounds": 7}, runtime={"backend": "local", "progress": False},
                         output=False)
    assert res.summary["rounds"] == 7 and res.summary["stop_reason"] == "algorithm" and not _cap_warnings(caplog)


def test_describe_works_for_every_listed_name():
    from fedray.algorithm import available_algorithms
    from fedray.data import available_datasets, available_partitions
    from fedray.describe import SECTIONS, describe

    names = [*available_algorithms(), *available_partitions(), *SECTIONS,
             *(d for d in available_datasets() if "NAME" not in d and "PATH" not in d)]
    for name in names:
        text = describe(name)
        assert name in text.splitlines()[0]
    assert "algorithm.params.n_clusters" in describe("kmeans") and ">= 1" in describe("kmeans")
    assert "data.partition.rotations" in describe("rotated")
    assert "runtime.call_timeout" in describe("runtime")
    assert "algorithm.params.mu" in describe("examples.plugins.fedprox:FedProx")


def test_describe_and_partitions_suggest_near_names(tmp_path):
    proc = subprocess.run([*CLI, "describe", "rotate"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "did you mean 'rotated'" in proc.stderr
    proc = subprocess.run([*CLI, "run", "--set", "data.partition.name=rotate", "--set", "runtime.backend=local",
                           "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "did you mean 'rotated'" in proc.stderr
    listing = subprocess.run([*CLI, "list"], capture_output=True, text=True, timeout=60).stdout
    for name in ("rotated", "grouped", "label-swapped", "grouped+rotated", "class-subsets", "cnn28"):
        assert name in listing


def test_a_warning_appears_once_in_one_line_without_library_paths(tmp_path):
    proc = subprocess.run([*CLI, "run", "-q", "--set", "algorithm.name=fedavg", "--set", "algorithm.params.epochs=1",
                           "--set", "data.dataset=sklearn:digits", "--set", "data.partition={name: rotated}",
                           "--set", "federation.n_clients=8", "--set", "federation.rounds=1",
                           "--set", "runtime.backend=local", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "SharedSamplesWarning" in ln]
    assert len(lines) == 1 and lines[0].startswith("fedray: SharedSamplesWarning: rotated federation")
    assert ".py:" not in proc.stderr
