"""Tune's copies of a trial's checkpoints (every client's state) are owner-only."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

pytest.importorskip("ray.tune")

BASE = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3, "tol": 1e-12}},
        "data": {"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 20}},
        "federation": {"n_clients": 4, "rounds": 3}, "runtime": {"backend": "local"}, "output": {"plots": False}}


def test_tune_storage_checkpoints_are_mode_0600(ray_session, tmp_path):
    """Property: no file or folder of a checkpoint in Tune's storage is readable by group or others
    (on today's main the copies were 0644)."""
    from ray import tune

    from fedray.tune import trainable

    tuner = tune.Tuner(trainable(BASE, checkpoint_every=3, driver_cpus=1),
                       param_space={"algorithm.params.n_clusters": tune.grid_search([3])},
                       tune_config=tune.TuneConfig(metric="objective", mode="min"),
                       run_config=tune.RunConfig(name="modes", storage_path=str(tmp_path / "tune"), verbose=0))
    results = tuner.fit()
    assert not results.errors
    copies = [p for d in (tmp_path / "tune").rglob("checkpoint_*") if d.is_dir() for p in [d, *d.rglob("*")]]
    assert any(p.is_file() for p in copies)
    loose = [
        (str(p), oct(stat.S_IMODE(p.stat().st_mode))) for p in copies if stat.S_IMODE(Path(p).stat().st_mode) & 0o077
    ]
    assert loose == []


def _reachable_by_others(root: Path) -> list[str]:
    """Paths under ``root`` another user can read (a file) or list and enter (a folder): the path grants
    group or others that access, and every folder between ``root`` and it lets them pass (x)."""
    out = []
    for entry in sorted(root.iterdir()):
        mode = stat.S_IMODE(entry.lstat().st_mode)
        if entry.is_dir() and not entry.is_symlink():
            if mode & 0o055:
                out.append(f"{entry.relative_to(root)} {oct(mode)}")
            if mode & 0o011:  # others may pass: what is inside is theirs to reach
                out += [f"{entry.name}/{p}" for p in _reachable_by_others(entry)]
        elif mode & 0o044:
            out.append(f"{entry.relative_to(root)} {oct(mode)}")
    return out


def test_nothing_in_tunes_storage_is_reachable_by_others_under_secure_aggregation(ray_session, tmp_path):
    """Property: after a Tune search with secure aggregation, no file under storage_path (checkpoints, the
    shared release journal, fedray's outputs, Tune's own state and results) can be read, and no folder
    listed, by group or others (on today's main Tune's driver left the experiment's folder 0755 and its
    files 0644)."""
    from ray import tune

    from fedray.tune import trainable

    secure = {**BASE, "privacy": {"secure_aggregation": True}}
    storage = tmp_path / "tune"
    tuner = tune.Tuner(trainable(secure, checkpoint_every=3, driver_cpus=1),
                       param_space={"algorithm.params.n_clusters": tune.grid_search([3])},
                       tune_config=tune.TuneConfig(metric="objective", mode="min"),
                       run_config=tune.RunConfig(name="private", storage_path=str(storage), verbose=0))
    results = tuner.fit()
    assert not results.errors
    tree = list(storage.rglob("*"))
    assert any(p.name.startswith("releases-") for p in tree)  # the journal is there: the test saw it
    assert any(p.name == "summary.json" for p in tree)
    assert any(p.name.startswith("experiment_state") for p in tree)  # and Tune's driver's own files
    assert _reachable_by_others(storage) == []


def test_a_trials_own_output_tree_is_owner_only(tmp_path, monkeypatch):
    """run_trial (Tune's context stood in for): the trial's folder, fedray's outputs and its checkpoint
    of every client's state in it are 0700/0600 (Tune syncs that folder into storage_path)."""
    import os

    from ray import tune

    from fedray.analysis import tune as ftune

    trial = tmp_path / "trial"
    trial.mkdir(mode=0o755)

    class Context:
        def get_trial_dir(self):
            return str(trial)

    monkeypatch.setattr(tune, "get_context", lambda: Context())
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(tune, "report", lambda *a, **k: None)
    old = os.umask(0o022)
    try:
        ftune.run_trial({}, base=BASE, checkpoint_every=1)
    finally:
        os.umask(old)
    tree = [trial, *trial.rglob("*")]
    assert any(p.name == "checkpoint.pkl" for p in tree) and any(p.name == "summary.json" for p in tree)
    loose = [(str(p), oct(stat.S_IMODE(p.stat().st_mode))) for p in tree if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert loose == []


def test_trials_under_secure_aggregation_share_one_release_journal(tmp_path):
    """Each trial runs in its own process: under secure aggregation its run gets the experiment's
    release_log/ folder (unless privacy.release_log names one), so all trials' sums are weighed together."""
    from fedray.analysis.tune import shared_release_log, trial_config

    secure = {**BASE, "privacy": {"secure_aggregation": True}}
    a = shared_release_log(trial_config(secure, {"algorithm.params.n_clusters": 2}, 3), tmp_path / "exp")
    b = shared_release_log(trial_config(secure, {"algorithm.params.n_clusters": 3}, 3), tmp_path / "exp")
    assert a.privacy.release_log == b.privacy.release_log == str(tmp_path / "exp" / "release_log")
    mine = {**BASE, "privacy": {"secure_aggregation": True, "release_log": str(tmp_path / "mine")}}
    assert shared_release_log(trial_config(mine, {}, 3), tmp_path / "exp").privacy.release_log == str(tmp_path / "mine")
    assert shared_release_log(trial_config(BASE, {}, 3), tmp_path / "exp").privacy.release_log is None
