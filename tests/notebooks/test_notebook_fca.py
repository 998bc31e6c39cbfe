"""The federated cluster analysis notebook runs end to end (small parameters) and finds K = 5."""
from __future__ import annotations

import pytest


@pytest.mark.slow  # executes a notebook in a kernel of its own
def test_notebook_executes_and_finds_five_clusters(run_notebook):
    text, _, _ = run_notebook("federated_cluster_analysis", 'seed = 1\nk_min, k_max = 3, 6\nbackend = "local"')
    assert "'federated': 5" in text and "'central': 5" in text
