"""The reproduction scripts still in experiments/ run end to end in --quick mode and write their tables and figures."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

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


def test_triebe_sweep_quick(tmp_path):
    out = _run("triebe_sweep", tmp_path)
    df = pd.read_parquet(out / "triebe.parquet")
    assert {"central", "fraction", "epochs", "beta"} <= set(df["sweep"])
    assert np.isfinite(df["intra"]).all() and (df["intra"] > 0).all()
    assert (out / "plots" / "triebe_fraction.png").exists()
    assert "intra-cluster" in (out / "triebe.md").read_text()
