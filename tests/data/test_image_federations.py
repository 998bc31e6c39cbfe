"""Image federations with hidden groups: group shares, sizes, test rows kept out of training, transforms."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedray.api.config import make_config
from fedray.core.errors import ConfigError, SharedSamplesWarning
from fedray.data.datasets import load_dataset
from fedray.data.federation import build_federation, materialize


def _fed(partition: dict, n_clients: int = 20, seed: int = 0, dataset: str = "sklearn:digits", data_dir=None):
    cfg = make_config(data={"dataset": dataset, "partition": partition, "data_dir": data_dir},
                      federation={"n_clients": n_clients})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        return build_federation(cfg.data, n_clients, seed)


def _rows(spec):
    n_test = spec.meta["n_test"]
    idx = np.asarray(spec.indices)
    return idx[: len(idx) - n_test], idx[len(idx) - n_test:]


@pytest.mark.parametrize("name", ["rotated", "grouped", "label-swapped", "grouped+rotated"])
def test_no_test_row_trains_anybody_and_no_client_holds_a_row_twice(name):
    fed = _fed({"name": name, "samples": [200, 800]}, n_clients=30)  # digits: far more asked than held
    assert any(n.startswith("clients share samples") for n in fed.notes)
    train_all, test_all = set(), set()
    for spec in fed.specs:
        tr, te = _rows(spec)
        assert len(set(spec.indices.tolist())) == len(spec.indices)
        assert len(te) >= 1 and len(tr) >= 1
        train_all.update(tr.tolist())
        test_all.update(te.tolist())
    assert not train_all & test_all


def test_rotated_groups_have_the_papers_shares_and_sizes_lie_in_range():
    fed = _fed({"name": "rotated", "samples": [20, 40]}, n_clients=20)
    groups = np.array(fed.extras["true_groups"])
    assert np.bincount(groups).tolist() == [2, 4, 6, 8]  # 10/20/30/40 %
    assert fed.extras["group_names"] == ["rot0", "rot90", "rot180", "rot270"]
    assert all(20 <= len(s.indices) <= 40 for s in fed.specs)
    assert [s.meta["group"] for s in fed.specs] == groups.tolist()
    assert not fed.notes  # 20 x 40 rows fit in the pool: nobody shares


def test_rotation_and_label_swap_are_applied_in_the_client():
    ds = load_dataset("sklearn:digits")
    fed = _fed({"name": "rotated", "samples": [20, 30]}, n_clients=10)
    for spec in fed.specs:
        X, y, _ = materialize(spec)
        k = {0: 0, 1: 1, 2: 2, 3: 3}[spec.meta["group"]]
        want = np.rot90(ds.X[spec.indices].reshape(-1, 1, 8, 8), k, axes=(-2, -1)).reshape(len(X), -1)
        assert np.array_equal(X, want) and np.array_equal(y, ds.y[spec.indices])
    fed = _fed({"name": "label-swapped", "samples": [100, 120], "n_groups": 5}, n_clients=10)
    names = fed.extras["group_names"]
    pairs = [tuple(int(v) for v in n.split()[1].split("<->")) for n in names]
    assert len({v for p in pairs for v in p}) == 10  # five disjoint pairs on ten digits
    for spec in fed.specs:
        _, y, _ = materialize(spec)
        a, b = pairs[spec.meta["group"]]
        orig = ds.y[spec.indices]
        assert np.array_equal(y[orig == a], np.full((orig == a).sum(), b))
        assert np.array_equal(y[orig == b], np.full((orig == b).sum(), a))


def test_grouped_clients_hold_only_their_groups_labels():
    ds = load_dataset("sklearn:digits")
    fed = _fed({"name": "grouped", "samples": [50, 80], "n_groups": 5}, n_clients=15)
    label_sets = {}
    for spec in fed.specs:
        labels = set(np.unique(ds.y[spec.indices]).tolist())
        assert len(labels) <= 2
        label_sets.setdefault(spec.meta["group"], set()).update(labels)
    assert all(len(s) == 2 for s in label_sets.values())
    assert len(set().union(*label_sets.values())) == 10


def test_grouped_rotated_has_two_rotations_per_label_set():
    fed = _fed({"name": "grouped+rotated", "samples": [30, 40]}, n_clients=20)
    groups = np.array(fed.extras["true_groups"])
    assert np.bincount(groups).tolist() == [7, 3, 7, 3]  # 30 % of each half rotated by 90 degrees
    rotated = [s for s in fed.specs if s.meta["group"] % 2 == 1]
    assert all(s.meta["transforms"][0][0] == "rotate" for s in rotated)


def test_same_seed_same_federation_and_sharing_is_announced():
    a = _fed({"name": "rotated", "samples": [30, 60]}, seed=1)
    b = _fed({"name": "rotated", "samples": [30, 60]}, seed=1)
    c = _fed({"name": "rotated", "samples": [30, 60]}, seed=2)
    assert all(np.array_equal(x.indices, y.indices) and x.meta == y.meta for x, y in zip(a.specs, b.specs))
    assert any(not np.array_equal(x.indices, y.indices) for x, y in zip(a.specs, c.specs))
    cfg = make_config(data={"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [300, 400]}})
    with pytest.warns(SharedSamplesWarning, match="clients share samples"):
        build_federation(cfg.data, 10, 0)


def test_bad_partitions_are_clear_errors():
    with pytest.raises(ConfigError, match=r"data.partition: unknown option\(s\) \['rotate'\] for 'rotated'"):
        _fed({"name": "rotated", "rotate": 90})
    with pytest.raises(ConfigError, match="'rotated' rotates images.*sample.*\\(4,\\)"):
        _fed({"name": "rotated"}, dataset="sklearn:iris")
    with pytest.raises(ConfigError, match="data.partition.samples"):
        _fed({"name": "grouped", "samples": [50, 10]})
    with pytest.raises(ConfigError, match="data.partition.proportions"):
        _fed({"name": "rotated", "proportions": [0.5, 0.5]})


def test_mnist_rotated_federation_from_the_idx_files(data_dir):
    if not (data_dir / "mnist").is_dir():
        pytest.skip("MNIST IDX files not found")
    fed = _fed({"name": "rotated", "samples": [200, 300]}, n_clients=8, dataset="mnist", data_dir=str(data_dir))
    assert fed.sample_shape == (1, 28, 28) and fed.n_classes == 10 and not fed.notes
    X, y, _ = materialize(fed.specs[0])
    assert X.shape[1] == 784 and 200 <= X.shape[0] <= 300 and X.max() <= 1.0
