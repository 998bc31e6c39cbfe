"""The papers' federations on the papers' image sets (files written in the authors' formats)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedray.api.config import make_config
from fedray.core.errors import ConfigError, SharedSamplesWarning
from fedray.data.datasets import _load_cached, load_dataset
from fedray.data.federation import build_federation, materialize
from tests.data.test_femnist import _shard
from tests.data.test_image_sets import _cifar_bin


@pytest.fixture
def cifar(tmp_path):
    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(10), 60)
    X = rng.integers(0, 256, size=(600, 3, 32, 32)).astype(np.uint8)
    _cifar_bin(tmp_path / "cifar-10-batches-bin" / "test_batch.bin", X, y)
    _load_cached.cache_clear()
    return tmp_path


def _fed(dataset, data_dir, partition, n_clients=20, options=None):
    cfg = make_config(data={"dataset": dataset, "data_dir": str(data_dir), "partition": partition,
                            "options": options or {}}, federation={"n_clients": n_clients})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        return build_federation(cfg.data, n_clients, 0)


def test_grouped_cifar10_has_five_groups_of_two_labels_each(cifar):
    fed = _fed("cifar10", cifar, {"name": "grouped", "samples": [10, 20]})
    assert fed.sample_shape == (3, 32, 32) and fed.n_classes == 10
    groups = np.array(fed.extras["true_groups"])
    assert np.bincount(groups).tolist() == [4] * 5
    held = {}
    for spec in fed.specs:
        _, y, _ = materialize(spec)
        held.setdefault(spec.meta["group"], set()).update(y.tolist())
    assert all(len(v) <= 2 for v in held.values()) and len(set().union(*held.values())) == 10  # disjoint pairs


def test_label_swapped_cifar10_swaps_one_pair_per_group(cifar):
    fed = _fed("cifar10", cifar, {"name": "label-swapped", "samples": [10, 20]})
    names = fed.extras["group_names"]
    assert len(names) == 5 and all(n.startswith("swap ") for n in names)
    spec = fed.specs[0]
    (a, b), = spec.meta["transforms"][0][1]["pairs"]
    _, y, _ = materialize(spec)
    raw = load_dataset("cifar10", str(cifar)).y[spec.indices]
    assert np.array_equal(y[raw == a], np.full((raw == a).sum(), b))
    assert np.array_equal(y[raw == b], np.full((raw == b).sum(), a))


def test_grouped_rotated_letters_put_upper_against_lower_case_with_15_rotated_clients_each(tmp_path):
    rng = np.random.default_rng(2)
    labels = list(range(10, 62)) * 6  # every letter, six times per writer part
    x = rng.integers(0, 256, size=(len(labels), 784)) / 255.0
    _shard(tmp_path / "femnist" / "train" / "a.json", {"w1": (x, labels)})
    _shard(tmp_path / "femnist" / "test" / "a.json", {"w1": (x[:4], labels[:4])})
    _load_cached.cache_clear()
    fed = _fed("femnist", tmp_path, {"name": "grouped+rotated", "label_sets": "case", "rotated_clients": 15,
                                     "samples": [4, 8]}, n_clients=100, options={"classes": "letters"})
    groups = np.array(fed.extras["true_groups"])
    assert np.bincount(groups).tolist() == [35, 15, 35, 15]  # 50 upper (15 rotated), 50 lower (15 rotated)
    assert fed.extras["group_names"] == ["upper case", "upper case rot90", "lower case", "lower case rot90"]
    assert fed.n_classes == 52
    for spec in fed.specs:
        _, y, _ = materialize(spec)
        assert set(y.tolist()) <= (set(range(26)) if spec.meta["group"] < 2 else set(range(26, 52)))
    with pytest.raises(ConfigError, match="'case' needs upper and lower case letters"):
        _fed("sklearn:digits", None, {"name": "grouped+rotated", "label_sets": "case"})
    with pytest.raises(ConfigError, match="rotated_clients"):
        _fed("sklearn:digits", None, {"name": "grouped+rotated", "rotated_clients": 11}, n_clients=20)


def test_grouped_rotated_default_draw_is_unchanged_by_the_new_options():
    """label_sets='random' (the default) draws exactly what the builder drew before label_sets existed."""
    a = _fed("sklearn:digits", None, {"name": "grouped+rotated", "samples": [20, 30]})
    b = _fed("sklearn:digits", None, {"name": "grouped+rotated", "samples": [20, 30], "label_sets": "random"})
    assert a.extras["true_groups"] == b.extras["true_groups"]
    # the names the builder gave before label_sets existed (same seed, same draw)
    assert a.extras["group_names"] == ["labels 0,3,4,6,9", "labels 0,3,4,6,9 rot90", "labels 1,2,5,7,8",
                                       "labels 1,2,5,7,8 rot90"]
    assert [s.indices.tolist() for s in a.specs] == [s.indices.tolist() for s in b.specs]


def test_class_subsets_run_on_kuzushiji(tmp_path):
    rng = np.random.default_rng(3)
    (tmp_path / "kmnist").mkdir()
    np.savez_compressed(
        tmp_path / "kmnist" / "kmnist-test-imgs.npz", rng.integers(0, 256, (300, 28, 28)).astype(np.uint8)
    )
    np.savez_compressed(tmp_path / "kmnist" / "kmnist-test-labels.npz", np.repeat(np.arange(10), 30))
    _load_cached.cache_clear()
    fed = _fed("kmnist", tmp_path, {"name": "class-subsets", "classes": [2, 3], "samples_per_class": 5}, n_clients=6)
    for spec, chosen in zip(fed.specs, fed.extras["client_classes"]):
        _, y, _ = materialize(spec)
        assert sorted(set(y.tolist())) == chosen and 2 <= len(chosen) <= 3


@pytest.mark.parametrize(("partition", "message"), [
    ({"name": "by_writer", "min_samples": "abc"}, r"data.partition.min_samples: must be an integer for 'by_writer'"),
    ({"name": "by_writer", "min_samples": 1.5}, r"min_samples: must be an integer .*got 1.5"),
    ({"name": "by_writer", "writer_seed": "x"}, r"writer_seed: must be an integer or null for 'by_writer'"),
    ({"name": "grouped", "n_groups": "abc"}, r"data.partition.n_groups: must be an integer for 'grouped'"),
    ({"name": "grouped", "n_groups": True}, r"n_groups: must be an integer"),
    ({"name": "rotated", "test_fraction": "a"}, r"test_fraction: must be a finite number for 'rotated'"),
    ({"name": "class-subsets", "bogus": 1}, r"unknown option\(s\) \['bogus'\] for 'class-subsets'"),
    ({"name": "class-subsets", "overlap": float("inf")}, r"overlap: must be a finite number"),
])
def test_federation_builder_options_of_the_wrong_type_are_one_config_error(partition, message):
    """Every federation builder checks its options' names and types before it runs: a string, a float for an
    integer, a boolean or a non-finite number is a ConfigError naming the key (not a ValueError or TypeError
    from inside the builder, nor a value silently cut to an integer)."""
    with pytest.raises(ConfigError, match=message):
        _fed("sklearn:digits", None, partition)
