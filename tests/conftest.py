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
