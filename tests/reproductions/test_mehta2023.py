"""The FLACC lab (reproductions/mehta2023): its runners record what they ran, the variants reach FLACC, and the
transcribed notebook numbers are written once."""
from __future__ import annotations

import contextlib
import json
import warnings

import numpy as np
import pandas as pd
import pytest

from reproductions import common
from reproductions.mehta2023 import notebook, robustness, table1


def test_each_variant_of_the_robustness_tables_sets_its_parameter():
    p = {v: robustness.flacc_params(v, 5, 10) for v in ("T=2", "T=inf", "alpha_0=-0.1", "gradients", "T=10")}
    assert p["T=2"]["memory"] == 2 and p["T=inf"]["memory"] is None
    assert p["alpha_0=-0.1"]["alpha_0"] == -0.1 and p["alpha_0=-0.1"]["memory"] == 10
    assert p["gradients"]["similarity"] == "gradients" and p["T=10"]["similarity"] == "updates"
    # everything else is the paper's default of every variant
    for params in p.values():
        assert (params["n_merge"], params["n_sep"], params["lr"], params["batch_size"]) == (2, 10, 0.1, 32)


@contextlib.contextmanager
def _quick_claim(tmp_path, claim_id: str):
    """The lab's claim ``claim_id``, to run into scratch results under ``tmp_path``, warnings silenced."""
    claim = {c.id: c for c in common.load_claims("mehta2023")}[claim_id]
    with warnings.catch_warnings(), common.scratch_results(tmp_path):
        warnings.simplefilter("ignore")
        yield claim


def test_a_quick_table6_run_records_both_similarities_with_alpha_min_cross(tmp_path):
    with _quick_claim(tmp_path, "table6-rotated-mnist") as claim:
        robustness.run_claim(claim, "reduced", [0], quick=True, data_dir=None)
        df = common.recorded("mehta2023", "robustness-rotated-mnist")
        assert sorted(df["variant"]) == ["T=10", "gradients"]
        robustness.run_claim(claim, "reduced", [0], quick=True, data_dir=None)  # resumes: nothing to run
        assert len(common.recorded("mehta2023", "robustness-rotated-mnist")) == 2
    for _, r in df.iterrows():
        m = json.loads(r["metrics"])
        assert 0 <= m["accuracy"] <= 100 and len(m["alpha_min_cross"]) >= 1
        config = json.loads(r["config"])["algorithm"]["params"]
        assert config["similarity"] == ("gradients" if r["variant"] == "gradients" else "updates")
    amc = {r["variant"]: json.loads(r["metrics"])["alpha_min_cross"] for _, r in df.iterrows()}
    # E = 2 is not one gradient step (with E = 1 and one batch, as here, the two would agree)
    assert amc["T=10"] != amc["gradients"]


def test_a_quick_table1_run_records_flacc_fedavg_and_the_control(tmp_path):
    with _quick_claim(tmp_path, "table1-rotated-mnist") as claim:
        table1.run_claim(claim, "reduced", [0], quick=True, data_dir=None)
        df = common.recorded("mehta2023", "table1-rotated-mnist")
    assert sorted(df["method"]) == ["fedavg", "flacc", "flacc-control"]
    assert set(df["source"]) == {"run"} and (df["m:accuracy"].between(0, 100)).all()
    flacc = df[df["method"] == "flacc"].iloc[0]  # FLACC's records keep the similarity within and across groups
    assert -1 <= float(flacc["m:sim_within"]) <= 1 and -1 <= float(flacc["m:sim_across"]) <= 1


def test_the_column_settings_are_the_notebooks():
    rot = table1.COLUMNS["table1-rotated-mnist"]["reduced"]
    assert (rot["n_clients"], rot["fraction"], tuple(rot["samples"]), rot["epochs"], rot["rounds"]) == \
        (20, 0.3, (200, 800), 5, 30)
    args = table1.script_args(table1.COLUMNS["table1-grouped-cifar10"]["reduced"], "flacc-control", 3, "/d", False)
    assert args.flacc_params == {"alpha_0": 0.1} and args.seeds == [3] and args.lr == 0.075 and args.epochs == 2
    assert table1.script_args(rot, "nofed", 0, None, False).methods == ["local"]


def test_the_notebook_transcription_is_written_once(tmp_path):
    with common.scratch_results(tmp_path):
        notebook.main()
        first = {p.name: p.read_text() for p in (tmp_path / "mehta2023").glob("*.csv")}
        notebook.main()
        assert {p.name: p.read_text() for p in (tmp_path / "mehta2023").glob("*.csv")} == first
        df = common.recorded("mehta2023", "table1-rotated-mnist")
    flacc = df[df["method"] == "flacc"].sort_values("seed")
    assert flacc["m:accuracy"].tolist() == [97.85, 94.13, 93.97, 89.16, 95.65]
    assert set(df["source"]) == {"notebook@54116ca"} and set(df["commit"]) == {"54116ca"}
    wall = pd.to_numeric(flacc["wall_s"], errors="coerce")  # a wall time the notebook does not state is NaN
    assert np.isnan(wall.iloc[1]) and wall.iloc[0] == pytest.approx(1719)
