"""The federated cluster analysis notebook runs end to end (small parameters) and finds K = 5."""
from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "federated_cluster_analysis.ipynb"


def test_notebook_executes_and_finds_five_clusters(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "import fedray" in source and "sys.path" not in source
    params[0].source = 'seed = 1\nk_min, k_max = 3, 6\nbackend = "local"'
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stdout")
    assert "'federated': 5" in text and "'central': 5" in text
    assert "knowledge gap to the generating centres" in text
    images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert images == 4
    assert list(tmp_path.iterdir()) == []  # the notebook writes no files
