"""Image data sets read from files written in their authors' exact byte formats; bad files are one-line errors."""
from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fedray.core.errors import ConfigError, DataError
from fedray.data.datasets import _load_cached, check_dataset_name, load_dataset

RNG = np.random.default_rng(7)


def _idx(path: Path, arr: np.ndarray) -> None:
    """IDX as LeCun's page defines it: 0x0000, type 0x08 (unsigned byte), ndim, big-endian sizes, data; gzip."""
    head = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as fh:
        fh.write(head + arr.astype(np.uint8).tobytes())


def _images(n: int, h: int = 28, w: int = 28, c: int | None = None) -> np.ndarray:
    shape = (n, h, w) if c is None else (n, c, h, w)
    return RNG.integers(0, 256, size=shape).astype(np.uint8)


def _load(name: str, root: Path, **options):
    _load_cached.cache_clear()  # each call reads the files as they are now (loads are cached per process)
    return load_dataset(name, str(root), **options)


# --- IDX sets ------------------------------------------------------------------------------
def test_fashion_mnist_reads_the_idx_pair_of_each_part(tmp_path):
    tr, te = _images(6), _images(4)
    ytr, yte = RNG.integers(0, 10, 6), RNG.integers(0, 10, 4)
    d = tmp_path / "fashion-mnist"
    _idx(d / "train-images-idx3-ubyte.gz", tr)
    _idx(d / "train-labels-idx1-ubyte.gz", ytr)
    _idx(d / "t10k-images-idx3-ubyte.gz", te)
    _idx(d / "t10k-labels-idx1-ubyte.gz", yte)
    ds = _load("fashion-mnist", tmp_path)  # the test part by default, as mnist
    assert ds.sample_shape == (1, 28, 28) and ds.n_classes == 10 and ds.meta["class_names"][9] == "Ankle boot"
    assert np.array_equal(ds.X, te.reshape(4, -1) / 255.0) and ds.y.tolist() == yte.tolist()
    both = _load("fashion-mnist", tmp_path, part="all")
    assert np.array_equal(both.X, np.concatenate([tr, te]).reshape(10, -1) / 255.0)
    with pytest.raises(DataError, match="md5 .* differs from the published bef4ecab"):
        _load("fashion-mnist", tmp_path, verify_md5=True)


def test_emnist_images_are_transposed_back_and_byclass_letters_are_the_papers_52(tmp_path):
    upright = _images(8)
    labels = np.array([0, 9, 10, 35, 36, 61, 12, 40])
    d = tmp_path / "emnist"
    _idx(d / "emnist-byclass-test-images-idx3-ubyte.gz", upright.transpose(0, 2, 1))  # stored transposed
    _idx(d / "emnist-byclass-test-labels-idx1-ubyte.gz", labels)
    ds = _load("emnist:byclass", tmp_path)
    assert np.array_equal(ds.X, upright.reshape(8, -1) / 255.0) and ds.n_classes == 62
    letters = _load("emnist:byclass", tmp_path, classes="letters")
    assert letters.n_classes == 52 and letters.y.tolist() == [0, 25, 26, 51, 2, 30]
    assert np.array_equal(letters.X, upright[2:].reshape(6, -1) / 255.0)
    _idx(d / "emnist-letters-test-images-idx3-ubyte.gz", upright[:3])
    _idx(d / "emnist-letters-test-labels-idx1-ubyte.gz", np.array([1, 26, 5]))  # letters: labels 1-26
    assert _load("emnist:letters", tmp_path).y.tolist() == [0, 25, 4]
    with pytest.raises(ConfigError, match="unknown EMNIST split"):
        check_dataset_name("emnist:bogus")
    with pytest.raises(ConfigError, match="needs 'emnist:SPLIT'"):
        check_dataset_name("emnist")


def test_bad_idx_files_are_one_line_data_errors(tmp_path):
    d = tmp_path / "fashion-mnist"
    _idx(d / "t10k-images-idx3-ubyte.gz", _images(3))
    _idx(d / "t10k-labels-idx1-ubyte.gz", _images(3))  # images where labels belong: magic 0x803
    with pytest.raises(DataError, match="not an IDX file of labels .*0x00000803, expected 0x00000801"):
        _load("fashion-mnist", tmp_path)
    _idx(d / "t10k-labels-idx1-ubyte.gz", np.arange(3))
    raw = gzip.decompress((d / "t10k-images-idx3-ubyte.gz").read_bytes())
    (d / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(raw[:-100]))
    with pytest.raises(DataError, match="truncated"):
        _load("fashion-mnist", tmp_path)
    (d / "t10k-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="unreadable"):
        _load("fashion-mnist", tmp_path)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(DataError, match="no t10k-images-idx3-ubyte.gz"):
        _load("fashion-mnist", tmp_path / "elsewhere")


# --- Kuzushiji -----------------------------------------------------------------------------
def test_kmnist_and_k49_read_arr_0_of_their_npz_files(tmp_path):
    for prefix, k in (("kmnist", 10), ("k49", 49)):
        X, y = _images(5), RNG.integers(0, k, 5)
        d = tmp_path / prefix
        d.mkdir()
        np.savez_compressed(d / f"{prefix}-test-imgs.npz", X)  # positional: stored as arr_0, as the authors did
        np.savez_compressed(d / f"{prefix}-test-labels.npz", y)
        ds = _load(prefix, tmp_path)
        assert ds.n_classes == k and np.array_equal(ds.X, X.reshape(5, -1) / 255.0) and ds.y.tolist() == y.tolist()
    np.savez_compressed(tmp_path / "k49" / "k49-test-labels.npz", labels=y)
    with pytest.raises(DataError, match="no array 'arr_0'"):
        _load("k49", tmp_path)
    np.savez_compressed(tmp_path / "k49" / "k49-test-labels.npz", np.array([0, 1, 2, 3, 49]))
    with pytest.raises(DataError, match="k49 has 49 classes"):
        _load("k49", tmp_path)
    (tmp_path / "kmnist" / "kmnist-test-imgs.npz").write_bytes(b"PK\x03\x04 broken")
    with pytest.raises(DataError, match="not a readable .npz"):
        _load("kmnist", tmp_path)


# --- CIFAR-10 ------------------------------------------------------------------------------
def _cifar_bin(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(bytes([int(c)]) + x.tobytes() for x, c in zip(X, y)))


def _py2(b: bytes) -> bytes:
    """A Python 2 str: SHORT_BINSTRING or BINSTRING."""
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<I", len(b)) + b


def _cifar_pickle(X: np.ndarray, y: list[int]) -> bytes:
    """A batch as the authors wrote it: cPickle protocol 2 under Python 2 and numpy 1.x (py2 str, not bytes)."""
    n = X.shape[0]
    dtype = (b"cnumpy\ndtype\n" + _py2(b"u1") + b"K\x00K\x01\x87R"
             + b"(K\x03" + _py2(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb")
    array = (b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n" + b"K\x00\x85" + _py2(b"b") + b"\x87R"
             + b"(K\x01" + b"J" + struct.pack("<i", n) + b"M" + struct.pack("<H", 3072) + b"\x86" + dtype
             + b"\x89" + _py2(X.reshape(n, 3072).tobytes()) + b"tb")
    labels = b"](" + b"".join(b"K" + bytes([v]) for v in y) + b"e"
    names = b"](" + b"".join(_py2(f"img_{i}.png".encode()) for i in range(n)) + b"e"
    return (b"\x80\x02}(" + _py2(b"batch_label") + _py2(b"testing batch 1 of 1") + _py2(b"labels") + labels
            + _py2(b"data") + array + _py2(b"filenames") + names + b"u.")


def test_cifar10_binary_records_give_channel_first_images(tmp_path):
    X, y = _images(4, 32, 32, c=3), np.array([3, 0, 9, 1])
    _cifar_bin(tmp_path / "cifar-10-batches-bin" / "test_batch.bin", X, y)
    ds = _load("cifar10", tmp_path)
    assert ds.sample_shape == (3, 32, 32) and ds.n_classes == 10 and ds.meta["format"] == "bin"
    assert np.array_equal(ds.X, X.reshape(4, -1) / 255.0) and ds.y.tolist() == y.tolist()
    (tmp_path / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(
        (tmp_path / "cifar-10-batches-bin" / "test_batch.bin").read_bytes()[:-5])
    with pytest.raises(DataError, match="last record is truncated"):
        _load("cifar10", tmp_path, part="test", format="bin")


def test_cifar10_python_batches_load_as_the_authors_pickled_them(tmp_path):
    X, y = _images(3, 32, 32, c=3), [7, 2, 0]
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    (d / "test_batch").write_bytes(_cifar_pickle(X, y))
    ds = _load("cifar10", tmp_path, format="python")
    assert np.array_equal(ds.X, X.reshape(3, -1) / 255.0) and ds.y.tolist() == y
    with pytest.raises(DataError, match="md5 .* differs from the published 40351d58"):
        _load("cifar10", tmp_path, format="python", verify_md5=True)


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("payload", ["os.system", "other global", "not a dict"])
def test_a_cifar_pickle_holding_anything_else_is_refused_without_running_it(tmp_path, payload):
    marker = tmp_path / "pwned"
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    doc = {"os.system": {b"data": _Evil(marker), b"labels": []},
           "other global": {b"data": np.zeros((1, 3072), np.uint8), b"labels": [1], b"x": Path("/")},
           "not a dict": [1, 2, 3]}[payload]
    (d / "test_batch").write_bytes(pickle.dumps(doc, protocol=2))
    with pytest.raises(DataError, match="cifar-10-batches-py/test_batch: not a CIFAR-10 Python batch") as info:
        _load("cifar10", tmp_path)
    assert "\n" not in str(info.value)
    assert not marker.exists()  # the pickle's call never ran


def test_missing_folders_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="no cifar-10-batches-bin or cifar-10-batches-py/ folder"):
        _load("cifar10", tmp_path)
    monkeypatch.delenv("FEDRAY_DATA_DIR", raising=False)
    with pytest.raises(DataError, match="needs a data directory"):
        load_dataset("kmnist", None)
    with pytest.raises(DataError, match="is not a folder"):
        _load(f"images:{tmp_path / 'nowhere'}", tmp_path)
    with pytest.raises(ConfigError, match="unknown option"):
        _load("k49", tmp_path, verify_md5=True)


# --- a user's image folder -----------------------------------------------------------------
def test_image_folder_reads_one_class_per_sub_folder(tmp_path):
    from PIL import Image

    grey = _images(4, 12, 12)
    for i, cls in enumerate(["cat", "cat", "dog", "emu"]):
        (tmp_path / "pics" / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(grey[i], mode="L").save(tmp_path / "pics" / cls / f"{i}.png")
    ds = _load("images:pics", tmp_path)  # relative: found under data.data_dir
    assert ds.meta["class_names"] == ["cat", "dog", "emu"] and ds.y.tolist() == [0, 0, 1, 2]
    assert ds.sample_shape == (1, 12, 12) and np.array_equal(ds.X, grey.reshape(4, -1) / 255.0)
    rgb = _images(1, 12, 12, c=3)[0].transpose(1, 2, 0)
    Image.fromarray(rgb, mode="RGB").save(tmp_path / "pics" / "emu" / "9.jpg", quality=95)
    colour = _load(f"images:{tmp_path / 'pics'}", tmp_path)
    assert colour.sample_shape == (3, 12, 12) and colour.y.tolist() == [0, 0, 1, 2, 2]
    Image.fromarray(grey[0][:6], mode="L").save(tmp_path / "pics" / "dog" / "small.png")
    with pytest.raises(DataError, match="small.png: 12x6 pixels, but .* has 12x12"):
        _load(f"images:{tmp_path / 'pics'}", tmp_path)
    (tmp_path / "pics" / "dog" / "small.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(DataError, match="small.png: not a readable image"):
        _load(f"images:{tmp_path / 'pics'}", tmp_path)
