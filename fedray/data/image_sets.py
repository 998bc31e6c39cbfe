"""The image data sets of the papers, read in their authors' distribution formats.

Each loader reads a folder under ``data.data_dir`` (or ``$FEDRAY_DATA_DIR``) and
never downloads; each gives the same :class:`~fedray.data.datasets.Dataset` as
``mnist``: images flattened to values in [0, 1] (kept as 8-bit codes until a client's shard is cut,
``Dataset.pixel_scale``; :func:`~fedray.data.datasets.load_dataset` gives float64 values), ``sample_shape``
``(C, H, W)``, integer labels, and ``meta["class_names"]``.

==================  ==========================================================================
``femnist``         LEAF's FEMNIST JSON shards (``train/``, ``test/``); writers are the clients
                    (partition ``by_writer``), with LEAF's own train/test split per writer
``cifar10``         CIFAR-10, binary version (``cifar-10-batches-bin/``) or Python version
                    (``cifar-10-batches-py/``, read by a loader that cannot execute code)
``emnist:SPLIT``    EMNIST IDX files (``emnist-SPLIT-test-images-idx3-ubyte.gz``...), un-transposed
``fashion-mnist``   Fashion-MNIST IDX files (MNIST's file names, in ``fashion-mnist/``)
``kmnist``, ``k49`` Kuzushiji-MNIST and Kuzushiji-49 ``.npz`` files (key ``arr_0``)
``images:FOLDER``   a user's images: one sub-folder of PNG or JPEG files per class
==================  ==========================================================================
"""
from __future__ import annotations

import logging
import string
from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.data import image_files as files
from fedray.data.datasets import IMAGE_SETS, Dataset, ImageSet, require_dir
from fedray.data.femnist import CLASS_SUBSETS, FEMNIST_CLASS_NAMES, read_femnist

log = logging.getLogger(__name__)

PART_OPTION = {"part": "which of the distributed parts to read: 'test' (default, as mnist), 'train' or 'all' "
                       "(train then test)"}


def _names(d: int) -> tuple[str, ...]:
    return tuple(f"px{i}" for i in range(d))


def _part(options: dict[str, Any]) -> tuple[str, ...]:
    part = options.get("part", "test")
    if part not in ("train", "test", "all"):
        raise ConfigError(f"data.options.part: must be 'train', 'test' or 'all'; got {part!r}")
    return ("train", "test") if part == "all" else (part,)


def _verify(options: dict[str, Any]) -> bool:
    """``data.options.verify_md5``: true or false (a string such as "no" is not taken as true)."""
    flag = options.get("verify_md5", False)
    if not isinstance(flag, bool):
        raise ConfigError(f"data.options.verify_md5: must be true or false; got {flag!r}")
    return flag


def _images(images: np.ndarray, labels: np.ndarray, name: str, class_names: tuple[str, ...],
            meta: dict[str, Any] | None = None) -> Dataset:
    """A Dataset of uint8 images (n, H, W) or (n, C, H, W) with values in [0, 1]: the pixels stay 8-bit codes
    (a byte a value; :meth:`~fedray.data.datasets.Dataset.rows` gives values), so that the pooled set costs
    what its files hold, not eight times that, in the driver and in each process that cuts shards from it."""
    shape = tuple(int(s) for s in images.shape[1:])
    shape = (1, *shape) if len(shape) == 2 else shape
    X = np.ascontiguousarray(images, dtype=np.uint8).reshape(images.shape[0], -1)
    return Dataset(X, np.asarray(labels, dtype=np.int64), _names(X.shape[1]), shape, name,
                   meta={"class_names": list(class_names), **(meta or {})}, pixel_scale=255.0)


def _sub(root: Path, names: tuple[str, ...], probe: str, what: str, hint: str) -> Path:
    """The first of ``root/NAME`` (or ``root`` itself) that holds ``probe``."""
    for cand in (*(root / n for n in names), root):
        if list(cand.glob(probe)):
            return cand
    raise DataError(f"data.dataset: {what}: no {hint} under {str(root)!r} (nor in its {names[0]}/ sub-folder)")


# --- femnist -----------------------------------------------------------------------------
def load_femnist(arg: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    """LEAF's FEMNIST: every writer's rows, LEAF's split kept in ``is_test``, writers in ``groups``."""
    root = require_dir(ddir, "femnist")
    data = read_femnist(root, str(options.get("classes", "all")))
    return Dataset(data.X, data.y, _names(784), (1, 28, 28), "femnist", groups=data.writers,
                   meta={"class_names": list(data.class_names)}, is_test=data.is_test)


IMAGE_SETS.register("femnist", ImageSet(
    load_femnist,
    "FEMNIST (LEAF): 28x28 handwritten characters by writer, 62 classes (0-9, A-Z, a-z); one client per writer "
    "(partition by_writer) with LEAF's own train/test rows",
    "femnist/train/*.json and femnist/test/*.json (LEAF's JSON shards: users, num_samples, user_data)",
    "https://github.com/TalwalkarLab/leaf (data/femnist: ./preprocess.sh -s niid --sf 0.05 -k 0 -t sample)",
    {"classes": f"labels kept, renumbered from 0: {', '.join(CLASS_SUBSETS)} (letters: 52 classes, A-Z then "
                "a-z; default all)"}, natural_partition="by_writer"))


# --- IDX sets: EMNIST and Fashion-MNIST ---------------------------------------------------
EMNIST_SPLITS: dict[str, tuple[str, ...]] = {
    "byclass": FEMNIST_CLASS_NAMES,
    "bymerge": tuple(c for c in FEMNIST_CLASS_NAMES if not (c.islower() and c in "cijklmopsuvwxyz")),
    "balanced": tuple(c for c in FEMNIST_CLASS_NAMES if not (c.islower() and c in "cijklmopsuvwxyz")),
    "letters": tuple(string.ascii_lowercase),  # labels 1-26 in the files (upper and lower case merged), here 0-25
    "digits": tuple(string.digits),
    "mnist": tuple(string.digits),
}
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot")
IDX_PREFIX = {"train": "train", "test": "t10k"}
VERIFY_OPTION = {"verify_md5": "check every file read against the md5 its authors published (as listed by "
                                "torchvision; default false)"}


def _idx_parts(folder: Path, names: dict[str, tuple[str, str]], dataset: str,
               options: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels of the requested parts; ``names[part] = (images file, labels file)``."""
    Xs, ys = [], []
    for part in _part(options):
        img, lab = folder / names[part][0], folder / names[part][1]
        if _verify(options):
            files.verify_md5(dataset, [img, lab])
        X, y = files.read_idx_pair(img, lab)
        Xs.append(X)
        ys.append(y)
    return np.concatenate(Xs), np.concatenate(ys)


def check_emnist(split: str) -> None:
    if split not in EMNIST_SPLITS:
        raise ConfigError(f"data.dataset: unknown EMNIST split {split!r}; choose one of {', '.join(EMNIST_SPLITS)}")


def load_emnist(split: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    """EMNIST ``split`` from its IDX files; the stored images are transposed, so they are transposed back."""
    check_emnist(split)
    root = require_dir(ddir, f"emnist:{split}")
    names = {p: (f"emnist-{split}-{p}-images-idx3-ubyte.gz", f"emnist-{split}-{p}-labels-idx1-ubyte.gz")
             for p in ("train", "test")}
    probe = names[_part(options)[0]][0]
    folder = _sub(root, ("emnist", "gzip", "EMNIST/raw"), probe, f"emnist:{split}", probe)
    X, y = _idx_parts(folder, names, "emnist", options)
    X = X.transpose(0, 2, 1)
    class_names = EMNIST_SPLITS[split]
    if split == "letters":
        y = y - 1
    classes = str(options.get("classes", "all"))
    if classes != "all":
        if split != "byclass" or classes not in CLASS_SUBSETS:
            raise ConfigError(f"data.options.classes: {classes!r} applies to emnist:byclass only, as one of "
                              f"{', '.join(CLASS_SUBSETS)}; got it for emnist:{split}")
        keep = CLASS_SUBSETS[classes]
        mask = (y >= keep.start) & (y < keep.stop)
        X, y, class_names = X[mask], y[mask] - keep.start, class_names[keep.start:keep.stop]
    if y.size and (y.min() < 0 or y.max() >= len(class_names)):
        raise DataError(f"emnist:{split}: labels {int(y.min())} to {int(y.max())} do not fit the split's "
                        f"{len(class_names)} classes")
    return _images(X, y, f"emnist:{split}", class_names)


def load_fashion(arg: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    """Fashion-MNIST from its IDX files (MNIST's file names, in a fashion-mnist/ sub-folder)."""
    root = require_dir(ddir, "fashion-mnist")
    names = {p: (f"{IDX_PREFIX[p]}-images-idx3-ubyte.gz", f"{IDX_PREFIX[p]}-labels-idx1-ubyte.gz")
             for p in ("train", "test")}
    probe = names[_part(options)[0]][0]
    folder = _sub(root, ("fashion-mnist", "fashion_mnist", "FashionMNIST/raw"), probe, "fashion-mnist", probe)
    X, y = _idx_parts(folder, names, "fashion-mnist", options)
    return _images(X, y, "fashion-mnist", FASHION_CLASSES)


IMAGE_SETS.register("emnist", ImageSet(
    load_emnist,
    "EMNIST (Cohen et al. 2017): 28x28 handwritten characters; splits byclass (62 classes), bymerge and balanced "
    "(47), letters (26, cases merged), digits and mnist (10); byclass with classes: letters gives the FLACC "
    "paper's 52 letter classes",
    "emnist-SPLIT-{train,test}-{images-idx3,labels-idx1}-ubyte.gz (the gzip/ folder of the authors' gzip.zip)",
    "https://www.nist.gov/itl/products-and-services/emnist-dataset (gzip.zip)",
    {**PART_OPTION, "classes": f"emnist:byclass only: {', '.join(CLASS_SUBSETS)} (renumbered from 0; default all)"},
    arg="SPLIT", check=check_emnist))
IMAGE_SETS.register("fashion-mnist", ImageSet(
    load_fashion, "Fashion-MNIST (Xiao et al. 2017): 28x28 grey images of 10 kinds of clothing",
    "fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz",
    "https://github.com/zalandoresearch/fashion-mnist", {**PART_OPTION, **VERIFY_OPTION}))


# --- Kuzushiji: KMNIST and K49 -------------------------------------------------------------
KMNIST_CLASSES = ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo")


def _kuzushiji(prefix: str, n_classes: int, ddir: Path | None,
               options: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``PREFIX-{train,test}-{imgs,labels}.npz`` (key ``arr_0``); KMNIST also as IDX files in kmnist/."""
    root = require_dir(ddir, prefix)
    parts = _part(options)
    probe = f"{prefix}-{parts[0]}-imgs.npz"
    subs = ("kmnist", "KMNIST/raw") if prefix == "kmnist" else ("k49", "kuzushiji49")
    try:
        folder = _sub(root, subs, probe, prefix, probe)
    except DataError:
        if prefix != "kmnist":
            raise
        names = {p: (f"{IDX_PREFIX[p]}-images-idx3-ubyte.gz", f"{IDX_PREFIX[p]}-labels-idx1-ubyte.gz")
                 for p in ("train", "test")}
        idx_probe = names[parts[0]][0]
        for cand in (root / s for s in subs):
            if (cand / idx_probe).is_file():
                return _idx_parts(cand, names, "kmnist", options)
        raise
    if _verify(options):
        raise ConfigError(f"data.options.verify_md5: md5 values are published for KMNIST's IDX files only, not for "
                          f"{prefix}'s .npz files")
    Xs, ys = [], []
    for part in parts:
        X = files.read_npz(folder / f"{prefix}-{part}-imgs.npz")
        y = files.read_npz(folder / f"{prefix}-{part}-labels.npz")
        where = folder / f"{prefix}-{part}-imgs.npz"
        if X.dtype != np.uint8 or X.ndim != 3:
            raise DataError(f"{where}: arr_0 must be uint8 images of shape (n, H, W); got {X.dtype} {X.shape}")
        if y.ndim != 1 or y.shape[0] != X.shape[0] or not np.issubdtype(y.dtype, np.integer):
            raise DataError(f"{where}: {X.shape[0]} images but the labels file holds {y.dtype} {y.shape}")
        if y.size and (y.min() < 0 or y.max() >= n_classes):
            raise DataError(f"{where}: labels {int(y.min())} to {int(y.max())}; {prefix} has {n_classes} classes")
        Xs.append(X)
        ys.append(y.astype(np.int64))
    return np.concatenate(Xs), np.concatenate(ys)


def load_kmnist(arg: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    X, y = _kuzushiji("kmnist", 10, ddir, options)
    return _images(X, y, "kmnist", KMNIST_CLASSES)


def load_k49(arg: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    X, y = _kuzushiji("k49", 49, ddir, options)
    return _images(X, y, "k49", tuple(f"k49-{i}" for i in range(49)))


_KUZUSHIJI = "https://github.com/rois-codh/kmnist (Clanuwat et al. 2018)"
IMAGE_SETS.register("kmnist", ImageSet(
    load_kmnist, "Kuzushiji-MNIST: 28x28 cursive Japanese characters, 10 classes",
    "kmnist/kmnist-{train,test}-{imgs,labels}.npz (key arr_0), or its IDX files {train,t10k}-*-ubyte.gz in kmnist/",
    _KUZUSHIJI, {**PART_OPTION, "verify_md5": "IDX files only: check them against the md5 torchvision lists"}))
IMAGE_SETS.register("k49", ImageSet(
    load_k49, "Kuzushiji-49: 28x28 cursive Japanese characters, 49 classes (unbalanced)",
    "k49/k49-{train,test}-{imgs,labels}.npz (key arr_0)", _KUZUSHIJI, dict(PART_OPTION)))


# --- CIFAR-10 ------------------------------------------------------------------------------
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR_FILES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}


def _cifar_folder(root: Path, fmt: str) -> tuple[Path, str]:
    cands = {"bin": "cifar-10-batches-bin", "python": "cifar-10-batches-py"}
    for f in (("bin", "python") if fmt == "auto" else (fmt,)):
        for base in (root, root / "cifar10", root / "cifar-10"):
            if (base / cands[f]).is_dir():
                return base / cands[f], f
    wanted = " or ".join(cands[f] for f in (("bin", "python") if fmt == "auto" else (fmt,)))
    raise DataError(f"data.dataset: cifar10: no {wanted}/ folder under {str(root)!r} (nor in its cifar10/ sub-folder)")


def _cifar_paths(folder: Path, fmt: str, parts: tuple[str, ...]) -> list[Path]:
    """The batch files of ``parts`` present in ``folder``: every training batch there (at least one), the test batch."""
    paths = []
    for part in parts:
        found = [folder / (f"{n}.bin" if fmt == "bin" else n) for n in CIFAR_FILES[part]]
        found = [p for p in found if p.is_file()]
        if not found:
            wanted = "data_batch_1..5" if part == "train" else "test_batch"
            raise DataError(f"data.dataset: cifar10: no {part} batch ({wanted}{'.bin' if fmt == 'bin' else ''}) "
                            f"in {str(folder)!r}")
        paths += found
    return paths


def load_cifar10(arg: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    """CIFAR-10 from the binary batches, or from the Python batches without running their pickles' code.

    ``part: train`` reads every training batch present (``data_batch_1`` to ``_5``, at least one); the batches
    read are logged and kept in ``meta["batches"]``."""
    fmt = options.get("format", "auto")
    if fmt not in ("auto", "bin", "python"):
        raise ConfigError(f"data.options.format: must be 'auto', 'bin' or 'python'; got {fmt!r}")
    folder, fmt = _cifar_folder(require_dir(ddir, "cifar10"), fmt)
    paths = _cifar_paths(folder, fmt, _part(options))
    if _verify(options):
        if fmt == "bin":
            raise ConfigError("data.options.verify_md5: md5 values are published for the Python batches only")
        files.verify_md5("cifar10", paths)
    read = files.read_cifar_bin if fmt == "bin" else files.read_cifar_pickle
    pairs = [read(p) for p in paths]
    X = np.concatenate([p[0] for p in pairs])
    y = np.concatenate([p[1] for p in pairs])
    batches = [p.name for p in paths]
    log.info("cifar10: read %d images from %s in %s", len(y), ", ".join(batches), folder)
    return _images(X, y, "cifar10", CIFAR_CLASSES, {"format": fmt, "batches": batches})


IMAGE_SETS.register("cifar10", ImageSet(
    load_cifar10, "CIFAR-10 (Krizhevsky 2009): 32x32 colour images, 10 classes",
    "cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin (binary version), or cifar-10-batches-py/"
    "{data_batch_1..5,test_batch} (Python version, read without executing code); part train reads the training "
    "batches present (at least one) and logs which",
    "https://www.cs.toronto.edu/~kriz/cifar.html",
    {**PART_OPTION, "format": "auto (the binary version where both are present), bin or python",
     "verify_md5": "Python version: check every batch against the md5 torchvision lists"}))


# --- a user's image folder ----------------------------------------------------------------
def load_image_folder(arg: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    """One sub-folder of PNG or JPEG images per class; a relative FOLDER is looked up under data.data_dir too."""
    folder = Path(arg).expanduser()
    if not folder.is_absolute() and not folder.is_dir() and ddir is not None and (ddir / folder).is_dir():
        folder = ddir / folder
    X, y, classes = files.read_image_folder(folder)
    return _images(X, y, f"images:{arg}", classes)


IMAGE_SETS.register("images", ImageSet(
    load_image_folder, "a user's images: one sub-folder of PNG or JPEG files per class (as torchvision's "
    "ImageFolder); greyscale stays one channel, otherwise RGB; all images of one size",
    "FOLDER/CLASS/*.png|*.jpg|*.jpeg", "the user (read with Pillow)", {}, arg="FOLDER"))
