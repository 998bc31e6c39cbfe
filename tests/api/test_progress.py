"""Progress and stop reasons: a run says how far it is and why it ended.

* Without a terminal (a pipe, a CI log) the CLI logs about 20 progress lines, each
  with the round total, an ETA and the round's headline metrics; ``-q`` silences them.
* The total is the round cap, or the algorithm's own budget when smaller.
* A run ended by the round cap, not by the algorithm, warns in one line and records
  ``stop_reason: round cap``, whatever the algorithm (with a budget or a plug-in without
  one); an unset ``federation.rounds`` is the algorithm's budget, so nothing is cut.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml

import fedray
from fedray.core.contract import Algorithm
from fedray.core.stats import Stats, total

CLI = [sys.executable, "-c", "import sys; from fedray.tools.cli import main; sys.exit(main())"]


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
    {"name": "tests.api.test_progress:Forever"},
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
        res = fedray.run(algorithm={"name": "tests.api.test_progress:Forever"}, federation={"n_clients": 2},
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
PLUGINS = ("examples.plugins.fedprox:FedProx", "examples.plugins.kmedians:FederatedKMedians",
           "examples.plugins.perfedavg:PerFedAvg", "examples.plugins.pfedme:PFedMe")


def test_describe_works_for_every_listed_name():
    from fedray.core.registry import available_algorithms
    from fedray.data import available_datasets, available_partitions
    from fedray.nn import available_models
    from fedray.tools.describe import SECTIONS, describable_names, describe

    names = describable_names()
    assert set(names) >= {*available_algorithms(), *available_partitions(), *SECTIONS, "config", "blobs",
                          "scenario:triebe-1d", "sklearn:iris"}
    assert set(available_datasets()) - set(names) == {"benchmark:BATTERY/NAME", "csv:PATH", "parquet:PATH"}
    assert set(available_models()) <= set(names)  # every name `fedray list` shows
    for name in names:
        text = describe(name)
        assert name in text.splitlines()[0]
    assert "algorithm.params.n_clusters" in describe("kmeans") and ">= 1" in describe("kmeans")
    assert "data.partition.rotations" in describe("rotated")
    assert "runtime.call_timeout" in describe("runtime")
    assert "algorithm.params.mu" in describe("examples.plugins.fedprox:FedProx")


@pytest.mark.parametrize("name", [None, *PLUGINS])
def test_every_parameter_of_every_name_has_a_meaning(name):
    """Each field of each algorithm's Params, each partition, federation and data-set option and each
    configuration key has a one-line meaning, and `describe` shows it."""
    from fedray.core.registry import available_algorithms
    from fedray.tools.describe import describable_names, describe, description

    # Classes other tests registered in this process (toy plug-ins) are not the project's names.
    foreign = {n for n, cls in available_algorithms().items() if not cls.__module__.startswith("fedray.")}
    for n in [n for n in describable_names() if n not in foreign] if name is None else [name]:
        d = description(n)
        assert d.doc.strip(), f"{n}: no one-line summary"
        lacking = [r.key for r in d.rows if not r.meaning.strip()]
        assert not lacking, f"{n}: no meaning for {lacking}"
        text = describe(n)
        for r in d.rows:
            assert r.meaning.replace("``", "`") in text


def test_meanings_come_from_field_descriptions_and_numpydoc_parameters():
    from fedray.tools.describe import description, doc_parameters

    rows = {r.key: r for r in description("flacc").rows}
    assert rows["algorithm.params.alpha_0"].meaning.startswith("α₀")  # the paper's symbol
    assert rows["algorithm.params.alpha_0"].bounds == "> -1.0, <= 1.0"
    rows = {r.key: r for r in description("dirichlet").rows}
    assert "Dirichlet" in rows["data.partition.alpha"].meaning and rows["data.partition.alpha"].default == "0.5"
    assert [r.key for r in description("by_column").rows] == []  # `groups` is filled in by fedray, not an option

    def f(a, b, c=1):
        """Summary.

        Parameters
        ----------
        a, b : int
            Shared meaning,
            over two lines.
        c : float

        Returns
        -------
        x : float
            Not a parameter.
        """

    assert doc_parameters(f) == {"a": "Shared meaning, over two lines.", "b": "Shared meaning, over two lines."}
    assert "privacy.dp.clip" in {r.key for r in description("privacy").rows}  # an optional nested section too
    top = {r.key: r for r in description("config").rows}
    assert top["federation"].meaning.endswith("(`fedray describe federation`)")


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


def test_rays_worker_pool_note_is_quiet_unless_verbose(capsys, caplog):
    """Ray's raylet tells drivers when a node runs 4x more worker processes than CPUs, which fedray's
    one-actor-per-client layouts do on purpose: shown with -v (INFO) only; other raylet lines pass."""
    pytest.importorskip("ray")
    from ray._private import worker as ray_worker

    from fedray.runtime.connect import WORKER_POOL_NOTE, quiet_worker_pool_note

    quiet_worker_pool_note()
    quiet_worker_pool_note()  # wraps once
    assert ray_worker.print_to_stdstream._fedray_quiet
    note = f"WARNING: 8 PYTHON {WORKER_POOL_NOTE}: abc with address: 192.0.2.2, which is 4x the maximum"
    with caplog.at_level("WARNING", logger="fedray"):
        ray_worker.print_to_stdstream({"lines": [note + " (1)", "node is low on memory (1)"], "pid": "raylet",
                                       "is_err": False}, ignore_prefix=False)
    out = capsys.readouterr().out
    assert WORKER_POOL_NOTE not in out and "node is low on memory (1)" in out
    with caplog.at_level("INFO", logger="fedray"):
        ray_worker.print_to_stdstream({"lines": [note + " (2)"], "pid": "raylet", "is_err": False},
                                      ignore_prefix=False)
    assert WORKER_POOL_NOTE in capsys.readouterr().out


@pytest.mark.parametrize("partition", [{"name": "rotated", "samples": [400, 500]},
                                       {"name": "class-subsets", "samples_per_class": 200}])
def test_a_shared_samples_note_is_one_warning_and_no_log_line(caplog, partition):
    """With -v (INFO logs) the note that clients share samples still appears once: as the warning."""
    import warnings

    from fedray.core.errors import SharedSamplesWarning
    from fedray.data.federation import build_federation

    cfg = fedray.make_config(data={"dataset": "sklearn:digits", "partition": partition},
                             federation={"n_clients": 20}, runtime={"backend": "local"})
    with caplog.at_level("DEBUG", logger="fedray"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fed = build_federation(cfg.data, 20, 0)
    notes = [w for w in caught if issubclass(w.category, SharedSamplesWarning)]
    assert len(notes) == 1 and fed.notes
    assert not [r for r in caplog.records if "share" in r.getMessage()]


def test_verbosity_is_accepted_before_and_after_the_command():
    from fedray.tools.cli import build_parser

    p = build_parser()
    assert p.parse_args(["list"]).verbose == 0
    assert p.parse_args(["-v", "list"]).verbose == 1
    assert p.parse_args(["describe", "-vv", "kmeans"]).verbose == 2
    assert p.parse_args(["run", "-v", "-q"]).verbose == 1 and p.parse_args(["run", "-q"]).verbose == 0
    assert p.parse_args(["quickstart", "--verbose"]).verbose == 1


@pytest.mark.parametrize("name, says", [("", "unknown name ''"), ("k" * 100_000, "(100000 characters)"),
                                        ("scenario:nope", "choose one of scenario:stallmann-motivational"),
                                        ("sklearn:foo", "choose one of sklearn:iris")])
def test_describe_refuses_hostile_names_in_one_short_line(name, says):
    from fedray.core.errors import ConfigError
    from fedray.tools.describe import describe

    with pytest.raises(ConfigError) as err:
        describe(name)
    text = str(err.value)
    assert says in text and "\n" not in text and len(text) < 400


def test_describe_tells_what_file_data_sets_take():
    from fedray.tools.describe import describe

    assert "data.label_column" in describe("csv:sales.csv") and "data.data_dir" in describe("benchmark:sipu/s1")


def test_a_notebook_gets_the_widget_bar_and_lines_without_ipywidgets(monkeypatch, caplog):
    """In Jupyter the bar is tqdm's notebook widget (ipywidgets, in the notebooks and test extras);
    without ipywidgets the same run logs lines instead of a text bar or tqdm's warning."""
    pytest.importorskip("ipywidgets")
    from fedray.api import progress

    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    bar = progress.Progress("kmeans", 4)
    assert bar.mode == "bar" and type(bar.bar).__module__ == "tqdm.notebook"
    bar.update({"phase": "train", "objective": 1.5})
    bar.close()
    monkeypatch.setattr(progress, "_has_widgets", lambda: False)
    with caplog.at_level("INFO", logger="fedray.api.progress"):
        lines = progress.Progress("kmeans", 4)
        lines.update({"phase": "train", "objective": 1.5})
    assert lines.mode == "lines" and lines.bar is None
    assert any("kmeans: round 1/4" in r.getMessage() for r in caplog.records)
