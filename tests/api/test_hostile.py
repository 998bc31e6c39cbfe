"""Hostile inputs and attacks on a run (see docs/reliability.md): each case here was a
reproduced defect; the test fails on the code that had it."""
from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fedray
from fedray.api import checkpoint, outputs
from fedray.api import run as run_api
from fedray.core import calls
from fedray.core.errors import ConfigError
from fedray.runtime.messages import HostTask
from fedray.tools.cli import main

CLI = [sys.executable, "-c", "import sys; from fedray.tools.cli import main; sys.exit(main())"]


class _Payload:
    """Unpickling this creates a file: what a crafted checkpoint would do."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


@pytest.fixture
def checkpoint_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(checkpoint.KEY_ENV, raising=False)


def _checkpointed_run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3}}, data={"dataset": "sklearn:iris"},
               federation={"n_clients": 4, "rounds": 4}, runtime={"backend": "local", "progress": False},
               checkpoint={"every": 2}, output=out)
    return out


@pytest.mark.parametrize("forge", ["plain pickle", "magic with a wrong tag", "magic with a tag of another key"])
def test_a_crafted_checkpoint_is_refused_before_it_can_run_code(tmp_path, checkpoint_key, forge):
    out = _checkpointed_run(tmp_path)
    target = tmp_path / "pwned"
    payload = pickle.dumps(
        {"version": checkpoint.VERSION, "config": {}, "server": {"round": 0, "x": _Payload(str(target))}}
    )
    if forge == "plain pickle":
        raw = payload
    elif forge == "magic with a wrong tag":
        raw = checkpoint.MAGIC + b"\0" * 32 + payload
    else:
        raw = checkpoint.MAGIC + checkpoint._tag(b"k" * 32, payload) + payload
    (out / "checkpoint" / checkpoint.FILENAME).write_bytes(raw)
    with pytest.raises(ConfigError) as err:
        run_api.resume(out)
    assert "nothing was loaded" in str(err.value) and "\n" not in str(err.value)
    assert not target.exists()


def test_checkpoint_key_is_secret_and_private(tmp_path, checkpoint_key):
    _checkpointed_run(tmp_path)
    key_file = tmp_path / "config" / "fedray" / "checkpoint.key"
    assert key_file.stat().st_mode & 0o077 == 0  # owner only
    assert len(key_file.read_bytes()) == 32


def test_resume_writes_where_the_user_says_not_where_the_file_says(tmp_path, checkpoint_key):
    out = _checkpointed_run(tmp_path)
    for p in list(out.iterdir()):
        if p.is_file() and p.name != outputs.MARKER:  # the outputs are lost; fedray's marker stays
            p.unlink()
    res = run_api.resume(out)
    assert res.output_dir == out and (out / "summary.json").is_file()
    res = run_api.resume(out / "checkpoint", output=tmp_path / "elsewhere")
    assert (tmp_path / "elsewhere" / "summary.json").is_file()


def test_a_checkpoint_from_another_key_names_the_remedy(tmp_path, checkpoint_key, monkeypatch):
    out = _checkpointed_run(tmp_path)
    monkeypatch.setenv(checkpoint.KEY_ENV, "ab" * 32)
    with pytest.raises(ConfigError, match="copy its key file or set"):
        run_api.resume(out)
    monkeypatch.setenv(checkpoint.KEY_ENV, "xyz")
    with pytest.raises(ConfigError, match="must be hexadecimal"):
        run_api.resume(out)


# --- output folders ------------------------------------------------------------------
SMALL = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}}, "data": {"dataset": "sklearn:iris"},
         "federation": {"n_clients": 4, "rounds": 3}, "runtime": {"backend": "local", "progress": False}}


def test_a_non_empty_output_folder_is_refused_before_ray_starts(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "messages.parquet").write_bytes(b"old run")
    import fedray.api.session as S

    monkeypatch.setattr(S, "ensure_ray", lambda *a, **k: pytest.fail("Ray started before the output check"))
    with pytest.raises(ConfigError, match=r"is not empty \(1 entries\).*--overwrite") as err:
        fedray.run(SMALL, runtime={"backend": "ray"}, output=out)
    assert "\n" not in str(err.value)
    assert (out / "messages.parquet").read_bytes() == b"old run"


def test_overwrite_replaces_the_old_run_entirely(tmp_path):
    out = tmp_path / "out"
    fedray.run(SMALL, output=out, **{"output.messages": True})  # an older run that wrote a message log
    assert (out / "messages.parquet").is_file()
    fedray.run(SMALL, output=out, **{"output.overwrite": True})
    assert not (out / "messages.parquet").exists()
    assert (out / "summary.json").is_file()


def test_overwrite_never_empties_a_folder_that_is_not_a_fedray_output(tmp_path):
    home = tmp_path / "my-documents"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError, match="does not look like a fedray output folder"):
        fedray.run(SMALL, output=home, **{"output.overwrite": True})
    assert (home / "thesis.tex").read_text() == "precious"


@pytest.mark.parametrize("make", ["file", "below a file"])
def test_an_unusable_output_path_fails_before_the_run(tmp_path, make):
    f = tmp_path / "results.txt"
    f.write_text("x")
    out = f if make == "file" else f / "sub"
    with pytest.raises(ConfigError, match="output folder") as err:
        fedray.run(SMALL, output=out)
    assert "\n" not in str(err.value)


def test_a_run_failing_in_round_n_writes_what_it_had(tmp_path):
    out = tmp_path / "out"
    cfg = {**SMALL, "federation": {"n_clients": 4, "rounds": 6, "min_clients": 4},
           "faults": {"crashes": [[2, 1]]}}
    with pytest.raises(fedray.RoundFailedError):
        fedray.run(cfg, output=out)
    import json

    import pandas as pd

    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds"] == 2
    assert len(pd.read_parquet(out / "rounds.parquet")) == 2
    assert pd.read_parquet(out / "failures.parquet")["round"].tolist() == [2]
    assert (out / "config.yaml").is_file()


# --- configs ---------------------------------------------------------------------------
BOMB = "".join(f"{a}: &{a} [{', '.join(['*' + p] * 9) if p else '1, 1, 1, 1, 1, 1, 1, 1, 1'}]\n"
               for p, a in zip([None, *"abcdefgh"], "abcdefghi"))


@pytest.mark.parametrize("content, message", [
    (BOMB.encode(), "expands to more than"),
    (b"seed: 1\nname: \xff\xfe\n", "is not UTF-8 text"),
    (None, "is not a file (a directory?)"),
    (b"federation: {n_clients: true}\n", "expected a number, not a boolean"),
    (b"a: [1\n", "is not valid YAML"),
])
def test_bad_config_files_fail_at_once_in_one_line(tmp_path, content, message):
    path = tmp_path / "cfg.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    proc = subprocess.run([*CLI, "run", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") <= 1  # pydantic's "invalid configuration:" header + one line


def test_a_federation_too_large_for_memory_is_refused_with_the_estimate():
    with pytest.raises(ConfigError, match=r"1000000000 clients of 200 x 2 points need about .* GiB"):
        fedray.run(data={"dataset": "blobs"}, federation={"n_clients": 10**9}, runtime={"backend": "local"},
                   output=False)


# --- tables: unusable files and silent coercions ----------------------------------------
@pytest.mark.parametrize(
    "kind, make, message",
    [
        ("csv", lambda p: p.write_text(""), "is an empty file"),
        ("csv", lambda p: p.write_text("a,b,c\n1,2,3\n4,5,6,7\n"), "is not a well-formed CSV"),
        ("csv", lambda p: p.mkdir(), "is not a file (a directory?)"),
        ("parquet", lambda p: p.mkdir(), "is not a file (a directory?)"),
        (
            "csv",
            lambda p: __import__("pandas").DataFrame({"a": [1.0, 2.0]}).to_parquet(p),
            "is a Parquet file; use parquet:",
        ),
        ("parquet", lambda p: p.write_bytes(b"PAR1 this is no parquet"), "is not a readable Parquet file"),
        ("parquet", lambda p: p.write_text("a,b\n1,2\n"), "a CSV? use csv:PATH"),
        ("csv", lambda p: p.write_bytes(b"a,b\n1,\xff\n"), "is not UTF-8 text"),
    ],
)
@pytest.mark.parametrize("by_column", [False, True])
def test_unusable_tables_are_one_line_errors(tmp_path, kind, make, message, by_column):
    path = tmp_path / f"t.{kind}"
    make(path)
    extra = {"client_column": "a"} if by_column else {}
    with pytest.raises(
        fedray.DataError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")
    ) as err:
        fedray.run(data={"dataset": f"{kind}:{path}", **extra}, federation={"n_clients": None if by_column else 2},
                   runtime={"backend": "local"}, output=False)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "table, options, message",
    [
        ("a,b,label\n1,2,0\n3,x,1\n5,6,1\n7,8,0\n", {}, "column 'b' has the non-numeric value 'x' at row 2"),
        (
            "a,b,label\n1,2,0\n3,4,1\n5,6,\n7,8,0\n",
            {"label_column": "label"},
            "column 'label' has a missing value at row 3",
        ),
        (
            "a,b,site\n1,2,s1\n3,4,\n5,6,s2\n7,8,s2\n",
            {"client_column": "site"},
            "column 'site' has a missing value at row 2",
        ),
        (
            "a,b,site\n1,2,s1\n3,x,s1\n5,6,s2\n7,8,s2\n",
            {"client_column": "site"},
            "column 'b' has the non-numeric value",
        ),
    ],
)
def test_values_are_never_silently_coerced_or_dropped(tmp_path, table, options, message):
    path = tmp_path / "t.csv"
    path.write_text(table)
    n = None if "client_column" in options else 2
    with pytest.raises(fedray.DataError, match=message):
        fedray.run(data={"dataset": f"csv:{path}", **options}, federation={"n_clients": n},
                   algorithm={"name": "kmeans", "params": {"n_clusters": 2}}, runtime={"backend": "local"},
                   output=False)


# --- one feature ---------------------------------------------------------------------
@pytest.mark.parametrize("data", [{"dataset": "scenario:triebe-1d"},
                                  {"dataset": "sklearn:iris", "feature_columns": None}])
def test_one_feature_runs_plot_their_centres(tmp_path, data):
    if data["dataset"] == "sklearn:iris":  # a one-column user table
        path = tmp_path / "one.csv"
        path.write_text("x\n" + "\n".join(str(v) for v in np.r_[np.linspace(0, 1, 30), np.linspace(5, 6, 30)]))
        data = {"dataset": f"csv:{path}"}
    out = tmp_path / "out"
    res = fedray.run(data=data, algorithm={"name": "kmeans", "params": {"n_clusters": 2}},
                     federation={"n_clients": 3}, runtime={"backend": "local", "progress": False}, output=out)
    assert res.centers.shape[1] == 1
    assert (out / "plots" / "centers.png").stat().st_size > 5000


# --- failures: one line without -v, the details with it ---------------------------------------
def test_a_failed_round_is_one_line_and_its_traceback_appears_only_with_v(tmp_path):
    args = ["run", "-q", "--set", "federation.min_clients=10", "--set", "faults.crashes=[[1, 3]]",
            "--set", "runtime.backend=local", "--out"]
    quiet = subprocess.run([*CLI, *args, str(tmp_path / "a")], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 2
    assert "Traceback" not in quiet.stderr
    err = [ln for ln in quiet.stderr.splitlines() if ln.startswith("fedray: error:")]
    assert len(err) == 1 and "client 3 crashed in round 1" in err[0]
    loud = subprocess.run([*CLI, "-v", *args, str(tmp_path / "b")], capture_output=True, text=True, timeout=120)
    assert "Traceback" in loud.stderr and "crash_client" in loud.stderr


def test_errors_raised_inside_the_server_actor_reach_the_user_as_one_line(ray_session, tmp_path):
    cfg = {**SMALL, "federation": {"n_clients": 4, "rounds": 6, "min_clients": 4},
           "faults": {"crashes": [[2, 1]]}, "runtime": {"backend": "ray", "progress": False}}
    with pytest.raises(fedray.RoundFailedError) as err:
        fedray.run(cfg, output=False)
    assert "\n" not in str(err.value) and "ray::" not in str(err.value)
    assert str(err.value).startswith("round 2: 3 of 4 clients answered")


def test_unexpected_errors_are_one_line_without_v(tmp_path):
    # a plug-in with a bug: the CLI reports it in one line and points to -v
    (tmp_path / "buggy_plugin.py").write_text(
        "import fedray\n"
        "class Buggy(fedray.Algorithm):\n"
        "    def configure_round(self, ctx):\n"
        "        return {}['missing']\n"
        "    def aggregate(self, ctx, replies):\n"
        "        return {}\n"
        "    def result(self):\n"
        "        return {}\n")
    proc = subprocess.run([*CLI, "run", "--set", "algorithm.name=buggy_plugin:Buggy", "--set", "runtime.backend=local",
                           "--out", str(tmp_path / "o")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert ("fedray: error: algorithm 'buggy_plugin:Buggy': configure_round raised KeyError: 'missing' in round 0 "
            "(-v shows its traceback)") in proc.stderr
    loud = subprocess.run([*CLI, "-v", "run", "--set", "algorithm.name=buggy_plugin:Buggy", "--set",
                           "runtime.backend=local", "--out", str(tmp_path / "o2")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert "Traceback" in loud.stderr and "return {}['missing']" in loud.stderr


def test_an_internal_error_is_one_line_without_v(tmp_path, monkeypatch, capsys):
    # a defect of fedray itself (here: a broken result table) says so, and points to -v
    def broken(*args, **kwargs):
        raise KeyError("missing")

    monkeypatch.setattr(run_api.Result, "table", broken)
    assert main(["run", "--set", "runtime.backend=local", "--set", "data.dataset=sklearn:iris", "--set",
                 "federation.n_clients=4", "--set", "federation.rounds=2", "--out", str(tmp_path / "o"), "-q"]) == 1
    err = capsys.readouterr().err
    assert (
        "fedray: internal error: KeyError: 'missing' (run with -v for the traceback)" in err and "Traceback" not in err
    )


def test_dp_noise_never_stops_kmeans_as_converged():
    # seed 2: every noisy count of round 3 was <= 0, so no centre moved and the old rule
    # stopped the run as "converged" with ARI 0.0
    # seeded_noise: the noise of the old run (drawn from the seed), so the regression replays exactly
    res = fedray.run(seed=2, privacy={"dp": {"clip": 5.0, "noise_multiplier": 1.0, "seeded_noise": True}},
                     data={"scale": "standard"},
                     federation={"rounds": 30}, runtime={"backend": "local", "progress": False}, output=False)
    h = res.history[res.history["phase"] == "train"]
    k = 3
    assert not (h["empty_clusters"] == k).any() or not res.summary["converged"]
    assert len(h) > 3


# --- silent data loss ----------------------------------------------------------------
RCFG = {"seed": 0, "algorithm": {"name": "kmeans", "params": {"n_clusters": 3}},
        "data": {"dataset": "blobs", "options": {"points_per_client": 50}},
        "federation": {"n_clients": 4, "rounds": 4}, "runtime": {"backend": "ray", "clients_per_actor": 1}}


@pytest.mark.parametrize("max_restarts", [0, 3])
def test_a_killed_client_actor_never_silently_shrinks_the_evaluation(ray_session, max_restarts, caplog):
    import ray

    with fedray.Session(RCFG, runtime={**RCFG["runtime"], "max_restarts": max_restarts}) as s:
        ray.kill(s.executor.actors[1], no_restart=False)
        with caplog.at_level("WARNING", logger="fedray"):
            res = s.run(output=False, progress=False)
    cov = res.final["evaluation_coverage"]
    assert cov["of_clients"] == 4 and cov["of_samples"] == 200
    if max_restarts:  # restarted and rebuilt: every client is evaluated
        assert cov["clients"] == 4 and cov["samples"] == 200
    else:  # reported, on the console and in the summary
        assert cov["clients"] == 3 and cov["samples"] == 150
        assert any("evaluation covers 3 of 4 clients (150 of 200 samples)" in r.getMessage() for r in caplog.records)
    # the summary counts exactly the rows of failures.parquet
    f = res.failures
    assert res.summary["failures"]["failed"] == int((f["kind"] == "failed").sum())
    assert res.summary["failures"]["in_evaluation"] == int((f["round"] < 0).sum())


def test_summary_failures_count_every_attempt_like_failures_parquet():
    res = fedray.run(SMALL, seed=1, faults={"crash_probability": 0.15}, federation={"n_clients": 6, "rounds": 5,
                                                                         "min_clients": 5, "round_retries": 8},
                     output=False)
    f = res.failures
    assert len(f) > 0 and f["attempt"].max() > 0  # some round was retried
    assert res.summary["failures"]["failed"] == int((f["kind"] == "failed").sum())
    assert res.summary["failures"]["failed"] > int(res.history["clients_failed"].sum())


# --- hangs ---------------------------------------------------------------------------
def test_late_tasks_spilling_into_later_rounds_are_counted_apart_from_stragglers(ray_session):
    cfg = {**RCFG, "federation": {"n_clients": 4, "rounds": 6, "round_retries": 3},
           "runtime": {"backend": "ray", "clients_per_actor": 1, "round_timeout": 2.0, "progress": False},
           "faults": {"delay_probability": 0.25, "delay_seconds": 5.0, "delay_mode": "sleep"}}
    res = fedray.run(cfg, output=False)
    f = res.failures
    late = f[f["kind"] == "late"]
    spill = late["error"].str.contains("spill-over")
    assert res.summary["failures"]["late_spillover"] == int(spill.sum())
    # every late client-round is either an injected straggler or a spill-over of one
    assert bool((late["injected"] | spill).all())
    assert int((late["injected"] & ~spill).sum()) <= int(f["injected"].sum())


def test_calls_to_stuck_actors_fail_within_call_timeout(ray_session):
    import ray

    from fedray.api.plotdata import _moments
    from fedray.layers.faults import delayed

    with fedray.Session(RCFG, runtime={**RCFG["runtime"], "call_timeout": 2.0}) as s:
        sleepy = fedray.Task(delayed, {"delay": 6.0, "fn": _moments, "payload": None})
        blocker = s.executor.actors[0].run.remote(HostTask(0, [(0, sleepy, -1)]))
        with pytest.raises(fedray.RoundFailedError, match=r"client state: client actors did not answer within "
                                                          r"runtime.call_timeout=2 s"):
            s.executor.get_state([0, 1])
        ray.get(blocker)


def test_a_stalled_round_without_round_timeout_is_reported(ray_session, monkeypatch, caplog):
    from fedray.api.plotdata import _moments
    from fedray.layers.faults import delayed
    from fedray.runtime import ray_executor as runtime

    monkeypatch.setattr(runtime, "STALL_FIRST_S", 1.0)
    with fedray.Session(RCFG) as s:
        slow = fedray.Task(delayed, {"delay": 3.5, "fn": _moments, "payload": None})
        fast = fedray.Task(_moments)
        with caplog.at_level("WARNING", logger="fedray"):
            res = s.executor.execute(calls.train(0), {0: slow, 1: fast, 2: fast, 3: fast}, None)
    assert len(res.replies) == 4  # no deadline: it waits, but says so
    assert any("round 0: still waiting for 1 of 4 client actors" in r.getMessage() for r in caplog.records)


def test_a_checkpoint_blocked_by_a_stuck_actor_is_skipped_not_hung(ray_session, tmp_path, checkpoint_key, caplog):
    from fedray.api.checkpoint import Checkpointer
    from fedray.api.plotdata import _moments
    from fedray.layers.faults import delayed

    cfg = fedray.make_config(RCFG, runtime={**RCFG["runtime"], "call_timeout": 1.5}, checkpoint={"every": 1})
    with fedray.Session(cfg) as s:
        blocker = s.executor.actors[2].run.remote(HostTask(0, [(2, fedray.Task(delayed, {"delay": 4.0, "fn": _moments,
                                                                                         "payload": None}), -1)]))
        with caplog.at_level("WARNING", logger="fedray"):
            path = Checkpointer(cfg, tmp_path, s).save({"round": 3})
        import ray

        ray.get(blocker)
    assert path is None
    assert any("checkpoint after round 2 skipped" in r.getMessage() for r in caplog.records)


# --- faults must add noise, not change the outcome -------------------------------------------
def test_faults_in_the_start_up_round_do_not_change_the_initial_centres():
    cfg = {**SMALL, "algorithm": {"name": "federated-fcm", "params": {"n_clusters": 3}},
           "federation": {"n_clients": 8, "rounds": 3}}
    clean = fedray.run(cfg, output=False)
    crashed = {**cfg, "faults": {"crashes": [[0, 2], [0, 5]], "crash_probability": 0.3}}
    robust = fedray.run(crashed, output=False)
    np.testing.assert_array_equal(robust.model["initial_centers"], clean.model["initial_centers"])
    assert robust.history.loc[0, "attempts"] > 1
    assert set(robust.failures.loc[robust.failures["round"] == 0, "client_id"]) >= {2, 5}
    # without retries the start is built from fewer clients and differs
    old = fedray.run(crashed, algorithm={"name": "federated-fcm", "params": {"n_clusters": 3, "init_retries": 0}},
                     output=False)
    assert not np.array_equal(old.model["initial_centers"], clean.model["initial_centers"])


def test_a_dying_server_actor_is_one_line(ray_session, tmp_path, monkeypatch):
    (tmp_path / "dying_server_plugin.py").write_text(
        "import os\n"
        "import fedray\n"
        "from fedray.algorithms.kmeans import FederatedKMeans\n"
        "class DiesInRound2(FederatedKMeans):\n"
        "    def update(self, ctx, replies):\n"
        "        if ctx.round == 2:\n"
        "            os._exit(3)  # the process hosting the server goes away\n"
        "        return super().update(ctx, replies)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = {**RCFG, "algorithm": {"name": "dying_server_plugin:DiesInRound2", "params": {"n_clusters": 3}}}
    with pytest.raises(fedray.RoundFailedError) as err:
        fedray.run(cfg, runtime={**RCFG["runtime"], "progress": False}, output=tmp_path / "out")
    assert str(err.value).startswith("the server actor died") and "\n" not in str(err.value)
    import json

    assert json.loads((tmp_path / "out" / "summary.json").read_text())["status"] == "failed"
