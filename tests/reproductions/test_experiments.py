"""The four reproduction scripts run end to end in --quick mode and write their tables and figures."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # each test runs a paper's experiment script end to end (--quick)

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def _main(name):
    spec = importlib.util.spec_from_file_location(f"_exp_{name}", EXPERIMENTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def _run(name, tmp_path, data_dir=None):
    out = tmp_path / name
    argv = ["--quick", "--out", str(out)] + (["--data-dir", str(data_dir)] if data_dir else [])
    assert _main(name)(argv) == 0
    return out


def test_stallmann_table1_quick(tmp_path, capsys):
    out = _run("stallmann_table1", tmp_path)
    df = pd.read_parquet(out / "table1.parquet")
    chosen = df[(df["algorithm"] == "fedfcm") & (df["curve"] == "chosen:federated")]["value"]
    assert chosen.tolist() == [5]
    assert "Table 1" in (out / "table1.md").read_text() and "Table 1" in capsys.readouterr().out
    assert (out / "plots" / "motivational_clients.png").exists()
    assert (out / "k_selection" / "fedfcm-seed0" / "plots" / "k_selection.png").exists()


def test_stallmann_g2_quick(tmp_path, data_dir):
    out = _run("stallmann_g2", tmp_path, data_dir)
    df = pd.read_parquet(out / "g2.parquet")
    assert set(df["method"]) == {"central", "fedfcm", "fedfcm-avg"}
    assert df["chosen_k"].between(2, 6).all() and np.isfinite(df["gap_k2"]).all()
    assert (out / "plots" / "correct_by_spread.png").exists() and (out / "plots" / "correct_by_dim.png").exists()
    assert "Table 3" in (out / "g2.md").read_text()


def test_triebe_sweep_quick(tmp_path):
    out = _run("triebe_sweep", tmp_path)
    df = pd.read_parquet(out / "triebe.parquet")
    assert {"central", "fraction", "epochs", "beta"} <= set(df["sweep"])
    assert np.isfinite(df["intra"]).all() and (df["intra"] > 0).all()
    assert (out / "plots" / "triebe_fraction.png").exists()
    assert "intra-cluster" in (out / "triebe.md").read_text()


def test_stallmann_g2_original_sets_quick_and_resumed(tmp_path, data_dir):
    """``--battery g2`` runs on Fränti's g2-2-S text files; a rerun into the same folder runs nothing again and
    gives the same table (every (set, repeat) is in the partial file)."""
    if not (Path(data_dir) / "g2").is_dir():
        import pytest

        pytest.skip(f"G2 sets not found under {data_dir}")
    spec = importlib.util.spec_from_file_location("_exp_g2_resume", EXPERIMENTS / "stallmann_g2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv = ["--quick", "--battery", "g2", "--out", str(tmp_path / "g2"), "--data-dir", str(data_dir)]
    assert mod.main(argv) == 0
    first = pd.read_parquet(tmp_path / "g2" / "g2.parquet")
    assert sorted(first["spread"].unique()) == [10, 60] and set(first["dim"]) == {2}
    assert (first[first["spread"] == 10]["chosen_k"] == 2).all()  # sigma 10: two clusters 141 apart, always found

    def never(*args, **kwargs):
        raise AssertionError("a (set, repeat) in the partial file was run again")

    mod.run_set = never
    assert mod.main(argv) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "g2" / "g2.parquet"), first)
    partial = pd.concat([first, first[first["spread"] == 10].assign(repeat=1)], ignore_index=True)
    pd.testing.assert_frame_equal(mod.complete_repeats(partial), first)  # repeat 1 lacks a set: left out
