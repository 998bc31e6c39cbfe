"""The FedCRef notebook runs end to end with small parameters and shows its table and plots."""
from __future__ import annotations

import pytest

SMALL = ('dataset = "sklearn:digits"\ndata_dir = None\nn_clients = 4\nsamples_per_class = 25\n'
         'classes = [2, 3]\ndirtiness = 0.3\nseed = 1\n'
         'params = {"hidden": [16, 8], "local_epochs": 5, "batch_size": 8, "fed_rounds": 2, '
         '"max_iterations": 2, "dec_pretrain_epochs": 2, "dec_epochs": 1}\nbackend = "local"')


@pytest.mark.slow  # executes a notebook in a kernel of its own
def test_fedcref_notebook_executes(run_notebook):
    text, images, folder = run_notebook("fedcref", SMALL)
    assert "mean client ACC: 0.7" in text and "true categories:" in text
    assert images == 2
    assert list(folder.iterdir()) == []  # the notebook writes no files
