"""Fixtures of the tool tests: ``bench`` is ``benchmarks/round_overhead.py`` loaded as a module
(a fresh copy per test module, so that one module's changes to it stay there)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROUND_OVERHEAD = Path(__file__).resolve().parents[2] / "benchmarks" / "round_overhead.py"


@pytest.fixture(scope="module")
def bench(request):
    spec = importlib.util.spec_from_file_location(f"round_overhead_for_{request.module.__name__}", ROUND_OVERHEAD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
