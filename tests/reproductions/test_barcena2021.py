"""Corcuera Bárcena et al. 2021 in the lab: the Table 1 and fault scripts imported as modules, the waveform recipe."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedray import ConfigError
from reproductions.barcena2021 import faults, table1, waveform


@pytest.mark.slow  # the Table 1 script end to end (--quick)
def test_table1_quick(tmp_path, data_dir):
    out = tmp_path / "barcena"
    assert table1.main(["--quick", "--out", str(out), "--data-dir", str(data_dir)]) == 0
    df = pd.read_parquet(out / "barcena.parquet")
    assert sorted(df["gamma"].unique()) == [0.25, 0.5, 0.75, 1.0]
    # every client taking part: federated FCM is central FCM from the same start
    assert df[df["gamma"] == 1.0]["dist_central"].max() < 1e-9
    full = df[df["gamma"] == 1.0]
    np.testing.assert_allclose(full["ari"], full["ari_central"], atol=1e-9)
    assert (out / "plots" / "distance_by_fraction.png").exists()


def test_waveform_base_waves_are_breimans_triangles():
    h = waveform.base_waves()
    assert h.shape == (3, 21) and h.max() == 6.0 and h.min() == 0.0
    assert [int(np.argmax(w)) + 1 for w in h] == [11, 15, 7]  # peaks at m = 11, 15, 7
    np.testing.assert_array_equal(h[1, 4:], h[0, :-4])  # h2(m) = h1(m - 4)
    np.testing.assert_array_equal(h[2, :-4], h[0, 4:])  # h3(m) = h1(m + 4)
    np.testing.assert_array_equal(h[0], [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0])


def test_waveform_classes_mixes_and_noise():
    """5000 objects, 21 attributes, three classes of a third each; each object is u·h_a + (1 − u)·h_b plus
    N(0, 1) noise, with the class's pair of base waves."""
    X, y, u = waveform.waveform()
    assert X.shape == (5000, 21) and y.shape == u.shape == (5000,)
    counts = np.bincount(y, minlength=3)
    assert counts.sum() == 5000 and (np.abs(counts - 5000 / 3) < 4 * np.sqrt(5000 * 2 / 9)).all()
    assert ((u >= 0) & (u <= 1)).all() and abs(u.mean() - 0.5) < 0.02
    h = waveform.base_waves()
    pairs = np.array(waveform.PAIRS)
    signal = u[:, None] * h[pairs[y, 0]] + (1 - u[:, None]) * h[pairs[y, 1]]
    noise = X - signal
    assert abs(noise.mean()) < 4 / np.sqrt(noise.size) and abs(noise.var() - 1.0) < 0.03
    assert np.abs(np.corrcoef(noise[:, :5].T) - np.eye(5)).max() < 0.06  # independent attributes
    for c, (a, b) in enumerate(waveform.PAIRS):  # a class's mean is the midpoint of its two waves
        np.testing.assert_allclose(X[y == c].mean(axis=0), (h[a] + h[b]) / 2, atol=0.15)
    again = waveform.waveform()[0]
    np.testing.assert_array_equal(X, again)  # one fixed draw, like the one UCI file
    assert not np.array_equal(X[:100], waveform.waveform(100, seed=7)[0])


@pytest.mark.parametrize("n", [0, -3, 2.5, True, "100"])
def test_waveform_refuses_a_bad_size(n):
    with pytest.raises(ConfigError, match="waveform n"):
        waveform.waveform(n)


def test_fault_script_quick(tmp_path, data_dir, capsys):
    """The extra (not in the paper): faults cost a run some ARI or none; the loss is no faults minus faults."""
    out = tmp_path / "faults"
    assert faults.main(["--quick", "--out", str(out), "--data-dir", str(data_dir)]) == 0
    text = (out / "faults.md").read_text()
    assert text.startswith("| set | seed | no faults | faults |") and "| s1 | 0 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| s1 | 0 |"))
    cells = [float(c) for c in row.strip("|").split("|")[2:]]
    assert all(-1 <= c <= 1 for c in cells[:3])
    assert cells[3] == pytest.approx(cells[0] - cells[1], abs=2e-4)
