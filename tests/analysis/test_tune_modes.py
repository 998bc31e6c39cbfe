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
