"""Shared fixtures: one Ray instance for the whole session (2 CPUs, no dashboard)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FEDRAY_DATA_DIR", REPO.parent / "shared" / "datasets"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (SHARED_DATA / "sipu").is_dir():
        pytest.skip(f"benchmark data not found under {SHARED_DATA} (set FEDRAY_DATA_DIR)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def ray_session():
    """Start Ray once (2 CPUs, no dashboard) and reuse it; shut down only what we started."""
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", configure_logging=False)
        started = True
    yield ray
    if started:
        ray.shutdown()


NOTEBOOKS = REPO / "notebooks"


@pytest.fixture
def run_notebook(tmp_path):
    """Execute ``notebooks/NAME.ipynb`` with its ``parameters`` cell replaced by ``params``.

    Checks the notebook imports fedray without ``sys.path`` edits and that no cell
    fails; returns ``(stdout text, number of PNG outputs, working folder)``.
    """

    def run(name: str, params: str, timeout: int = 300) -> tuple[str, int, Path]:
        nbformat = pytest.importorskip("nbformat")
        nbclient = pytest.importorskip("nbclient")
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, "exactly one cell must be tagged 'parameters'"
        source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "import fedray" in source and "sys.path" not in source
        tagged[0].source = params
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
        outputs = [o for c in nb.cells for o in c.get("outputs", [])]
        assert not [o for o in outputs if o.get("output_type") == "error"]
        from tests.notebooks.test_notebook_outputs import executed_output_problems

        assert executed_output_problems(nb) == [], "a re-executed notebook would commit these outputs"
        text = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
        return text, sum("image/png" in o.get("data", {}) for o in outputs), tmp_path

    return run


@pytest.fixture(autouse=True)
def _fresh_release_logs():
    """Each test starts with a server that has seen no sum: secure aggregation's release logs are kept
    per federation for the life of the process, so one test's sums would otherwise weigh on the next."""
    from fedray.layers.privacy.release import forget_releases

    forget_releases()
    yield
    forget_releases()
