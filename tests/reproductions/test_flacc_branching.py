"""reproductions/mehta2023/branching.py: one FLACC run to its separation round, and two arms resumed from its
checkpoint before separation.

Properties held, on a small federation with four planted rotation groups: the never-separating arm has
FedAvg's history and model, bit for bit; the control arm resumed from the trunk's checkpoint is the
control run from round 0, bit for bit; the trunk is FLACC's run from round 0; a second call runs nothing;
the per-cluster table covers every client once."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedray.api.session import Session
from fedray.core.errors import SharedSamplesWarning
from reproductions.mehta2023 import branching as branching_module

TRAIN = {"epochs": 2, "lr": 0.1, "batch_size": 32, "eval_every": 4, "n_merge": 1, "n_sep": 3}
CFG = {"seed": 0, "algorithm": {"name": "flacc", "params": TRAIN},
       "data": {"dataset": "sklearn:digits",
                "partition": {"name": "rotated", "proportions": [0.25] * 4, "samples": [40, 80]}},
       "federation": {"n_clients": 12, "fraction": 0.5, "rounds": 14},
       "runtime": {"backend": "local", "progress": False}}


@pytest.fixture(scope="module")
def branching():
    return branching_module


@pytest.fixture(scope="module")
def runs(tmp_path_factory, branching):
    out = tmp_path_factory.mktemp("branch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        branching.run_trunk(CFG, TRAIN, out)
        arms = {arm: branching.run_arm(out, arm) for arm in branching.ARMS}
        plain = {"epochs": 2, "lr": 0.1, "batch_size": 32, "eval_every": 4}
        with Session(CFG) as s:
            ref = {"flacc": s.run("flacc", TRAIN, output=False),
                   "flacc-control": s.run("flacc", {**TRAIN, "control": "random-groups"}, output=False),
                   "fedavg": s.run("fedavg", plain, output=False)}
    return out, arms, ref


def _history(run_dir: Path) -> np.ndarray:
    return pd.read_parquet(run_dir / "rounds.parquet")["accuracy"].dropna().to_numpy()


def test_the_trunk_separates_and_is_flaccs_run(runs, branching) -> None:
    out, _, ref = runs
    sep = branching.separation_round(out / "flacc")
    assert sep is not None and sep == ref["flacc"].final["separation_round"]
    np.testing.assert_array_equal(_history(out / "flacc"), ref["flacc"].history["accuracy"].dropna().to_numpy())
    assert sorted(p.name for p in (out / "merging-checkpoints").glob("*.pkl"))[-1] <= f"round-{sep:04d}.pkl"


@pytest.mark.parametrize("arm", ["flacc-control", "fedavg"])
def test_an_arm_from_the_trunk_is_the_run_from_round_zero(runs, arm) -> None:
    out, arms, ref = runs
    np.testing.assert_array_equal(_history(arms[arm]), ref[arm].history["accuracy"].dropna().to_numpy())
    got = pd.read_parquet(arms[arm] / "clients.parquet")["accuracy"].to_numpy()
    np.testing.assert_array_equal(got, np.asarray(ref[arm].final["client_accuracy"]))


def test_a_second_call_runs_nothing_and_the_table_covers_every_client(runs, branching) -> None:
    out, arms, _ = runs
    stamps = {p: p.stat().st_mtime_ns for p in (out / "flacc" / "summary.json", arms["fedavg"] / "summary.json")}
    branching.run_trunk(CFG, TRAIN, out)
    branching.run_arm(out, "fedavg")
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    table = branching.per_cluster(out)
    assert table["writers"].sum() == 12
    assert {"at_separation", "flacc", "flacc-control", "fedavg"} <= set(table.columns)
    assert table[["at_separation", "flacc", "fedavg"]].stack().between(0, 100).all()


def test_an_arm_asked_for_before_the_trunk_separates_is_refused(tmp_path, branching) -> None:
    (tmp_path / "flacc").mkdir()
    with pytest.raises(RuntimeError, match="has not separated yet"):
        branching.run_arm(tmp_path, "fedavg")


def test_the_separation_round_is_read_from_the_checkpoints_while_the_trunk_runs(runs, branching, tmp_path) -> None:
    out, _, ref = runs
    import shutil
    shutil.copytree(out / "flacc", tmp_path / "flacc")
    shutil.copytree(out / "merging-checkpoints", tmp_path / "merging-checkpoints")
    (tmp_path / "flacc" / "summary.json").unlink()  # as if the trunk were still running past separation
    assert branching.separation_round(tmp_path / "flacc") == ref["flacc"].final["separation_round"]
