"""Hostile inputs and attacks on a run (see docs/reliability.md): each case here was a
reproduced defect; the test fails on the code that had it."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fedray
from fedray import checkpoint
from fedray.errors import ConfigError

CLI = [sys.executable, "-c", "import sys; from fedray.cli import main; sys.exit(main())"]


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
    payload = pickle.dumps({"version": checkpoint.VERSION, "config": {}, "server": {"round": 0, "x": _Payload(str(target))}})
    if forge == "plain pickle":
        raw = payload
    elif forge == "magic with a wrong tag":
        raw = checkpoint.MAGIC + b"\0" * 32 + payload
    else:
        raw = checkpoint.MAGIC + checkpoint._tag(b"k" * 32, payload) + payload
    (out / "checkpoint" / checkpoint.FILENAME).write_bytes(raw)
    with pytest.raises(ConfigError) as err:
        checkpoint.resume(out)
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
        if p.is_file():
            p.unlink()
    res = checkpoint.resume(out)
    assert res.output_dir == out and (out / "summary.json").is_file()
    res = checkpoint.resume(out / "checkpoint", output=tmp_path / "elsewhere")
    assert (tmp_path / "elsewhere" / "summary.json").is_file()


def test_a_checkpoint_from_another_key_names_the_remedy(tmp_path, checkpoint_key, monkeypatch):
    out = _checkpointed_run(tmp_path)
    monkeypatch.setenv(checkpoint.KEY_ENV, "ab" * 32)
    with pytest.raises(ConfigError, match="copy its key file or set"):
        checkpoint.resume(out)
    monkeypatch.setenv(checkpoint.KEY_ENV, "xyz")
    with pytest.raises(ConfigError, match="must be hexadecimal"):
        checkpoint.resume(out)


# --- output folders ------------------------------------------------------------------
SMALL = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}}, "data": {"dataset": "sklearn:iris"},
         "federation": {"n_clients": 4, "rounds": 3}, "runtime": {"backend": "local", "progress": False}}


def test_a_non_empty_output_folder_is_refused_before_ray_starts(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "messages.parquet").write_bytes(b"old run")
    import fedray.session as S

    monkeypatch.setattr(S, "ensure_ray", lambda *a, **k: pytest.fail("Ray started before the output check"))
    with pytest.raises(ConfigError, match=r"is not empty \(1 entries\).*--overwrite") as err:
        fedray.run(SMALL, runtime={"backend": "ray"}, output=out)
    assert "\n" not in str(err.value)
    assert (out / "messages.parquet").read_bytes() == b"old run"


def test_overwrite_replaces_the_old_run_entirely(tmp_path):
    out = tmp_path / "out"
    fedray.run(SMALL, output=out)
    (out / "messages.parquet").write_bytes(b"left over from an older run")
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
