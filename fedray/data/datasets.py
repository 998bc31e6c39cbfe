"""Data sources: the ways to name a data set in ``data.dataset``, one registry (:data:`DATA_SOURCES`).

``data.dataset`` is one string, ``NAME`` or ``NAME:ARG``; ``NAME`` is a registered :class:`DataSource`:

* ``blobs`` — Gaussian blobs generated per client (see :mod:`fedray.data.federation`);
* ``sklearn:NAME`` — scikit-learn's bundled ``iris``, ``wine``, ``digits``, ``breast_cancer``;
* ``benchmark:BATTERY/NAME`` — ``NAME.data.gz`` / ``NAME.labels0.gz`` files under
  ``data.data_dir`` (or ``$FEDRAY_DATA_DIR``), e.g. ``benchmark:sipu/s1``, or a set in the clustering
  benchmark's own text form, ``NAME.txt`` with ``NAME-gt.txt`` (``benchmark:g2/g2-2-30``);
* ``csv:PATH`` and ``parquet:PATH`` — the user's own table;
* ``mnist`` — the MNIST IDX files under ``data.data_dir`` (``mnist/`` sub-folder
  or the folder itself);
* ``bank`` — UCI Bank Marketing as Stallmann & Wilbik use it (:mod:`fedray.data.tables`);
* ``femnist``, ``cifar10``, ``emnist:SPLIT``, ``fashion-mnist``, ``kmnist``, ``k49``,
  ``images:FOLDER`` — image sets in their authors' formats under ``data.data_dir``
  (loaders in :mod:`fedray.data.image_sets`);
* ``scenario:NAME`` — named scenarios registered by :func:`register_scenario`;
* a user's own, registered with :func:`register_data_source` (``docs/extending.md``).

Loaded arrays are cached per process, so many clients hosted by one actor read a
file once.
"""
from __future__ import annotations

import functools
import gzip
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.core.registry import Registry

DATA_DIR_ENV = "FEDRAY_DATA_DIR"
SKLEARN_SETS = ("iris", "wine", "digits", "breast_cancer")


@dataclass(frozen=True)
class Dataset:
    """A pooled data set (features flattened to 2-D).

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,) or None
    feature_names : tuple of str
    sample_shape : tuple of int
        Shape of one sample before flattening (``(1, 8, 8)`` for digits images).
    name : str
    pixel_scale : float or None
        Where set, ``X`` holds 8-bit pixel codes (uint8, a byte a value) whose values are ``X / pixel_scale``:
        read them with :meth:`rows` (image sets are kept so, and shards are cut from them row by row).
    """

    X: np.ndarray
    y: np.ndarray | None
    feature_names: tuple[str, ...]
    sample_shape: tuple[int, ...]
    name: str = ""
    groups: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: Rows that are their writer's test rows in the distributed split (``femnist``), else None.
    is_test: np.ndarray | None = None
    pixel_scale: float | None = None

    def rows(self, idx: Any = slice(None)) -> np.ndarray:
        """Rows ``idx`` of ``X`` as values: float64 pixel values where ``X`` holds codes (the same bits as
        converting the whole array first), else ``X[idx]`` as it is."""
        return self.X[idx] if self.pixel_scale is None else self.X[idx].astype(np.float64) / self.pixel_scale

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_classes(self) -> int | None:
        """Classes of the data set: its declared class names where it has them (a class may have no row in a
        subset of writers), else the distinct labels."""
        if self.y is None:
            return None
        names = self.meta.get("class_names")
        return len(names) if names else int(len(np.unique(self.y)))


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """The data directory: the given one, else ``$FEDRAY_DATA_DIR``, else None."""
    if data_dir:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else None


@dataclass(frozen=True)
class DataSource:
    """One way to name a data set in ``data.dataset``: ``NAME`` or ``NAME:ARG``, registered once in
    :data:`DATA_SOURCES` (built-in sources register the same way a user's does).

    Attributes
    ----------
    load : callable
        ``load(arg, data_dir, options) -> Dataset``; ``arg`` is what follows ``NAME:`` (``""`` if nothing),
        ``data_dir`` a :class:`~pathlib.Path` or None, ``options`` the run's ``data.options``. A ``seeded``
        source is called with ``seed=`` too.
    summary, files, source : str
        What it is, the files it reads under ``data.data_dir`` (empty: none), where its authors distribute
        it (``fedray describe NAME``).
    options : dict of str to str
        ``data.options`` it accepts and their meaning; any other key is a ConfigError (unless ``open_options``).
    arg : str or None
        The placeholder of the part after ``NAME:`` (``"SPLIT"``, ``"PATH"``), None when it takes none.
    check : callable or None
        ``check(arg)`` raises :class:`ConfigError` for a bad ``arg`` before anything is read.
    defaults : dict
        Defaults of its ``options`` (shown by ``fedray describe``).
    open_options : bool
        Its options are the loader's to check (a scenario's keyword arguments, a table's columns).
    seeded : bool
        ``load`` also takes ``seed=`` (generated data).
    natural_partition : str or None
        The partition used when ``data.partition.name`` is unset (``by_writer`` for FEMNIST).
    data_options : callable or None
        ``data_options(data) -> dict``: options taken from the ``data`` section besides ``data.options``
        (a table's ``feature_columns``, ``label_column``, ``client_column``).
    federation : callable or None
        ``federation(arg, data, n_clients, seed, partition_name, partition_options) -> Federation | None``:
        builds the federation itself (generated data, a table read by each client), or None to split the
        pooled data set by the partition as usual.
    listed : tuple of str, or a callable returning a list of str
        How ``fedray list`` shows it when it is not one name (``sklearn:iris``, ...); default ``key(name)``.
    """

    load: Callable[..., Dataset]
    summary: str = ""
    files: str = ""
    source: str = ""
    options: dict[str, str] = field(default_factory=dict)
    arg: str | None = None
    check: Callable[[str], None] | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    open_options: bool = False
    seeded: bool = False
    natural_partition: str | None = None
    data_options: Callable[[Any], dict[str, Any]] | None = None
    federation: Callable[..., Any] | None = None
    listed: tuple[str, ...] | Callable[[], list[str]] = ()

    def key(self, name: str) -> str:
        return f"{name}:{self.arg}" if self.arg else name

    def shown(self, name: str) -> list[str]:
        return list(self.listed() if callable(self.listed) else self.listed) or [self.key(name)]


#: Former name of :class:`DataSource` (image data sets were the first registered sources).
ImageSet = DataSource

#: Defaults of the ``data.options`` the image data sets share (``fedray describe NAME``).
IMAGE_OPTION_DEFAULTS: dict[str, Any] = {"part": "test", "classes": "all", "format": "auto", "verify_md5": False}
#: Every data source, by the name before ``:`` in ``data.dataset`` (``sklearn``, ``benchmark``, ``csv``,
#: ``mnist``, ``femnist``, ``bank``, a user's own...). Modules that register built-in sources are imported on
#: first use.
DATA_SOURCES: Registry[DataSource] = Registry("data source", modules=(
    "fedray.data.sources", "fedray.data.image_sets", "fedray.data.federation", "fedray.data.tables"))
#: The image data sets are data sources like any other (kept under their former name).
IMAGE_SETS = DATA_SOURCES

#: Named scenarios (``scenario:NAME``): ``fn(seed, **options) -> Dataset``.
SCENARIOS: Registry[Callable[..., Dataset]] = Registry("scenario", modules=("fedray.data.scenarios",))


def register_scenario(name: str) -> Callable:
    """Register ``fn(seed, **options) -> Dataset`` as ``scenario:NAME``."""
    return SCENARIOS.register(name)


def register_data_source(name: str, source: DataSource | None = None) -> Any:
    """Register ``source`` as ``data.dataset: NAME`` (or ``NAME:ARG``); as a decorator above
    ``load(arg, data_dir, options) -> Dataset`` it registers ``DataSource(load)``."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigError(f"register_data_source: the name must be a non-empty string without ':'; got {name!r}")
    if source is not None:
        return DATA_SOURCES.register(name, source)

    def deco(fn: Callable[..., Dataset]) -> Callable[..., Dataset]:
        DATA_SOURCES.register(name, DataSource(fn, summary=(fn.__doc__ or "").strip().split("\n")[0]))
        return fn

    return deco


def available_datasets() -> list[str]:
    return [shown for name, src in DATA_SOURCES.entries().items() for shown in src.shown(name)]


#: Entry-point group of installed data sources: ``NAME = "package.module:SOURCE"`` (a :class:`DataSource`).
DATA_SOURCE_GROUP = "fedray.data_sources"


def _installed_source(kind: str) -> DataSource | None:
    """The data source an installed package declares as ``kind`` in :data:`DATA_SOURCE_GROUP`, registered."""
    found = [ep for ep in metadata.entry_points(group=DATA_SOURCE_GROUP) if ep.name == kind]
    if not found:
        return None
    try:
        obj = found[0].load()
    except Exception as exc:  # noqa: BLE001 - any error of the installed package
        raise ConfigError(f"data.dataset: the installed data source {kind!r} ({found[0].value}) failed to load: "
                          f"{type(exc).__name__}: {exc}") from None
    if not isinstance(obj, DataSource):
        raise ConfigError(f"data.dataset: the installed data source {kind!r} ({found[0].value}) is a "
                          f"{type(obj).__name__}, not a fedray.data.DataSource")
    return DATA_SOURCES.register(kind, obj)


def data_source(name: str) -> tuple[DataSource, str, str]:
    """The registered source of a ``data.dataset`` string, its name and its argument, checked before anything
    is read (:class:`ConfigError`: unknown name, a missing or unwanted argument, a bad argument)."""
    kind, _, rest = name.partition(":")
    src = DATA_SOURCES.get(kind) or (_installed_source(kind) if kind else None)
    if src is None:
        if kind == "arrays":
            raise ConfigError(f"data.dataset: {name!r} describes arrays passed from Python, which a configuration "
                              "file cannot hold; pass data=fedray.from_arrays(...) to fedray.run or fedray.Session")
        raise ConfigError(f"data.dataset: unknown dataset {name!r}; expected one of {', '.join(available_datasets())}")
    if src.arg and not rest:
        raise ConfigError(f"data.dataset: {kind!r} needs {src.key(kind)!r}")
    if not src.arg and rest:
        raise ConfigError(f"data.dataset: {kind!r} takes nothing after the name; got {name!r}")
    if src.check is not None:
        src.check(rest)
    return src, kind, rest


def check_dataset_name(name: str) -> None:
    """Raise :class:`ConfigError` for a dataset string fedray cannot read."""
    data_source(name)


def load_dataset(name: str, data_dir: str | None = None, seed: int = 0, **options: Any) -> Dataset:
    """Load a pooled data set by its ``data.dataset`` string, ``X`` as float64 values (images in [0, 1])."""
    ds = load_pooled(name, data_dir, seed, **options)
    return ds if ds.pixel_scale is None else replace(ds, X=ds.rows(), pixel_scale=None)


def load_pooled(name: str, data_dir: str | None = None, seed: int = 0, **options: Any) -> Dataset:
    """:func:`load_dataset` as cached per process: image pixels stay 8-bit codes (:attr:`Dataset.pixel_scale`),
    the form federations are built from and each client's shard is cut from (:meth:`Dataset.rows`)."""
    key = tuple(sorted((k, _hashable(v)) for k, v in options.items()))
    return _load_cached(name, str(resolve_data_dir(data_dir) or ""), int(seed), key)


def _hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


@functools.lru_cache(maxsize=8)
def _load_cached(name: str, data_dir: str, seed: int, key: tuple) -> Dataset:
    options = {k: v for k, v in key}
    src, kind, rest = data_source(name)
    if not src.open_options:
        unknown = sorted(set(options) - set(src.options))
        if unknown:
            raise ConfigError(f"data.options: unknown option(s) {unknown} for {kind}; allowed: "
                              f"{sorted(src.options) or 'none'}")
    ddir = Path(data_dir) if data_dir else None
    if src.seeded:
        return src.load(rest, ddir, options, seed=seed)
    return src.load(rest, ddir, options)


def require_dir(ddir: Path | None, what: str) -> Path:
    if ddir is None:
        raise DataError(
            f"data.data_dir: {what} needs a data directory; pass data.data_dir=... or set ${DATA_DIR_ENV}"
        )
    if not ddir.is_dir():
        raise DataError(f"data.data_dir: {str(ddir)!r} is not a directory")
    return ddir


def load_benchmark(rest: str, ddir: Path | None) -> Dataset:
    root = require_dir(ddir, f"benchmark:{rest}")
    battery, _, name = rest.partition("/")
    data_file = root / battery / f"{name}.data.gz"
    if not data_file.exists():
        text_file = root / battery / f"{name}.txt"
        if text_file.exists() and (root / battery / f"{name}-gt.txt").exists():
            return _load_text_benchmark(rest, text_file, root / battery / f"{name}-gt.txt")
        raise DataError(f"data.dataset: benchmark file {str(data_file)!r} does not exist (nor {name}.txt with "
                        f"{name}-gt.txt)")
    X = np.loadtxt(data_file, dtype=np.float64, ndmin=2)
    label_file = root / battery / f"{name}.labels0.gz"
    y = _encode(np.loadtxt(label_file, dtype=np.int64)) if label_file.exists() else None
    if y is not None and y.shape[0] != X.shape[0]:
        raise DataError(f"{label_file}: {y.shape[0]} labels for {X.shape[0]} rows")
    names = tuple(f"x{i}" for i in range(X.shape[1]))
    return Dataset(X, y, names, (X.shape[1],), f"benchmark:{rest}")


def _load_text_benchmark(rest: str, data_file: Path, label_file: Path) -> Dataset:
    """A set in the clustering basic benchmark's own text form: ``NAME.txt`` (whitespace-separated numbers,
    one point a row, e.g. the G2 sets ``g2-2-S.txt``) with its ground truth ``NAME-gt.txt`` (one label a row)."""
    try:
        X = np.loadtxt(data_file, dtype=np.float64, ndmin=2)
        y = _encode(np.loadtxt(label_file, dtype=np.int64, ndmin=1))
    except ValueError as exc:
        raise DataError(f"data.dataset: benchmark:{rest}: {_one_line(exc)}") from None
    if y.shape[0] != X.shape[0]:
        raise DataError(f"{label_file}: {y.shape[0]} labels for {X.shape[0]} rows")
    return Dataset(X, y, tuple(f"x{i}" for i in range(X.shape[1])), (X.shape[1],), f"benchmark:{rest}")


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise DataError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


#: ``data.options`` of ``mnist`` (``fedray describe mnist``).
MNIST_OPTIONS = {"part": "which MNIST files to read: 'test' (default: the 10,000 t10k images), 'train' (the "
                         "60,000 training images) or 'all' (train then test)"}
MNIST_PARTS = {"test": ("t10k",), "train": ("train",), "all": ("train", "t10k")}


def load_mnist(ddir: Path | None, options: dict[str, Any] | None = None) -> Dataset:
    """MNIST images (scaled to [0, 1]) and labels from the IDX files of ``options["part"]`` (default test)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(MNIST_OPTIONS))
    if unknown:
        raise ConfigError(f"data.options: unknown option(s) {unknown} for mnist; allowed: {sorted(MNIST_OPTIONS)}")
    part = options.get("part", "test")
    if part not in MNIST_PARTS:
        raise ConfigError(f"data.options.part: must be 'test', 'train' or 'all' for mnist; got {part!r}")
    root = require_dir(ddir, "mnist")
    prefixes = MNIST_PARTS[part]
    for cand in (root / "mnist", root):
        if all((cand / f"{p}-images-idx3-ubyte.gz").exists() for p in prefixes):
            images, labels = [], []
            for p in prefixes:
                img = _read_idx(cand / f"{p}-images-idx3-ubyte.gz")
                lab = _read_idx(cand / f"{p}-labels-idx1-ubyte.gz").astype(np.int64)
                if img.ndim != 3 or lab.shape != (img.shape[0],):
                    raise DataError(f"{cand / f'{p}-labels-idx1-ubyte.gz'}: {lab.shape} labels for images of "
                                    f"shape {img.shape}")
                images.append(img)
                labels.append(lab)
            X = np.concatenate(images).reshape(sum(i.shape[0] for i in images), -1)  # uint8 codes of X / 255
            names = tuple(f"px{i}" for i in range(X.shape[1]))
            return Dataset(X, np.concatenate(labels), names, (1, images[0].shape[1], images[0].shape[2]), "mnist",
                           pixel_scale=255.0)
    probe = ", ".join(f"{p}-images-idx3-ubyte.gz" for p in prefixes)
    raise DataError(f"data.dataset: no MNIST IDX files ({probe}, part {part!r}) under {str(root)!r}")


def read_table(path: str, kind: str, columns: list[str] | None = None, filters: Any = None, nrows: int | None = None):
    """Read a CSV or Parquet table into pandas (only ``columns``, rows matching ``filters``).

    Every way a file can be unusable (missing, a directory, empty, ragged, not UTF-8,
    Parquet read as CSV, corrupt Parquet) is one :class:`DataError` naming the file.
    """
    import pandas as pd

    p = Path(path).expanduser()
    where = f"data.dataset: {kind}:{path}"
    if not p.exists():
        raise DataError(f"data.dataset: file {str(p)!r} does not exist")
    if not p.is_file():
        raise DataError(f"{where} is not a file (a directory?); give the path of one {kind.upper()} file")
    if p.stat().st_size == 0:
        raise DataError(f"{where} is an empty file")
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(p, columns=columns, filters=filters)
        except (pa.ArrowException, OSError, ValueError) as exc:
            hint = "" if magic == b"PAR1" else " (it does not start like a Parquet file; a CSV? use csv:PATH)"
            raise DataError(f"{where} is not a readable Parquet file{hint}: {_one_line(exc)}") from None
        return table.to_pandas()
    if magic == b"PAR1":
        raise DataError(f"{where} is a Parquet file; use parquet:{path}")
    try:
        df = pd.read_csv(p, usecols=columns, nrows=nrows)
    except pd.errors.EmptyDataError:
        raise DataError(f"{where} has no columns (empty or blank file)") from None
    except pd.errors.ParserError as exc:
        raise DataError(f"{where} is not a well-formed CSV: {_one_line(exc)}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{where} is not UTF-8 text (byte {exc.start}); save it as UTF-8 CSV") from None
    except ValueError as exc:  # e.g. usecols naming a missing column
        raise DataError(f"{where}: {_one_line(exc)}") from None
    for col, op, val in filters or ():
        df = df[df[col].isin(val)] if op == "in" else df[df[col] == val]
    return df


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__


def check_columns(df: Any, feature_columns: list[str] | None, label_column: str | None,
                  client_column: str | None) -> None:
    """Refuse silent coercions, naming column and row (1-based data row of the file).

    * a would-be feature column with numbers and some non-numeric values (it would be
      dropped as "not numeric");
    * a missing label (it would become a class of its own);
    * a missing client id (the row would belong to no client).
    """
    import pandas as pd

    for col, what in ((label_column, "data.label_column"), (client_column, "data.client_column")):
        if col is not None and col in df.columns:
            na = df[col].isna().to_numpy()
            if na.any():
                row = int(np.flatnonzero(na)[0])
                raise DataError(f"{what}: column {col!r} has a missing value at row {row + 1} ({int(na.sum())} in "
                                "all); drop or fill those rows")
    skip = {label_column, client_column}
    cands = feature_columns if feature_columns else [c for c in df.columns if c not in skip]
    for col in cands:
        if col not in df.columns or is_numeric(df[col].dtype) or pd.api.types.is_bool_dtype(df[col].dtype):
            continue
        values = df[col]
        num = pd.to_numeric(values, errors="coerce")
        bad = num.isna().to_numpy() & values.notna().to_numpy()
        if bad.any() and (feature_columns or num.notna().any()):
            row = int(np.flatnonzero(bad)[0])
            raise DataError(f"data.feature_columns: column {col!r} has the non-numeric value {values.iloc[row]!r} "
                            f"at row {row + 1}; fix the value, or leave the column out with data.feature_columns")


def table_feature_columns(df_columns: list[str], dtypes: Any, feature_columns: list[str] | None,
                          label_column: str | None, client_column: str | None) -> list[str]:
    """The feature columns: the given ones, or every numeric column but label and client."""
    if feature_columns:
        missing = [c for c in feature_columns if c not in df_columns]
        if missing:
            raise DataError(f"data.feature_columns: columns {missing} are not in the table (it has {list(df_columns)})")
        return list(feature_columns)
    skip = {label_column, client_column}
    cols = [c for c in df_columns if c not in skip and is_numeric(dtypes[c])]
    if not cols:
        raise DataError("data.feature_columns: the table has no numeric feature columns")
    return cols


def load_table(path: str, kind: str, feature_columns: Any = None, label_column: str | None = None,
               client_column: str | None = None, filters: Any = None) -> Dataset:
    """Load a user's CSV / Parquet table as a :class:`Dataset` (``groups`` = client column)."""
    df = read_table(path, kind, filters=filters)
    for col, what in ((label_column, "label_column"), (client_column, "client_column")):
        if col is not None and col not in df.columns:
            raise DataError(f"data.{what}: column {col!r} is not in {path!r} (it has {list(df.columns)})")
    check_columns(df, list(feature_columns) if feature_columns else None, label_column, client_column)
    feats = table_feature_columns(list(df.columns), df.dtypes, list(feature_columns) if feature_columns else None,
                                  label_column, client_column)
    bad = [c for c in feats if not is_numeric(df[c].dtype)]
    if bad:
        raise DataError(f"data.feature_columns: columns {bad} are not numeric")
    X = df[feats].to_numpy(dtype=np.float64)
    y = None
    if label_column is not None:
        y = _encode(df[label_column].to_numpy())
    groups = df[client_column].to_numpy() if client_column is not None else None
    return Dataset(X, y, tuple(map(str, feats)), (len(feats),), f"{kind}:{path}", groups=groups)


def is_numeric(dtype: Any) -> bool:
    """Whether a column of ``dtype`` holds numbers a feature can be (booleans do not count)."""
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(dtype)) and not pd.api.types.is_bool_dtype(dtype)


def _encode(values: np.ndarray) -> np.ndarray:
    _, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int64)
