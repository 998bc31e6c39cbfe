"""The FedCRef notebook runs end to end with small parameters and shows its table and plots."""
from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "fedcref.ipynb"


def test_fedcref_notebook_executes(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "import fedray" in source and "sys.path" not in source
    params[0].source = ('dataset = "sklearn:digits"\ndata_dir = None\nn_clients = 4\nsamples_per_class = 25\n'
                        'classes = [2, 3]\ndirtiness = 0.3\nseed = 1\n'
                        'params = {"hidden": [16, 8], "local_epochs": 5, "batch_size": 8, "fed_rounds": 2, '
                        '"max_iterations": 2, "dec_pretrain_epochs": 2, "dec_epochs": 1}\nbackend = "local"')
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stdout")
    assert "mean client ACC: 0.7" in text and "true categories:" in text
    images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert images == 2
    assert list(tmp_path.iterdir()) == []  # the notebook writes no files
