"""The clustered-FL notebook runs end to end on a small rotated-digits federation and finds the groups."""
from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "clustered_fl.ipynb"

SMALL = """seed = 0
n_clients = 16
fraction = 0.5
rounds = 24
samples = (60, 120)
train = {"epochs": 5, "lr": 0.1, "batch_size": 32, "eval_every": 4}
flacc_params = {"n_merge": 1, "n_sep": 4}
backend = "local\""""


def test_committed_notebook_carries_its_plots():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])) == 3


@pytest.mark.slow  # executes a notebook in a kernel of its own
def test_notebook_executes_and_finds_the_rotation_groups(run_notebook):
    text, images, folder = run_notebook("clustered_fl", SMALL)
    assert "4 clusters, ARI 1.000" in text
    assert "merges joining different true groups: 0" in text
    assert images == 3
    assert list(folder.iterdir()) == []  # the notebook writes no files
