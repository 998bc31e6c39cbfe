"""Output folders and checkpoints keep the user's data safe (docs/reliability.md, "Output
folders" and "Checkpoints"): fedray deletes only what its marker says it wrote, claims a
folder atomically, and resumes only its own, authenticated, run."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fedray
from fedray.api import checkpoint, outputs
from fedray.api import run as run_api
from fedray.core.errors import ConfigError
from fedray.tools.cli import main
from tests import plugins

SMALL = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}}, "data": {"dataset": "sklearn:iris"},
         "federation": {"n_clients": 4, "rounds": 3}, "runtime": {"backend": "local", "progress": False},
         "output": {"plots": False}}
CLI_ARGS = ["--set", "algorithm.name=kmeans", "--set", "algorithm.params.n_clusters=3", "--set",
            "data.dataset=sklearn:iris", "--set", "federation.n_clients=4", "--set", "federation.rounds=2",
            "--set", "runtime.backend=local", "--set", "output.plots=false", "-q"]


@pytest.fixture
def checkpoint_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(checkpoint.KEY_ENV, raising=False)


def _decoy(folder: Path) -> dict[str, str]:
    """A user's project: what --overwrite must never delete. Returns {relative path: content}."""
    files = {"config.yaml": "seed: 1\n", ".git/HEAD": "ref: refs/heads/main\n", "src/model.py": "x = 1\n",
             "thesis.tex": "\\documentclass{book}", "checkpoint/notes.txt": "my own checkpoint notes"}
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return files


def _intact(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        assert (folder / rel).read_text() == text, rel


# --- --overwrite --------------------------------------------------------------------------
def test_overwrite_never_deletes_a_users_project(tmp_path, monkeypatch, capsys):
    """A folder with config.yaml, .git/, src/, thesis.tex and checkpoint/ is not fedray's: refused, untouched."""
    project = tmp_path / "project"
    project.mkdir()
    files = _decoy(project)
    assert main(["run", *CLI_ARGS, "--out", str(project), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not look like a fedray output folder" in err and "\n" not in err
    _intact(project, files)
    monkeypatch.chdir(project)  # `--out .` as in the report
    assert main(["run", str(project / "config.yaml"), *CLI_ARGS, "--out", ".", "--overwrite"]) == 2
    _intact(project, files)
    assert sorted(p.name for p in project.iterdir()) == [".git", "checkpoint", "config.yaml", "src", "thesis.tex"]


def test_overwrite_deletes_only_the_files_fedray_wrote(tmp_path, checkpoint_key):
    """A fedray folder into which the user put files is refused; an untouched one is replaced entirely."""
    out = tmp_path / "out"
    fedray.run(SMALL, output=out, checkpoint={"every": 1}, **{"output.messages": True})
    assert (out / outputs.MARKER).is_file() and (out / "checkpoint" / checkpoint.FILENAME).is_file()
    (out / "checkpoint" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds 1 entries fedray did not write \(checkpoint/notes.txt\)"):
        fedray.run(SMALL, output=out, **{"output.overwrite": True})
    assert (out / "checkpoint" / "notes.txt").read_text() == "mine" and (out / "summary.json").is_file()
    (out / "checkpoint" / "notes.txt").unlink()
    fedray.run(SMALL, output=out, **{"output.overwrite": True})  # no messages, no checkpoints this time
    assert not (out / "messages.parquet").exists() and not (out / "checkpoint").exists()
    assert (out / "summary.json").is_file()


def test_overwrite_takes_the_temporary_copies_a_killed_run_left_of_its_own_files(tmp_path, checkpoint_key):
    """A run killed while writing leaves its file under a temporary name (``.checkpoint.pkl.<hex>.tmp``,
    ``.tmp-<hex>-summary.json``): --overwrite removes those with the rest; a look-alike of a file fedray never
    listed is still the user's, and refused."""
    out = tmp_path / "out"
    fedray.run(SMALL, output=out, checkpoint={"every": 1})
    left = [out / "checkpoint" / f".{checkpoint.FILENAME}.098d52a5.tmp", out / ".tmp-0123456789ab-summary.json"]
    for f in left:
        f.write_bytes(b"half a file")
    mine = out / ".notes.txt.098d52a5.tmp"
    mine.write_text("mine")
    with pytest.raises(ConfigError, match=r"holds 1 entries fedray did not write \(.notes.txt.098d52a5.tmp\)"):
        fedray.run(SMALL, output=out, **{"output.overwrite": True})
    assert all(f.exists() for f in left)
    mine.unlink()
    fedray.run(SMALL, output=out, **{"output.overwrite": True})
    assert not any(f.exists() for f in left) and not (out / "checkpoint").exists()
    assert (out / "summary.json").is_file()


@pytest.mark.parametrize("where", ["current folder", "home folder"])
def test_overwrite_refuses_the_current_and_the_home_folder(tmp_path, monkeypatch, where):
    """Even a genuine fedray output folder is never emptied when it is `.` or the home folder."""
    out = tmp_path / "out"
    fedray.run(SMALL, output=out)
    if where == "current folder":
        monkeypatch.chdir(out)
        target: Path | str = "."
    else:
        monkeypatch.setenv("HOME", str(out))
        target = out
    with pytest.raises(ConfigError, match=f"is the {where}; fedray never empties it"):
        fedray.run(SMALL, output=target, **{"output.overwrite": True})
    assert (out / "summary.json").is_file()


# --- two runs into one new folder ---------------------------------------------------------------
def _spawned(target, arg, n: int, *more) -> list:
    """Run ``target(arg, barrier, results, *more)`` in ``n`` spawned processes that pass one barrier
    together; what each put in ``results``."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=target, args=(arg, barrier, results, *more)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return got


def _claim_many(folders: list[str], barrier, results, overwrite: bool = False) -> None:
    outcome = []
    for folder in folders:
        barrier.wait()
        try:
            outputs.prepare(folder, overwrite)
            outcome.append("won")
        except ConfigError as exc:
            outcome.append(str(exc))
    results.put(outcome)


def test_two_runs_claiming_one_new_folder_at_the_same_moment_exactly_one_wins(tmp_path):
    """The check and the claim are one atomic step (O_EXCL on the marker): never two winners."""
    folders = [str(tmp_path / f"out{i}") for i in range(25)]
    a, b = _spawned(_claim_many, folders, 2)
    for one, other in zip(a, b):
        assert sorted([one == "won", other == "won"]) == [False, True], (one, other)
        loser = other if one == "won" else one
        assert "\n" not in loser and ("claimed by another fedray run" in loser or "is being written by another" in loser
                                      or "is not empty" in loser)


def _race(folders: list[str], overwrite: bool) -> None:
    a, b = _spawned(_claim_many, folders, 2, overwrite)
    for one, other in zip(a, b):
        assert sorted([one == "won", other == "won"]) == [False, True], (one, other)


def test_two_overwriting_runs_of_one_old_folder_never_both_win(tmp_path):
    folders = [tmp_path / f"old{i}" for i in range(15)]
    for f in folders:  # a finished run's folder: one file, listed in the marker, released
        outputs.prepare(f)
        (f / "rounds.parquet").write_text("old")
        outputs.record(f, [f / "rounds.parquet"])
        outputs.release(f)
    _race([str(f) for f in folders], overwrite=True)
    assert all(not (f / "rounds.parquet").exists() and (f / outputs.MARKER).is_file() for f in folders)


def test_a_folder_holding_only_the_marker_of_a_run_that_wrote_nothing_is_free(tmp_path):
    out = tmp_path / "out"
    outputs.prepare(out)
    outputs.release(out)  # e.g. the data could not be read: nothing was written
    fedray.run(SMALL, output=out)
    assert (out / "summary.json").is_file()


def test_two_cli_runs_into_one_new_folder_one_wins_the_other_fails_in_one_line(tmp_path):
    out = tmp_path / "shared"
    cli = [sys.executable, "-c", "import sys; from fedray.tools.cli import main; sys.exit(main())",
           "run", *CLI_ARGS, "--out", str(out)]
    procs = [subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    done = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in done)
    assert codes == [0, 2], done
    err = next(e for rc, e in done if rc == 2).strip()
    assert err.startswith("fedray: error: output folder") and "\n" not in err


# --- checkpoints ------------------------------------------------------------------------------
def _key_first_use(config_homes: list[str], barrier, results) -> None:
    os.environ.pop(checkpoint.KEY_ENV, None)
    got = []
    for home in config_homes:
        os.environ["XDG_CONFIG_HOME"] = home
        barrier.wait()
        try:
            got.append(checkpoint.signing_key(create=True).hex())
        except Exception as exc:  # noqa: BLE001 - what the test counts
            got.append(f"{type(exc).__name__}: {exc}")
    results.put(got)


def test_concurrent_first_uses_of_the_key_agree_on_one_full_key(tmp_path):
    """Three processes creating the key at once: no crash, no empty key, one key for all."""
    homes = [str(tmp_path / f"home{i}") for i in range(30)]
    got = _spawned(_key_first_use, homes, 3)
    for i, keys in enumerate(zip(*got)):
        assert len(set(keys)) == 1 and len(bytes.fromhex(keys[0])) == 32, keys
        assert Path(homes[i], "fedray", "checkpoint.key").read_bytes().hex() == keys[0]


def test_a_short_key_is_refused_so_an_empty_key_cannot_forge_a_checkpoint(tmp_path, checkpoint_key):
    out = tmp_path / "run"
    fedray.run(SMALL, output=out, checkpoint={"every": 1})
    key_file = tmp_path / "config" / "fedray" / "checkpoint.key"
    key_file.write_bytes(b"")  # what a crash between creating and writing the key left
    target = tmp_path / "pwned"
    payload = pickle.dumps({"version": checkpoint.VERSION, "config": {}, "server": {"round": 0},
                            "x": _Payload(str(target))})
    (out / "checkpoint" / checkpoint.FILENAME).write_bytes(checkpoint.MAGIC + checkpoint._tag(b"", payload) + payload)
    with pytest.raises(ConfigError, match="holds 0 bytes, fewer than 32") as err:
        run_api.resume(out)
    assert "\n" not in str(err.value) and not target.exists()
    with pytest.raises(ConfigError, match="fewer than 32"):
        fedray.run(SMALL, output=tmp_path / "other", checkpoint={"every": 1})  # nor is one signed with it


class _Payload:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_checkpoints_are_private_to_their_owner(tmp_path, checkpoint_key):
    out = tmp_path / "run"
    old = os.umask(0o022)
    try:
        fedray.run(SMALL, output=out, checkpoint={"every": 1})
    finally:
        os.umask(old)
    assert (out / "checkpoint" / checkpoint.FILENAME).stat().st_mode & 0o077 == 0


def test_a_checkpoint_from_another_run_is_refused(tmp_path, checkpoint_key):
    runs = {name: tmp_path / name for name in ("a", "b")}
    for name, out in runs.items():
        fedray.run(SMALL, output=out, checkpoint={"every": 1}, seed=1 if name == "a" else 2)
    shutil.copyfile(runs["a"] / "checkpoint" / checkpoint.FILENAME, runs["b"] / "checkpoint" / checkpoint.FILENAME)
    with pytest.raises(ConfigError, match="is a checkpoint of another run") as err:
        run_api.resume(runs["b"])
    assert "\n" not in str(err.value)


def test_resumed_checkpoints_go_to_the_folder_the_user_gives(tmp_path, checkpoint_key):
    """checkpoint.directory read from the file never decides where the resumed run writes."""
    stored = tmp_path / "stored-checkpoints"
    cfg = {**SMALL, "federation": {"n_clients": 4, "rounds": 6}, "checkpoint": {"every": 2, "directory": str(stored)}}
    with plugins.interrupt_after_checkpoint(1), pytest.raises(KeyboardInterrupt):
        fedray.run(cfg, output=tmp_path / "cut")
    before = (stored / checkpoint.FILENAME).read_bytes()
    res = run_api.resume(stored, output=tmp_path / "new")
    assert res.output_dir == tmp_path / "new"
    assert checkpoint.load(tmp_path / "new")["server"]["round"] == 6  # new checkpoints: where the user said
    assert (stored / checkpoint.FILENAME).read_bytes() == before  # the stored folder is left alone


def test_an_edited_marker_never_makes_overwrite_delete_outside_the_folder(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    outputs.prepare(out)
    outputs.release(out)
    doc = json.loads((out / outputs.MARKER).read_text())
    doc["files"] = ["../victim.txt", str(victim)]
    (out / outputs.MARKER).write_text(json.dumps(doc))
    outputs.prepare(out, overwrite=True)
    assert victim.read_text() == "precious"
