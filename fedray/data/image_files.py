"""Readers of the image file formats the papers' data sets are distributed in (no downloads).

* IDX (``*-idx3-ubyte[.gz]``, ``*-idx1-ubyte[.gz]``): MNIST, Fashion-MNIST, EMNIST, KMNIST;
* CIFAR-10 binary batches (records of 1 label byte and 3072 pixel bytes);
* CIFAR-10 Python batches: pickles, read by an unpickler that admits only the
  numpy array reconstruction the format needs, so a pickle cannot run code;
* NumPy ``.npz`` archives with the key ``arr_0`` (KMNIST, Kuzushiji-49), read without pickle;
* a folder of PNG or JPEG images, one sub-folder per class (as torchvision's ImageFolder).

Every unreadable file is one :class:`~fedray.core.errors.DataError` naming it.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import DataError

IDX_IMAGES_MAGIC = 0x00000803  #: unsigned bytes, 3 dimensions
IDX_LABELS_MAGIC = 0x00000801  #: unsigned bytes, 1 dimension
CIFAR_RECORD = 1 + 3 * 32 * 32
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")

#: md5 of the distributed files, as torchvision's dataset classes list them (``data.options.verify_md5``).
KNOWN_MD5: dict[str, dict[str, str]] = {
    "mnist": {"train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
              "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
              "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
              "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"},
    "fashion-mnist": {"train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                      "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
                      "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
                      "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310"},
    "kmnist": {"train-images-idx3-ubyte.gz": "bdb82020997e1d708af4cf47b453dcf7",
               "train-labels-idx1-ubyte.gz": "e144d726b3acfaa3e44228e80efcd344",
               "t10k-images-idx3-ubyte.gz": "5c965bf0a639b31b8f53240b1b52f4d7",
               "t10k-labels-idx1-ubyte.gz": "7320c461ea6c1c855c0b718fb2a4b134"},
    "cifar10": {"data_batch_1": "c99cafc152244af753f735de768cd75f", "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
                "data_batch_3": "54ebc095f3ab1f0389bbae665268c751", "data_batch_4": "634d18415352ddfa80567beed471001a",
                "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb", "test_batch": "40351d587109b95175f43aff81a1287e"},
}


def md5_of(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_md5(dataset: str, paths: list[Path]) -> None:
    """Raise :class:`DataError` for a file whose md5 differs from the published one (files without one pass)."""
    known = KNOWN_MD5.get(dataset, {})
    for p in paths:
        want = known.get(p.name)
        if want is not None and md5_of(p) != want:
            raise DataError(f"{p}: md5 {md5_of(p)} differs from the published {want}; the file is damaged or "
                            f"not the authors' {dataset} file")


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise DataError(f"data.dataset: file {str(path)!r} does not exist")
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: unreadable ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None


def read_idx(path: Path, magic: int) -> np.ndarray:
    """An IDX array of unsigned bytes; ``magic`` is ``IDX_IMAGES_MAGIC`` or ``IDX_LABELS_MAGIC``."""
    raw = _read_bytes(path)
    if len(raw) < 4 or struct.unpack(">I", raw[:4])[0] != magic:
        got = f"0x{struct.unpack('>I', raw[:4])[0]:08x}" if len(raw) >= 4 else "nothing"
        raise DataError(f"{path}: not an IDX file of {'images' if magic == IDX_IMAGES_MAGIC else 'labels'} "
                        f"(magic number {got}, expected 0x{magic:08x})")
    ndim = magic & 0xFF
    if len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated IDX header")
    dims = struct.unpack(">" + "I" * ndim, raw[4: 4 + 4 * ndim])
    need = int(np.prod(dims, dtype=np.int64))
    have = len(raw) - 4 - 4 * ndim
    if have != need:
        raise DataError(f"{path}: the header announces {dims} = {need} bytes of data but the file holds {have} "
                        f"({'truncated' if have < need else 'trailing bytes'})")
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def read_idx_pair(images: Path, labels: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, H, W) and labels (n,) of an IDX pair, with their counts checked against each other."""
    X, y = read_idx(images, IDX_IMAGES_MAGIC), read_idx(labels, IDX_LABELS_MAGIC)
    if X.shape[0] != y.shape[0]:
        raise DataError(f"{images}: {X.shape[0]} images but {labels.name} has {y.shape[0]} labels")
    return X, y.astype(np.int64)


def read_cifar_bin(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A CIFAR-10 binary batch: images (n, 3, 32, 32) uint8 and labels (n,)."""
    raw = _read_bytes(path)
    if not raw or len(raw) % CIFAR_RECORD:
        raise DataError(f"{path}: {len(raw)} bytes is not a whole number of CIFAR-10 records of {CIFAR_RECORD} bytes "
                        "(1 label byte + 3072 pixel bytes); the last record is truncated")
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(-1, CIFAR_RECORD)
    labels = rec[:, 0].astype(np.int64)
    if labels.max() > 9:
        row = int(np.argmax(labels > 9))
        raise DataError(f"{path}: record {row} has label {int(labels[row])}; CIFAR-10 labels lie in 0-9")
    return rec[:, 1:].reshape(-1, 3, 32, 32), labels


_RECONSTRUCT = np.zeros(0).__reduce__()[0]  # numpy's array reconstruction function, whatever module holds it
_CIFAR_GLOBALS = {("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
                  ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
                  ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}


class _CifarUnpickler(pickle.Unpickler):
    """Admits only numpy's array reconstruction: dicts, lists, bytes, str and ints need no global.
    Every array it builds, through ``_reconstruct`` or by calling ``numpy.ndarray`` itself, is capped:
    the arrays of one file may not declare more bytes together than the file holds (their data must
    be in it), checked before anything is allocated."""

    def __init__(self, file: Any, *, limit: int, **kw: Any) -> None:
        super().__init__(file, **kw)
        self.limit = int(limit)
        self.declared = 0  # bytes declared by the arrays built so far

    def _claim(self, shape: Any, dtype: Any) -> None:
        try:
            dims = np.asarray(shape if isinstance(shape, (tuple, list)) else (shape,), dtype=np.int64)
            if (dims < 0).any():
                raise ValueError("a negative dimension")
            size = int(np.prod(dims, dtype=np.int64)) * np.dtype(dtype).itemsize
        except (TypeError, ValueError, OverflowError) as exc:
            raise pickle.UnpicklingError(f"bad array declaration ({exc})") from None
        self.declared += size
        if size > self.limit or self.declared > self.limit:
            raise pickle.UnpicklingError(f"an array declares {size} bytes, more than the file's {self.limit} "
                                         f"(with the arrays before it: {self.declared})")

    def _reconstruct(self, subtype: Any, shape: Any, dtype: Any) -> Any:
        self._claim(shape, dtype)
        return _RECONSTRUCT(np.ndarray if subtype == self._ndarray else subtype, shape, dtype)

    def _ndarray(self, shape: Any, dtype: Any = float, *args: Any) -> Any:
        """``numpy.ndarray(shape, dtype, ...)`` as a pickle may call it: capped like any other array."""
        self._claim(shape, dtype)
        return np.ndarray(shape, dtype, *args)

    def find_class(self, module: str, name: str) -> Any:
        obj = _CIFAR_GLOBALS.get((module, name))
        if obj is None:
            raise pickle.UnpicklingError(f"refused {module}.{name}: a CIFAR-10 batch holds only numpy arrays, "
                                         "lists, bytes and numbers")
        if obj is np.ndarray:
            return self._ndarray
        return self._reconstruct if obj is _RECONSTRUCT else obj


def read_cifar_pickle(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A CIFAR-10 Python batch (a pickled dict with ``data`` and ``labels``), read without running code."""
    raw = _read_bytes(path)
    try:
        doc = _CifarUnpickler(io.BytesIO(raw), limit=len(raw), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            struct.error) as exc:
        raise DataError(f"{path}: not a CIFAR-10 Python batch ({type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:200]})") from None
    if not isinstance(doc, dict):
        raise DataError(f"{path}: not a CIFAR-10 Python batch (a {type(doc).__name__}, not a dict)")
    data = doc.get(b"data", doc.get("data"))
    labels = doc.get(b"labels", doc.get("labels"))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{path}: 'data' must be a uint8 array of shape (n, 3072)")
    if not isinstance(labels, list) or len(labels) != data.shape[0] or not all(
            isinstance(v, int) and 0 <= v <= 9 for v in labels):
        raise DataError(f"{path}: 'labels' must be a list of {data.shape[0]} integers in 0-9")
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


def read_npz(path: Path) -> np.ndarray:
    """The array ``arr_0`` of a ``.npz`` archive (object arrays refused: no pickle is read)."""
    if not path.is_file():
        raise DataError(f"data.dataset: file {str(path)!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as npz:
            if "arr_0" not in npz.files:
                raise DataError(f"{path}: no array 'arr_0' (it has {npz.files})")
            return npz["arr_0"]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:200]})") from None


def read_image_folder(folder: Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Images (n, C, H, W) uint8, labels and class names of a folder with one sub-folder of images per class.

    Classes are the sub-folders in sorted order (as torchvision's ImageFolder). Greyscale images give one
    channel; if any image has colour, all are read as RGB. All images must have the same size.
    """
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise DataError("data.dataset: images:FOLDER reads PNG and JPEG files with Pillow; pip install pillow"
                        ) from None
    if not folder.is_dir():
        raise DataError(f"data.dataset: images: {str(folder)!r} is not a folder")
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    files = [(f, i) for i, c in enumerate(classes) for f in sorted((folder / c).iterdir())
             if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise DataError(f"data.dataset: images: {str(folder)!r} has no sub-folder of PNG or JPEG files "
                        "(one sub-folder per class)")
    opened = []
    for f, _ in files:
        try:
            with Image.open(f) as im:
                im.load()
                opened.append(im.copy())
        except (OSError, UnidentifiedImageError) as exc:
            raise DataError(f"{f}: not a readable image ({type(exc).__name__})") from None
    mode = "L" if all(im.mode in ("L", "1") for im in opened) else "RGB"
    size = opened[0].size
    arrays = []
    for (f, _), im in zip(files, opened):
        if im.size != size:
            raise DataError(f"{f}: {im.size[0]}x{im.size[1]} pixels, but {files[0][0].name} has {size[0]}x{size[1]}; "
                            "all images must have the same size")
        a = np.asarray(im.convert(mode), dtype=np.uint8)
        arrays.append(a[None] if mode == "L" else a.transpose(2, 0, 1))
    present = sorted({i for _, i in files})
    if len(present) < len(classes):
        empty = [classes[i] for i in range(len(classes)) if i not in present]
        raise DataError(f"data.dataset: images: class folder(s) {empty} under {str(folder)!r} hold no PNG or JPEG file")
    return np.stack(arrays), np.array([i for _, i in files], dtype=np.int64), tuple(classes)
