"""Corcuera Bárcena et al. 2021 in the lab: the Table 1 script's quick form, imported as a module."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reproductions.barcena2021 import table1


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
