"""reproductions/mehta2023/femnist.py --quick: FLACC and FedAvg on a few FEMNIST writers, with the outputs the
reproduction reads (the clusters of every writer, the accuracy over rounds, the table), and runs already
done are skipped when the script is started again."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from reproductions.mehta2023 import femnist


@pytest.fixture
def femnist_dir(data_dir: Path) -> Path:
    if not (data_dir / "femnist" / "train").is_dir():
        pytest.skip("LEAF's FEMNIST shards not found under the data directory")
    return data_dir


def _main():
    return femnist.main


def test_quick_run_reports_clusters_accuracy_and_resumes(tmp_path, femnist_dir):
    out = tmp_path / "ff"
    main = _main()
    runs = main(["--quick", "--data-dir", str(femnist_dir), "--out", str(out)])
    assert sorted(runs["method"]) == ["fedavg", "flacc"] and (runs["writers"] == 12).all()
    assert runs["accuracy"].between(0, 100).all()
    flacc = runs.set_index("method").loc["flacc"]
    clusters = pd.read_csv(out / "clusters_seed0.csv")
    # one row per writer, FLACC's cluster count is the number of distinct clusters of the writers
    assert len(clusters) == 12 and clusters["cluster"].nunique() == flacc["n_clusters"]
    assert (clusters["n_samples"] > 0).all()
    assert runs.set_index("method").loc["fedavg", "n_clusters"] == 1
    rounds = pd.read_csv(out / "rounds.csv")
    assert set(rounds["method"]) == {"fedavg", "flacc"} and rounds["accuracy"].between(0, 1).all()
    text = (out / "table.md").read_text()
    assert "| FLACC |" in text and "| FedAvg |" in text and "12 writers" in text
    assert (out / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    again = main(["--quick", "--data-dir", str(femnist_dir), "--out", str(out)])   # nothing left to run
    assert len(again) == 2 and len(pd.read_csv(out / "runs.csv")) == 2


def test_branch_mode_writes_a_row_per_method_and_the_clusters_table(tmp_path, femnist_dir):
    """--branch: one FLACC run serves the three methods (this quick run never separates, so every arm is
    FLACC's run and FedAvg's row has its accuracy), with the per-cluster table beside them."""
    out = tmp_path / "fb"
    runs = _main()(["--quick", "--branch", "--methods", "flacc", "flacc-control", "fedavg",
                    "--data-dir", str(femnist_dir), "--out", str(out)]).set_index("method")
    assert sorted(runs.index) == ["fedavg", "flacc", "flacc-control"]
    assert runs.loc["fedavg", "n_clusters"] == 1 and runs["accuracy"].nunique() == 1
    table = pd.read_csv(out / "per_cluster_seed0.csv")
    assert table["writers"].sum() == 12 and table["cluster"].nunique() == runs.loc["flacc", "n_clusters"]
