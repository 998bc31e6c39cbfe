"""Which files a loader reads: MNIST's ``part`` option, and every CIFAR-10 training batch present (no fewer).

Format tests write files in the authors' byte formats; the real-file tests read each file in
``../shared/datasets`` once (skipped where it is absent) and check its header against its documented size.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

from fedray.core.errors import ConfigError, DataError
from fedray.data.datasets import _read_idx
from tests.conftest import SHARED_DATA
from tests.data.test_image_sets import _cifar_bin, _idx, _images, _load


def _mnist(root, n_train=5, n_test=3):
    """Train and test IDX pairs with distinct labels (train 1s, test 2s) so the parts can be told apart."""
    parts = {"train": (_images(n_train), np.ones(n_train)), "t10k": (_images(n_test), np.full(n_test, 2))}
    for prefix, (X, y) in parts.items():
        _idx(root / "mnist" / f"{prefix}-images-idx3-ubyte.gz", X)
        _idx(root / "mnist" / f"{prefix}-labels-idx1-ubyte.gz", y)
    return parts


def test_mnist_part_reads_test_by_default_train_or_both_in_order(tmp_path):
    parts = _mnist(tmp_path)
    default = _load("mnist", tmp_path)
    assert default.y.tolist() == [2, 2, 2]  # the test set, as before the option existed
    assert np.array_equal(default.X, parts["t10k"][0].reshape(3, -1) / 255.0)
    train = _load("mnist", tmp_path, part="train")
    assert train.y.tolist() == [1] * 5 and np.array_equal(train.X, parts["train"][0].reshape(5, -1) / 255.0)
    both = _load("mnist", tmp_path, part="all")
    assert both.y.tolist() == [1] * 5 + [2] * 3 and both.sample_shape == (1, 28, 28)


def test_mnist_bad_options_and_missing_parts_are_one_line_errors(tmp_path):
    _idx(tmp_path / "t10k-images-idx3-ubyte.gz", _images(2))
    _idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.zeros(2))
    assert _load("mnist", tmp_path).X.shape == (2, 784)  # the folder itself, no mnist/ sub-folder
    with pytest.raises(ConfigError, match="data.options.part: must be 'test', 'train' or 'all' for mnist; got 'val'"):
        _load("mnist", tmp_path, part="val")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['classes'\] for mnist"):
        _load("mnist", tmp_path, classes="letters")
    with pytest.raises(DataError, match="no MNIST IDX files \\(train-images-idx3-ubyte.gz, part 'train'\\)") as e:
        _load("mnist", tmp_path, part="train")
    assert "\n" not in str(e.value)
    _idx(tmp_path / "train-images-idx3-ubyte.gz", _images(4))
    _idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(3))
    with pytest.raises(DataError, match="train-labels-idx1-ubyte.gz: \\(3,\\) labels for images of shape"):
        _load("mnist", tmp_path, part="all")


def test_cifar10_reads_every_training_batch_present_and_says_which(tmp_path, caplog):
    d = tmp_path / "cifar-10-batches-bin"
    X1, X3, Xt = _images(2, 32, 32, c=3), _images(3, 32, 32, c=3), _images(1, 32, 32, c=3)
    _cifar_bin(d / "data_batch_1.bin", X1, np.array([0, 1]))
    _cifar_bin(d / "data_batch_3.bin", X3, np.array([2, 3, 4]))
    _cifar_bin(d / "test_batch.bin", Xt, np.array([9]))
    with caplog.at_level(logging.INFO, logger="fedray.data.image_sets"):
        train = _load("cifar10", tmp_path, part="train")
    assert train.y.tolist() == [0, 1, 2, 3, 4] and train.meta["batches"] == ["data_batch_1.bin", "data_batch_3.bin"]
    assert np.array_equal(train.X, np.concatenate([X1, X3]).reshape(5, -1) / 255.0)
    assert "read 5 images from data_batch_1.bin, data_batch_3.bin" in caplog.text
    both = _load("cifar10", tmp_path, part="all")
    assert both.y.tolist() == [0, 1, 2, 3, 4, 9] and both.meta["batches"][-1] == "test_batch.bin"
    assert _load("cifar10", tmp_path).meta["batches"] == ["test_batch.bin"]  # default part: test, as before


def test_cifar10_without_a_training_batch_is_a_one_line_error(tmp_path):
    _cifar_bin(tmp_path / "cifar-10-batches-bin" / "test_batch.bin", _images(1, 32, 32, c=3), np.array([4]))
    with pytest.raises(DataError, match=r"cifar10: no train batch \(data_batch_1..5.bin\) in") as e:
        _load("cifar10", tmp_path, part="train")
    assert "\n" not in str(e.value)
    (tmp_path / "cifar-10-batches-bin" / "test_batch.bin").unlink()
    (tmp_path / "cifar-10-batches-bin" / "data_batch_2.bin").write_bytes(b"")
    with pytest.raises(DataError, match="no test batch"):
        _load("cifar10", tmp_path)


# --- the real files, each read once ------------------------------------------------------------
MNIST_SIZES = {"train": 60000, "t10k": 10000}


@pytest.mark.skipif(not (SHARED_DATA / "mnist").is_dir(), reason=f"MNIST not found under {SHARED_DATA}")
@pytest.mark.parametrize("prefix", sorted(MNIST_SIZES))
def test_real_mnist_files_hold_their_documented_sizes(prefix):
    """LeCun's page: 60,000 training and 10,000 test images of 28x28, labels 0-9 (every digit over 800 times)."""
    images = _read_idx(SHARED_DATA / "mnist" / f"{prefix}-images-idx3-ubyte.gz")
    labels = _read_idx(SHARED_DATA / "mnist" / f"{prefix}-labels-idx1-ubyte.gz")
    assert images.shape == (MNIST_SIZES[prefix], 28, 28) and labels.shape == (MNIST_SIZES[prefix],)
    assert np.bincount(labels, minlength=10).min() > 800 and labels.max() == 9


CIFAR_BIN = SHARED_DATA / "cifar10" / "cifar-10-batches-bin"


@pytest.mark.skipif(not CIFAR_BIN.is_dir(), reason=f"CIFAR-10 not found under {SHARED_DATA}")
def test_real_cifar10_batches_present_are_the_ones_read():
    """Every batch file present is read (10,000 records each, all ten classes) and named in meta["batches"]."""
    from fedray.data.image_files import read_cifar_bin
    from fedray.data.image_sets import _cifar_paths

    paths = _cifar_paths(CIFAR_BIN, "bin", ("train", "test"))
    present = sorted(p.name for p in CIFAR_BIN.glob("*_batch*.bin"))
    assert sorted(p.name for p in paths) == present and "test_batch.bin" in present
    for p in paths:
        X, y = read_cifar_bin(p)
        assert X.shape == (10000, 3, 32, 32) and set(np.unique(y)) == set(range(10))
