"""Shared fixtures: one Ray instance for the whole test session (2 CPUs, no dashboard), which every run
that would start an embedded Ray of its own joins (:func:`_one_embedded_ray`)."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FEDRAY_DATA_DIR", REPO.parent / "shared" / "datasets"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (SHARED_DATA / "sipu").is_dir():
        pytest.skip(f"benchmark data not found under {SHARED_DATA} (set FEDRAY_DATA_DIR)")
    return SHARED_DATA


class _SharedRay:
    """The test session's one embedded Ray instance (2 CPUs, no dashboard), started on first use."""

    started = False

    @classmethod
    def ensure(cls) -> None:
        import ray

        if not ray.is_initialized():
            # address="local": a new instance of its own, never a cluster another process started on this machine
            ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR",
                     configure_logging=False)
            cls.started = True

    @classmethod
    def stop(cls) -> None:
        import ray

        if cls.started and ray.is_initialized():
            ray.shutdown()
        cls.started = False


@pytest.fixture(scope="session")
def ray_session():
    """Start Ray once (2 CPUs, no dashboard) and reuse it; shut down only what we started."""
    import ray

    _SharedRay.ensure()
    yield ray


@pytest.fixture(scope="session", autouse=True)
def _stop_shared_ray():
    yield
    _SharedRay.stop()


@pytest.fixture(autouse=True)
def _one_embedded_ray(monkeypatch):
    """A run that would start an embedded Ray instance of its own (no ``runtime.address``) joins the test
    session's instance instead, so the whole session starts Ray once; fedray then treats it as a Ray it
    did not start (a run never shuts it down). Runs that name an address, and child processes, are left
    alone."""
    if "fedray.runtime.connect" not in sys.modules:  # nothing has imported fedray's runtime yet
        import fedray.runtime.connect  # noqa: F401
    from fedray.runtime import connect as conn
    from fedray.runtime import ray_executor, shipping

    real = conn.connect

    def connect(address, num_cpus=None, **init_kwargs):
        if conn.resolve_address(address) is None and not init_kwargs:
            conn.quiet_worker_pool_note()  # as fedray's own start does
            _SharedRay.ensure()
            return False
        return real(address, num_cpus, **init_kwargs)

    monkeypatch.setattr(ray_executor, "connect", connect)
    monkeypatch.setattr(shipping, "connect", connect)


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


def pytest_configure(config):
    config.addinivalue_line("markers", "quiet_log(level): fedray's log at this level during the test (default "
                                       "CRITICAL); for tests that provoke failures on purpose")


@pytest.fixture(autouse=True)
def _quiet_log(request):
    """A test marked ``quiet_log(level)`` (a module marks all of its tests with ``pytestmark``) runs with
    fedray's log at ``level``; after it the level is NOTSET again."""
    mark = request.node.get_closest_marker("quiet_log")
    if mark is None:
        yield
        return
    log = logging.getLogger("fedray")
    log.setLevel(mark.args[0] if mark.args else logging.CRITICAL)
    yield
    log.setLevel(logging.NOTSET)
