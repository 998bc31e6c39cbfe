"""Triebe & Rajagopal 2019 in the lab: the sweep and progress scripts imported as modules, their claims and records."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reproductions import common
from reproductions.triebe2019 import claims, progress, sweep


def test_sweep_quick_writes_its_tables_and_figures(tmp_path):
    out = tmp_path / "triebe"
    assert sweep.main(["--quick", "--out", str(out)]) == 0
    df = pd.read_parquet(out / "triebe.parquet")
    assert set(df["variant"]) == {sweep.CENTRAL, *(sweep.variant(g) for g in sweep.QUICK)}
    assert sorted(df["seed"].unique()) == [0, 1]
    assert np.isfinite(df["intra"]).all() and (df["intra"] > 0).all() and (df["db"] > 0).all()
    assert (out / "plots" / "triebe_figure1.png").exists()
    assert "intra-cluster distance" in (out / "triebe.md").read_text()


def test_the_panels_are_the_captions():
    """Figures 2b and 5b as their captions state them; a setting two panels share runs once."""
    two_b = sweep.panel_settings("figure2b")
    assert len(two_b) == 8 and {(g["E"], g["beta"]) for g in two_b} == {(10, 0.1)}
    assert sorted({g["C"] for g in two_b}) == [0.1, 0.2, 0.5, 1.0] and {g["alpha"] for g in two_b} == {1.0, 0.5}
    assert {(g["C"], g["E"]) for g in sweep.panel_settings("figure5b")} == {(0.1, 10)}
    every = sweep.settings_of(sweep.PANELS)
    assert len(every) == len({sweep.variant(g) for g in every}) == 52
    with pytest.raises(ValueError, match="figure9"):
        sweep.panel_settings("figure9")


def test_only_alpha_times_beta_matters_at_one_full_batch_epoch():
    """With E = 1 and B = ∞ a round moves each centroid α·β of the way: (1, 0.5) and (0.5, 1) agree to the bit."""
    a = sweep.run([{"alpha": 1.0, "C": 0.2, "E": 1, "beta": 0.5}], [3], rounds=15, record=False)
    b = sweep.run([{"alpha": 0.5, "C": 0.2, "E": 1, "beta": 1.0}], [3], rounds=15, record=False)
    fed_a, fed_b = a[a["variant"] != sweep.CENTRAL], b[b["variant"] != sweep.CENTRAL]
    assert fed_a["intra"].iloc[0] == pytest.approx(fed_b["intra"].iloc[0], rel=1e-12)


def test_runs_are_recorded_once_and_resumed(tmp_path):
    g = [{"alpha": 1.0, "C": 0.1, "E": 1, "beta": 1.0}]
    with common.scratch_results(tmp_path):
        first = sweep.run(g, [0, 1], rounds=10)
        rec = common.recorded("triebe2019", sweep.RECORDS)
        assert len(rec) == 4 and set(rec["method"]) == {"fedkmeans", sweep.CENTRAL}
        assert sweep.run(g, [0, 1], rounds=10).empty  # everything recorded: nothing runs again
        assert len(common.recorded("triebe2019", sweep.RECORDS)) == 4
        frame = sweep.records_frame().sort_values(["variant", "seed"]).reset_index(drop=True)
    ran = first.sort_values(["variant", "seed"]).reset_index(drop=True)
    np.testing.assert_allclose(frame["intra"], ran["intra"], rtol=1e-9)


def test_the_traced_run_is_the_plain_run():
    """Tracing the centroids changes nothing: Figure 7a's run ends where the sweep's run of that setting ends."""
    rows = progress.run(["figure7a"], [2], rounds=12, record=False)
    traced = {r["variant"]: r for r in rows}
    plain = sweep.run(progress.settings("figure7a"), [2], rounds=12, record=False).set_index("variant")
    for v in plain.index:
        assert traced[v]["intra"] == pytest.approx(plain.loc[v, "intra"], rel=1e-12)
        assert len(traced[v]["curve"]) == (12 if v != sweep.CENTRAL else sweep.CENTRAL_ITERS)


def test_progress_summary():
    X = np.array([[1.0], [2.0], [3.0], [4.0], [5.0]])
    far = np.array([[0.0], [0.5], [2.0], [3.0], [9.0]])
    right = np.arange(1.0, 6.0)[:, None]
    s = progress.summary(X, [far, far, right, right, right])
    assert s["found"] == 5 and s["settled"] == 3 and s["intra"] == 0.0 and s["curve"][-1] == 0.0
    assert progress.summary(X, [far])["found"] == 2  # 2.0 and 3.0 lie on means; 0.5 is 0.5 from 1


def test_every_panel_has_its_claims_and_their_variants_are_recorded_names():
    ids = {c.id for c in claims.CLAIMS}
    for panel in sweep.PANELS:
        assert {f"{panel}-intra", f"{panel}-db"} <= ids
    for c in claims.CLAIMS:
        if c.records == sweep.RECORDS:
            assert set(c.methods) <= set(sweep.panel_variants(c.id.split("-")[0]))
            assert set(c.order) <= set(c.methods)
