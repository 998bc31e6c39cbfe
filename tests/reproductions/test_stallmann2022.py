"""Stallmann & Wilbik 2022 in the lab: the scripts' quick forms imported as modules, their records and resuming,
and the G2 generator against the 2-D originals."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import fedray
from reproductions import common
from reproductions.stallmann2022 import bank, g2, table1

# ---------------------------------------------------------------------------------------------- the G2 generator


def _original(data_dir: Path, spread: int) -> tuple[np.ndarray, np.ndarray]:
    folder = Path(data_dir) / "g2"
    if not folder.is_dir():
        pytest.skip(f"G2 sets not found under {data_dir}")
    X = np.loadtxt(folder / f"g2-2-{spread}.txt")
    y = np.loadtxt(folder / f"g2-2-{spread}-gt.txt").astype(int) - 1
    return X, y


@pytest.mark.parametrize("spread", [10, 40, 70, 100])
def test_generated_g2_has_the_statistics_of_the_2d_originals(data_dir, spread):
    """Counts, label order, integer coordinates, cluster means and per-cluster deviations match the originals'."""
    X, y = _original(data_dir, spread)
    G, g = g2.generate(2, spread)
    assert G.shape == X.shape == (2048, 2) and G.dtype == np.float64
    np.testing.assert_array_equal(g, y)  # 1024 of the first cluster, then 1024 of the second
    assert np.all(G == np.round(G)) and np.all(X == np.round(X))
    se = spread / math.sqrt(1024)  # standard error of a cluster's mean coordinate
    for c, centre in enumerate((500.0, 600.0)):
        for Z in (X, G):
            assert np.all(np.abs(Z[y == c].mean(axis=0) - centre) < 5 * se + 0.5)
            assert np.all(np.abs(Z[y == c].std(axis=0, ddof=1) / spread - 1) < 0.08)
        # the two draws are of one distribution: their means differ by chance only
        assert np.all(np.abs(G[g == c].mean(axis=0) - X[y == c].mean(axis=0)) < 5 * se * math.sqrt(2) + 0.5)


def test_generated_g2_in_high_dimension_keeps_the_spread_per_coordinate():
    """Every coordinate has deviation S at any D, so the centres are 100·sqrt(D) apart and separate with D."""
    for dim in (16, 256):
        G, g = g2.generate(dim, 60)
        assert G.shape == (2048, dim) and np.all(G == np.round(G))
        a, b = G[g == 0], G[g == 1]
        assert abs(a.std(axis=0, ddof=1).mean() / 60 - 1) < 0.02
        assert abs(np.linalg.norm(b.mean(axis=0) - a.mean(axis=0)) / (100 * math.sqrt(dim)) - 1) < 0.02
    a1, _ = g2.generate(8, 30)
    a2, _ = g2.generate(8, 30)
    b1, _ = g2.generate(8, 30, draw=1)
    np.testing.assert_array_equal(a1, a2)
    assert not np.array_equal(a1, b1)


@pytest.mark.parametrize("args, match", [((0, 10), "dim"), ((2.5, 10), "dim"), ((True, 10), "dim"),
                                         ((2, 0), "spread"), ((2, float("nan")), "spread"), ((2, "10"), "spread"),
                                         ((2, 10, -1), "draw")])
def test_generator_refuses_bad_values_in_one_line(args, match):
    with pytest.raises(fedray.ConfigError, match=match) as exc:
        g2.generate(*args)
    assert "\n" not in str(exc.value)


def test_original_source_is_two_dimensional_only(data_dir):
    with pytest.raises(fedray.ConfigError, match="D = 2 only"):
        g2.load_set(4, 10, "original", str(data_dir))
    with pytest.raises(fedray.ConfigError, match="--source"):
        g2.load_set(2, 10, "sipu", str(data_dir))


# ---------------------------------------------------------------------------------------------- the G2 protocol

def test_g2_quick_writes_tables_and_figures(tmp_path, data_dir):
    out = tmp_path / "g2"
    assert g2.main(["--quick", "--out", str(out), "--data-dir", str(data_dir)]) == 0
    assert "Table 3" in (out / "g2.md").read_text()
    assert (out / "plots" / "correct_by_spread.png").exists() and (out / "plots" / "correct_by_dim.png").exists()


def test_g2_units_are_recorded_resumed_and_summarised(tmp_path, data_dir, monkeypatch):
    """Each unit gives central + one record per (algorithm, P); a recorded unit is not run again; the quantile
    records are rebuilt from the complete repeats only."""
    kw = dict(clients=(2,), max_rounds=10, n_init=2)
    with common.scratch_results(tmp_path):
        first = g2.run(str(data_dir), (2,), (10,), [0], **kw)
        assert list(first["method"]) == ["central", "fedfcm P=2", "fedfcm-avg P=2"]
        assert (first["chosen_k"] == 2).all() and (first["correct_kept"] == 100.0).all()  # σ = 10: 141 apart
        assert set(first["source"]) == {"original"}
        rec = common.recorded("stallmann2022", "g2")
        assert len(rec) == 3 and set(rec["variant"]) == {"D=2 S=10"} and set(rec["m:dim"]) == {2}

        def never(*a, **k):
            raise AssertionError("a recorded unit was run again")

        monkeypatch.setattr(g2, "run_unit", never)
        assert g2.run(str(data_dir), (2,), (10,), [0], **kw).empty
        monkeypatch.undo()
        g2.run(str(data_dir), (4,), (10,), [0, 1], **kw)  # repeat 1 of D = 4 only: an incomplete repeat
        frame = g2.records_frame()
        assert sorted(frame["seed"].unique()) == [0] and sorted(frame["dim"].unique()) == [2, 4]
        q = g2.summarise()
        assert set(q["stat"]) == set(g2.STATS) and (q["runs"] == 2).all()
        central = q[(q["method"] == "central") & (q["stat"] == "min")]["db"].iloc[0]
        assert central == pytest.approx(frame[frame["method"] == "central"]["db_k2"].min())
        stored = common.recorded("stallmann2022", "g2-quantiles")
        assert len(stored) == len(q)  # rewritten, not appended
        g2.summarise()
        assert len(common.recorded("stallmann2022", "g2-quantiles")) == len(q)


def test_complete_repeats_weighs_every_set_alike():
    df = pd.DataFrame({"dim": [2, 4, 2], "spread": [10, 10, 10], "seed": [0, 0, 1], "x": [1, 2, 3]})
    assert list(g2.complete_repeats(df)["x"]) == [1, 2]


# ---------------------------------------------------------------------------------------------- Tables 1 and 2

def test_table1_quick(tmp_path, capsys):
    out = tmp_path / "table1"
    assert table1.main(["--quick", "--out", str(out)]) == 0
    df = pd.read_parquet(out / "table1.parquet")
    chosen = df[(df["algorithm"] == "fedfcm") & (df["curve"] == "chosen:federated")]["value"]
    assert chosen.tolist() == [5]
    assert "Table 1" in (out / "table1.md").read_text() and "Table 1" in capsys.readouterr().out
    assert (out / "plots" / "motivational_clients.png").exists()
    assert (out / "k_selection" / "fedfcm-seed0" / "plots" / "k_selection.png").exists()


def test_table1_records_one_row_per_column_and_resumes(tmp_path):
    with common.scratch_results(tmp_path / "lab"):
        table1.run(tmp_path, [0], 5, ("fedfcm",), max_rounds=20, n_init=2, record=True)
        rec = common.recorded("stallmann2022", "table1")
        assert list(rec["variant"]) == ["central", "federated", "client-1", "client-2", "client-3"]
        by = rec.set_index("variant")
        assert by.loc["federated", "m:chosen_k"] == 5 and by.loc["client-1", "m:chosen_k"] == 2
        assert by.loc["federated", "m:gap_k5"] < 1.0 and "m:gap_k5" in by.columns
        assert table1.run(tmp_path, [0], 5, ("fedfcm",), record=True).empty  # recorded: skipped


# ---------------------------------------------------------------------------------------------- Section 3.2.3

def test_bank_protocol_quick_on_uci_data(tmp_path, data_dir):
    out = tmp_path / "uci"
    df = bank.main(["--quick", "--data-dir", str(data_dir), "--out", str(out)])
    fed = df[df["curve"] == "federated"]
    assert fed["k"].min() == 3 and np.isfinite(fed["value"]).all()
    local = df[df["curve"].str.startswith("local:")]
    assert local["curve"].nunique() == 7  # statlog: one client per class label
    ari = df[df["curve"] == "ARI fed vs central"]["value"]
    assert ari.between(-1, 1).all()
    assert "K_max = 3 +" in (out / "table.md").read_text()


def test_bank_records_only_the_papers_data():
    with pytest.raises(SystemExit):
        bank.parse_args(["--dataset", "statlog", "--record"])


def test_figure7_measures_the_wealthy_centre_and_the_shares():
    """Balance is the second column; matched pairs are sorted; shares count local centres and points above 2.4."""
    rng = np.random.default_rng(0)
    fed = np.array([[0.0, 0.0, 0.0], [1.0, 0.1, 0.0], [0.0, 0.2, 1.0], [0.0, 3.1, 0.0]])
    cen = fed + np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.1], [0.0, 0.0, 0.0], [0.0, -0.7, 0.0]])
    sel = SimpleNamespace(federated_centers={4: fed}, central_centers={4: cen})
    shards = [rng.normal(size=(200, 3)) for _ in range(3)]
    shards[0][:60, 1] += 6.0  # one client with a group of wealthy customers
    X = np.vstack(shards)
    f7 = bank.figure7(sel, shards, X, seed=0)
    assert f7["balance_federated"] == pytest.approx(3.1) and f7["balance_central"] == pytest.approx(2.4)
    assert f7["pair_distances"] == pytest.approx([0.0, 0.0, 0.1, 0.7])
    assert f7["local_centres"] == 12 and f7["local_above"] >= 1
    assert f7["points_above_pct"] == pytest.approx(100 * (X[:, 1] > 2.4).mean())
