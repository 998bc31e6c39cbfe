"""experiments/fedcref_tables.py runs end to end in --quick mode and writes its tables and plots."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "fedcref_tables.py"


def _main():
    spec = importlib.util.spec_from_file_location("_exp_fedcref_tables", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def test_fedcref_tables_quick(tmp_path):
    out = tmp_path / "fedcref"
    df = _main()(["--quick", "--out", str(out)])
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == len(df) == 3 + 3 * 2          # main: 3 variants; each sweep: one setting x 2 variants
    assert set(runs["table"]) == {"main", "dirtiness", "overlap", "clients"}
    main = runs[runs["table"] == "main"].set_index("variant")
    assert set(main.index) == {"fedcref", "no-federation", "perfect-association"}
    assert main.loc["perfect-association", "wrong_associations_end"] == 0.0
    assert main.loc["no-federation", "communities_end"] == 0.0
    assert (runs["acc_start"].between(0.65, 0.75)).all()      # dirtiness 0.3
    text = (out / "tables.md").read_text()
    for section in ("### main", "### dirtiness", "### overlap", "### clients"):
        assert section in text
    assert (out / "plots" / "curves_main_default.png").exists()
    assert (out / "plots" / "graph_main_default.png").exists()
