"""The FEMNIST notebook runs end to end on a few writers of LEAF's FEMNIST: it shows the writers' sample
counts, FLACC's and FedAvg's accuracy over rounds and a few images of each cluster FLACC found."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "femnist.ipynb"


def small(data_dir: Path) -> str:
    return (f"data_dir = {str(data_dir)!r}\nseed = 0\nwriters = 8\nfraction = 0.5\nrounds = 6\n"
            'train = {"epochs": 1, "lr": 0.05, "batch_size": 32, "eval_every": 2, "model": "mlp"}\n'
            'flacc_params = {"n_merge": 2, "n_sep": 2}\nbackend = "local"')


def test_committed_notebook_carries_its_three_figures_and_no_data_path():
    nb = json.loads(NOTEBOOK.read_text())
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 3
    params = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    assert "data_dir = None" in "".join(params["source"])     # the data folder comes from $FEDRAY_DATA_DIR


@pytest.mark.slow  # executes a notebook in a kernel of its own
def test_notebook_executes_on_a_few_writers(run_notebook, data_dir):
    if not (data_dir / "femnist" / "train").is_dir():
        pytest.skip("LEAF's FEMNIST shards not found under the data directory")
    text, images, folder = run_notebook("femnist", small(data_dir))
    assert text.startswith("8 writers, ")
    n_clusters = int(re.search(r"FLACC : mean client test accuracy [\d.]+ %, (\d+) clusters", text).group(1))
    assert "FedAvg: mean client test accuracy" in text
    # one line (and one row of images) per cluster, the six largest at most, every writer counted once
    lines = re.findall(r"^cluster \d+: (\d+) writers", text, re.M)
    assert len(lines) == min(6, n_clusters)
    if n_clusters <= 6:
        assert sum(map(int, lines)) == 8
    assert images == 3
    assert list(folder.iterdir()) == []  # the notebook writes no files
