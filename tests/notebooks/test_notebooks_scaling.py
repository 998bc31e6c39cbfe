"""The quickstart and scaling-study notebooks run with small parameters, and the committed ones show their plots.

Each notebook has one cell tagged ``parameters``; the test inserts a cell right
after it that overrides those values (as papermill does) and executes the
notebook with nbclient in a temporary folder. The notebooks' last cells assert
their own results (federated equals central on the quickstart; identical
objectives on local and ray in the scaling study).
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.notebooks.test_notebook_outputs import executed_output_problems

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

OVERRIDES = {
    "quickstart": 'N_CLIENTS = 4\nBACKEND = "local"\nALPHA = 5.0',
    # one Ray run per comparison keeps this test short; the committed notebook has the full grids
    "scaling_study": ('CLIENTS = [3]\nBACKENDS = ["local", "ray"]\nLAYOUT_CLIENTS = [2]\nLAYOUTS = [1]\n'
                      "POINTS, FEATURES, CLUSTERS = 60, 2, 2\nROUNDS = 2\nNUM_CPUS = 2\n"
                      "CLOCK_CLIENTS = 20\nCLOCK_ROUNDS = 3\nDEADLINES = [None, 60]\n"),
}


def _load(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def _parameters_index(nb: nbformat.NotebookNode) -> int:
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell must be tagged 'parameters'"
    return tagged[0]


@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_committed_notebook_shows_its_plots_and_imports_fedray(name):
    nb = _load(name)
    _parameters_index(nb)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs), "committed notebook must contain its plots"
    assert not [o for o in outputs if o.get("output_type") == "error"]
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "import fedray" in source and "sys.path" not in source


@pytest.mark.slow  # executes a notebook in a kernel of its own
@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_notebook_runs_with_small_parameters(name, tmp_path):
    nb = _load(name)
    i = _parameters_index(nb)
    src = OVERRIDES[name] + (f'\nOUT = "{tmp_path / "out"}"' if name == "scaling_study" else "")
    cell = nbformat.v4.new_code_cell(src)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(i + 1, cell)
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    images = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert executed_output_problems(nb) == [], "a re-executed notebook would commit these outputs"
    assert images, "the executed notebook must draw its plots"
    if name == "scaling_study":
        assert (tmp_path / "out" / "runtimes" / "sweep.parquet").exists()
        assert (tmp_path / "out" / "layouts" / "sweep.png").exists()
