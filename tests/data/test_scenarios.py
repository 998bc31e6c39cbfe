"""The papers' scenarios: exact composition of the motivational example, Triebe's 1-D clients, G2 set-up."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.data import load_dataset
from fedray.data.scenarios import MOTIVATIONAL_CENTERS, g2_config


def _shards(cfg):
    with fedray.Session(cfg) as s:
        return [(name, p[1], p[2]) for name, p in zip(s.descriptions.all_names(), s.executor.gather_data())], s.info


def test_motivational_example_has_the_papers_three_clients():
    shards, info = _shards(fedray.make_config(algorithm={"name": "fedfcm"},
                                              data={"dataset": "scenario:stallmann-motivational"},
                                              runtime={"backend": "local"}))
    assert [name for name, _, _ in shards] == ["client-1", "client-2", "client-3"]
    expected = [{0: 500, 1: 500, 4: 40}, {1: 500, 3: 500, 4: 40}, {2: 500, 3: 500, 4: 40}]
    for (_, X, y), want in zip(shards, expected):
        assert dict(zip(*np.unique(y, return_counts=True))) == want
        for c in want:  # each point lies near its generating centre (sigma 0.2 or 0.01)
            spread = 0.05 if c == 4 else 1.0
            assert np.all(np.abs(X[y == c] - MOTIVATIONAL_CENTERS[c]) < spread)
    assert info.total_samples == 3120
    assert info.extras["local_k_range"] == [2, 5] and info.extras["true_k"] == 5


def test_motivational_draw_depends_on_the_seed_only():
    a = load_dataset("scenario:stallmann-motivational", seed=3)
    b = load_dataset("scenario:stallmann-motivational", seed=3)
    c = load_dataset("scenario:stallmann-motivational", seed=4)
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X)
    small = a.X[a.y == 4]
    assert small.std(axis=0) == pytest.approx([0.01, 0.01], rel=0.3)


def test_triebe_clients_each_hold_one_gaussian():
    shards, info = _shards(fedray.make_config(algorithm={"name": "fedkmeans"}, data={"dataset": "scenario:triebe-1d"},
                                              runtime={"backend": "local"}))
    assert info.n_clients == 50 and info.n_features == 1
    for _, X, y in shards:
        assert X.shape == (10, 1) and len(np.unique(y)) == 1
        assert abs(X.mean() - (y[0] + 1)) < 0.3  # means 1..5, scale 0.2
    assert len({int(y[0]) for _, _, y in shards}) == 5


def test_scenario_options_are_checked():
    with pytest.raises(fedray.ConfigError, match="n_clients"):
        load_dataset("scenario:triebe-1d", n_clients=0)


def test_g2_setup_splits_2048_points_over_p_clients(data_dir):
    shards, info = _shards(fedray.make_config(g2_config(8, 30, 5, data_dir=str(data_dir))))
    assert info.n_clients == 5 and info.total_samples == 2048 and info.n_features == 8
    assert sorted(len(X) for _, X, _ in shards) == [409, 409, 410, 410, 410]
