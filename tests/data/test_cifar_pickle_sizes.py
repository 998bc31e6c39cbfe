"""A CIFAR-10 Python batch cannot make the reader allocate more than the file holds."""
from __future__ import annotations

import pickle
import tracemalloc

import numpy as np
import pytest

from fedray.core.errors import DataError
from fedray.data.image_files import read_cifar_pickle

_RECONSTRUCT = np.zeros(0).__reduce__()[0]


class _Declares:
    """Pickles as numpy's array reconstruction with a declared shape of 614 MB and no data."""

    def __reduce__(self):
        return _RECONSTRUCT, (np.ndarray, (200_000, 3072), b"B")


def _peak_of_refused_read(tmp_path, batch: dict, match: str) -> int:
    """``batch`` pickled as a CIFAR-10 batch file and read: the reader refuses it (``match``); the peak
    bytes traced while it did."""
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps(batch))
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match=match):
            read_cifar_pickle(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_array_declaring_more_bytes_than_the_file_is_refused_before_it_is_allocated(tmp_path):
    """Property: reading a 0.4 MB batch never allocates the 614 MB it declares (on today's main the
    array was allocated before the shape check)."""
    batch = {b"data": _Declares(), b"labels": [0] * 100, b"pad": b"x" * 400_000}
    assert _peak_of_refused_read(tmp_path, batch, r"declares 614400000 bytes, more than the file's") < 50e6


def test_a_real_batch_still_reads(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=(10, 3072), dtype=np.uint8)
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": data, b"labels": list(range(10))}))
    X, y = read_cifar_pickle(path)
    assert X.shape == (10, 3, 32, 32) and (X.reshape(10, -1) == data).all() and y.tolist() == list(range(10))


class _CallsNdarray:
    """Pickles as a direct call ``numpy.ndarray((2_000_000_000,), "B")``: no data, 2 GB declared."""

    def __reduce__(self):
        return np.ndarray, ((2_000_000_000,), np.dtype("B"))


class _Small:
    """Pickles as a reconstructed array of 20,000 bytes, within the file's size (and without its data)."""

    def __reduce__(self):
        return _RECONSTRUCT, (np.ndarray, (20_000,), b"B")


@pytest.mark.parametrize(
    "payload, declared", [(_CallsNdarray(), 2_000_000_000), ([_Small() for _ in range(200)], 20_000)]
)
def test_every_array_the_reader_builds_is_capped_also_a_direct_ndarray_call(tmp_path, payload, declared):
    """`numpy.ndarray` is an admitted global (a subtype argument), so a batch could call it to allocate
    any size (a 4 MB file declared 6.14 GB); and many arrays each under the cap could add up far
    beyond it. Both are refused before the allocation: peak memory stays small."""
    batch = {b"data": payload, b"labels": [0], b"pad": b"x" * 50_000}
    assert _peak_of_refused_read(tmp_path, batch, rf"declares {declared} bytes.*more than the file's") < 50e6
