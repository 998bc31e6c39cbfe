"""The clustered-FL notebook runs end to end on a small rotated-digits federation and finds the groups."""
from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "clustered_fl.ipynb"

SMALL = """seed = 0
n_clients = 16
fraction = 0.5
rounds = 24
samples = (60, 120)
train = {"epochs": 5, "lr": 0.1, "batch_size": 32, "eval_every": 4}
flacc_params = {"n_merge": 1, "n_sep": 4}
backend = "local\""""


def test_notebook_executes_and_finds_the_rotation_groups(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the committed notebook carries its executed outputs, plots included
    committed = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert committed == 3
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "import fedray" in source and "sys.path" not in source
    params[0].source = SMALL
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stdout")
    assert "4 clusters, ARI 1.000" in text
    assert "merges joining different true groups: 0" in text
    images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert images == 3
    assert list(tmp_path.iterdir()) == []  # the notebook writes no files
