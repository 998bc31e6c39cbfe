"""Data from Python: NumPy arrays or pandas DataFrames split over clients.

:func:`from_arrays` returns an :class:`ArrayData`, accepted wherever ``data=`` is
(``fedray.run(data=...)``, ``fedray.Session(data=...)``, ``make_config(data=...)``
or as ``data.dataset``). Three ways to say who holds which rows:

* ``clients=`` — a vector naming the client of every row (like ``data.client_column``
  for a table; clients are ordered as a table's client column orders them, by the
  text of their names);
* ``X`` (and ``y``) as lists — one array per client;
* a pooled ``X`` split by a partition — ``n_clients=`` (default: ``federation.n_clients``)
  and ``partition=`` (a name or a mapping, as ``data.partition``; default ``iid``),
  drawn from the experiment seed exactly as for a file.

The configuration carries the object in ``data.dataset``; ``config.yaml`` and
``summary.json`` show a description instead of the rows (``"arrays: 3 clients, 150x4"``),
so an experiment on arrays cannot be re-run from its ``config.yaml``. On the Ray
runtime each client's shard is put in the object store once (one ``ray.put`` per
shard, its reference in the client's recipe, see
:func:`fedray.data.federation.put_shards`); the whole table is never broadcast.
On the local runtime the clients hold read-only views of the arrays given
(per-client arrays of dtype float64 are not copied; row subsets are).

Every check of file data applies with the same message (non-finite values, clients
with no samples, clients with different numbers of features); malformed input
(ragged lists, mismatched lengths, no rows, 3-D arrays, strings) is a one-line
:class:`~fedray.core.errors.DataError` or :class:`~fedray.core.errors.ConfigError`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError, DataTypeError
from fedray.core.seeding import PARTITION_STREAM, data_rng
from fedray.data.checks import check_descriptions, describe_shard
from fedray.data.datasets import is_numeric
from fedray.data.federation import ClientSpec, Federation
from fedray.data.partitions import available_partitions, partition_indices

_EXACT_INT = 2**53  # integers beyond this do not convert to float64 exactly


class ArrayData:
    """Arrays from Python, split (or to be split) over clients. Build with :func:`from_arrays`.

    Attributes
    ----------
    shards : list of (ndarray of shape (n_i, n_features), ndarray of shape (n_i,) or None) or None
        Per-client rows and label codes, when the split is given.
    X : ndarray of shape (n_samples, n_features) or None
        The pooled rows, when a partition splits them.
    y : ndarray of shape (n_samples,) or None
        Label codes of the pooled rows (``classes[y]`` are the labels given).
    client_names : list of str
    feature_names : tuple of str
    classes : ndarray or None
        The distinct labels, in the order of their codes.
    n_clients : int or None
        None for pooled data without ``n_clients`` (``federation.n_clients`` decides).
    partition : dict or None
        ``{"name": ..., **options}`` for pooled data.
    """

    def __init__(self, *, shards: list[tuple[np.ndarray, np.ndarray | None]] | None, X: np.ndarray | None,
                 y: np.ndarray | None, client_names: list[str], feature_names: tuple[str, ...],
                 classes: np.ndarray | None, n_clients: int | None, partition: dict[str, Any] | None) -> None:
        self.shards = shards
        self.X = X
        self.y = y
        self.client_names = client_names
        self.feature_names = feature_names
        self.classes = classes
        self.n_clients = n_clients
        self.partition = partition

    @property
    def n_samples(self) -> int:
        if self.shards is not None:
            return int(sum(s[0].shape[0] for s in self.shards))
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @property
    def has_labels(self) -> bool:
        return self.classes is not None

    def __repr__(self) -> str:
        return f"ArrayData({self})"

    def __str__(self) -> str:
        size = f"{self.n_samples}x{self.n_features}"
        if self.shards is not None:
            return f"arrays: {self.n_clients} clients, {size}"
        pname = (self.partition or {}).get("name", "iid")
        if self.n_clients is None:
            return f"arrays: {size}, {pname} split over federation.n_clients"
        return f"arrays: {self.n_clients} clients ({pname}), {size}"

    # The configuration is deep-copied when overrides are merged; the rows are read-only
    # and shared, never copied.
    def __copy__(self) -> ArrayData:
        return self

    def __deepcopy__(self, memo: dict) -> ArrayData:
        return self

    # --- federation --------------------------------------------------------------------
    def federation(self, n_clients: int | None, seed: int) -> Any:
        """One recipe per client (kind ``arrays``, the shard inline) and the checks of file data.

        Parameters
        ----------
        n_clients : int or None
            ``federation.n_clients`` (used for pooled data without its own ``n_clients``).
        seed : int
            The experiment seed (the partition is drawn as for a file: ``data_rng(seed, 1)``).

        Returns
        -------
        Federation
        """

        if self.shards is not None:
            shards = self.shards
            names = self.client_names
        else:
            k = self.n_clients or n_clients or 10
            n = self.X.shape[0]
            if k > n:
                raise DataError(f"federation.n_clients: {k} clients but the arrays have only n_samples={n} rows")
            part = dict(self.partition or {})
            pname = part.pop("name", None) or "iid"
            parts = partition_indices(pname, n, self.y, k, data_rng(seed, PARTITION_STREAM), **part)
            shards = [(_readonly(self.X[idx]), None if self.y is None else self.y[idx]) for idx in parts]
            names = [f"client-{i}" for i in range(len(parts))]
        feats = tuple(self.feature_names)
        specs = [ClientSpec(i, {"kind": "arrays", "shard": (Xi, yi), "features": feats}, None, names[i])
                 for i, (Xi, yi) in enumerate(shards)]
        _precheck(specs)
        n_classes = None if self.classes is None else len(self.classes)
        return Federation(specs, feats, (len(feats),), self.has_labels, n_classes)


def _precheck(specs: list[Any]) -> None:
    """The session's data checks, run here before any runtime starts (same messages)."""

    check_descriptions([describe_shard(s.client_id, s.name, s.source["shard"][0], None, s.source["features"],
                                       moments=False) for s in specs])


# --- from_arrays -----------------------------------------------------------------------
def from_arrays(X: Any, y: Any = None, clients: Any = None, n_clients: int | None = None,
                partition: str | dict[str, Any] | None = None) -> ArrayData:
    """Data from Python for ``fedray.run(data=...)``, ``fedray.Session(data=...)`` and the estimators.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features), DataFrame, or list of those (one per client)
        Numeric features. A DataFrame's columns must all be numeric (a non-numeric
        column is an error naming it; select the columns you mean to use).
    y : array-like of shape (n_samples,), list of those (one per client), column name, or None
        Ground-truth labels, used for evaluation only (unsupervised algorithms never see
        them) and for label-based partitions (``dirichlet``, ``classes_per_client``).
    clients : array-like of shape (n_samples,), column name, or None
        The client of each row; one client per distinct value.
    n_clients : int or None
        Split a pooled ``X`` over this many clients (default: ``federation.n_clients``).
    partition : str, dict or None
        How to split a pooled ``X``: a partition name (``iid``, ``dirichlet``,
        ``classes_per_client``, ``quantity_skew``) or ``{"name": ..., **options}`` as in
        ``data.partition``. Default ``iid``.

    Returns
    -------
    ArrayData

    Raises
    ------
    DataError
        Malformed arrays: not 2-D, no rows, ragged, non-numeric, lengths that disagree.
    ConfigError
        Arguments that contradict each other (``clients`` and ``n_clients``, a partition of
        data already split) or are out of range.

    Examples
    --------
    >>> import numpy as np, fedray
    >>> X = np.arange(12.0).reshape(6, 2)
    >>> str(fedray.from_arrays(X, clients=[0, 0, 1, 1, 2, 2]))
    'arrays: 3 clients, 6x2'
    """
    _check_split_args(clients, n_clients)
    if _is_per_client(X):
        return _from_lists(list(X), y, clients, n_clients, partition)
    X, y, clients = take_columns(X, y, clients)
    Xm, names = as_matrix(X, "X")
    n = Xm.shape[0]
    if n == 0:
        raise DataError(f"X: 0 rows (shape {Xm.shape}); need at least one sample")
    codes, classes = (None, None) if y is None else _encode_labels([_as_vector(y, "y", n)], "y")
    labels = None if codes is None else codes[0]
    if clients is not None:
        return _split_by_clients(Xm, names, labels, classes, clients, partition)
    return _pooled(Xm, names, labels, classes, n_clients, partition)


def _check_split_args(clients: Any, n_clients: Any) -> None:
    """``clients`` and ``n_clients`` exclude each other; ``n_clients`` is an integer >= 1 or None."""
    if clients is not None and n_clients is not None:
        raise ConfigError(f"from_arrays: pass clients= or n_clients=, not both (got n_clients={n_clients!r} "
                          "and a clients vector)")
    if n_clients is not None and (isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer))
                                  or n_clients < 1):
        raise ConfigError(f"from_arrays n_clients: must be an integer >= 1; got {n_clients!r}")


def _split_by_clients(Xm: np.ndarray, names: tuple[str, ...], labels: np.ndarray | None, classes: Any, clients: Any,
                      partition: Any) -> ArrayData:
    """A pooled matrix split by the ``clients`` vector: one shard per client, clients in name order."""
    if partition is not None:
        raise ConfigError(f"from_arrays partition: {partition!r} splits a pooled array; the rows are already "
                          "split by clients=")
    cid = _as_vector(clients, "clients", Xm.shape[0])
    order, names_c = _client_order(cid)
    counts = np.bincount(order, minlength=len(names_c))
    rows = np.split(np.argsort(order, kind="stable"), np.cumsum(counts)[:-1])
    shards = [(_readonly(Xm[r]), None if labels is None else labels[r]) for r in rows]
    return ArrayData(shards=shards, X=None, y=None, client_names=names_c, feature_names=names,
                     classes=classes, n_clients=len(shards), partition=None)


def _pooled(Xm: np.ndarray, names: tuple[str, ...], labels: np.ndarray | None, classes: Any, n_clients: int | None,
            partition: Any) -> ArrayData:
    """A pooled matrix that the federation splits by ``partition`` over ``n_clients`` clients."""
    part = _check_partition(partition)
    n = Xm.shape[0]
    if n_clients is not None and n_clients > n:
        raise DataError(f"from_arrays n_clients: {n_clients} clients but the arrays have only n_samples={n} rows")
    return ArrayData(shards=None, X=_readonly(Xm), y=labels, client_names=[],
                     feature_names=names, classes=classes, n_clients=None if n_clients is None else int(n_clients),
                     partition=part)


def _from_lists(Xs: list[Any], y: Any, clients: Any, n_clients: int | None, partition: Any) -> ArrayData:
    P = len(Xs)
    if clients is not None:
        raise ConfigError("from_arrays clients: X is already a list of per-client arrays; leave clients=None")
    if n_clients is not None:
        raise ConfigError(f"from_arrays n_clients: X is already a list of {P} per-client arrays; "
                          f"leave n_clients=None (got {n_clients!r})")
    if partition is not None:
        raise ConfigError(f"from_arrays partition: {partition!r} splits a pooled array; X is already split over "
                          f"{P} clients")
    mats = [as_matrix(x, f"X[{i}]") for i, x in enumerate(Xs)]
    names = mats[0][1]
    if y is not None:
        if not isinstance(y, (list, tuple)) or len(y) != P:
            got = f"a list of {len(y)}" if isinstance(y, (list, tuple)) else type(y).__name__
            raise DataError(f"y: with X as a list of {P} per-client arrays, y must be a list of {P} label arrays "
                            f"(or None); got {got}")
        ys = [_as_vector(v, f"y[{i}]", m.shape[0]) for i, (v, (m, _)) in enumerate(zip(y, mats))]
        codes, classes = _encode_labels(ys, "y")
    else:
        codes, classes = [None] * P, None
    if sum(m.shape[0] for m, _ in mats) == 0:
        raise DataError("X: the per-client arrays hold 0 rows in all; need at least one sample")
    if len({m.shape[1] for m, _ in mats}) == 1 and any(nm != names for _, nm in mats):
        raise DataError(f"X: the clients' DataFrames have different columns: {list(names)} (client 0) and "
                        f"{list(next(nm for _, nm in mats if nm != names))}")
    shards = [(_readonly(m), c) for (m, _), c in zip(mats, codes)]
    # Different feature counts are reported by the session's check, with the message of file data.
    return ArrayData(shards=shards, X=None, y=None, client_names=[f"client-{i}" for i in range(P)],
                     feature_names=names, classes=classes, n_clients=P, partition=None)


# --- conversions -------------------------------------------------------------------------
def _is_dataframe(x: Any) -> bool:
    return type(x).__module__.startswith("pandas") and hasattr(x, "columns") and hasattr(x, "dtypes")


def _is_per_client(X: Any) -> bool:
    """A list (or tuple) of 2-D arrays / DataFrames / nested lists: one element per client."""
    if not isinstance(X, (list, tuple)) or not X:
        return False
    first = X[0]
    if _is_dataframe(first) or (isinstance(first, np.ndarray) and first.ndim >= 2):
        return True
    return isinstance(first, (list, tuple)) and bool(first) and isinstance(first[0], (list, tuple, np.ndarray))


def take_columns(X: Any, y: Any, clients: Any) -> tuple[Any, Any, Any]:
    """``y`` / ``clients`` given as column names of a DataFrame ``X``: take those columns out of the features."""
    taken = []
    out = []
    for what, v in (("y", y), ("clients", clients)):
        if isinstance(v, str):
            if not _is_dataframe(X):
                raise ConfigError(f"from_arrays {what}: {v!r} is a column name, which needs X as a DataFrame; "
                                  f"got {type(X).__name__}")
            if v not in X.columns:
                raise DataError(f"from_arrays {what}: column {v!r} is not in X (it has {list(map(str, X.columns))})")
            taken.append(v)
            v = X[v]
        out.append(v)
    if taken:
        X = X.drop(columns=taken)
    return X, out[0], out[1]


def as_matrix(X: Any, what: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """A float64 array of shape (n, d) and feature names, or a one-line DataError."""
    if _is_dataframe(X):

        bad = [c for c in X.columns if not is_numeric(X[c].dtype)]
        if bad:
            c = bad[0]
            raise DataError(f"{what}: column {str(c)!r} has dtype {X[c].dtype}, which is not numeric; encode it "
                            f"or select the numeric columns (non-numeric: {[str(b) for b in bad]})")
        names = tuple(str(c) for c in X.columns)
        if len(set(names)) != len(names):
            raise DataError(f"{what}: duplicate column names {sorted({n for n in names if names.count(n) > 1})}")
        arr = X.to_numpy(dtype=np.float64, na_value=np.nan)
        if arr.ndim != 2 or arr.shape[1] == 0:
            raise DataError(f"{what}: a DataFrame with no feature columns (shape {X.shape})")
        return arr, names
    if _is_dataframe_series(X):
        raise DataError(f"{what}: expected a 2-D array (n_samples, n_features); got a 1-D Series of length "
                        f"{len(X)}; use X.to_frame() for one feature")
    if hasattr(X, "tocsr") or hasattr(X, "toarray"):
        raise DataError(f"{what}: sparse input is not supported ({type(X).__name__}); pass a dense array, "
                        "e.g. X.toarray()")
    if isinstance(X, str) or X is None or np.isscalar(X):
        raise DataError(f"{what}: expected a 2-D array (n_samples, n_features); got {type(X).__name__} {X!r:.40}")
    try:
        arr = np.asarray(X)
    except ValueError:
        raise DataError(f"{what}: rows have different lengths (a ragged nested list); pass a 2-D array of "
                        "shape (n_samples, n_features)") from None
    if arr.ndim != 2:
        hint = ("; use X.reshape(-1, 1) for one feature or X.reshape(1, -1) for one sample" if arr.ndim == 1 else "")
        raise DataError(f"{what}: expected a 2-D array (n_samples, n_features); got {arr.ndim}-D shape "
                        f"{arr.shape}{hint}")
    arr = _numeric(arr, what)
    if arr.shape[1] == 0:
        raise DataError(f"{what}: 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required.")
    return arr, tuple(f"x{i}" for i in range(arr.shape[1]))


def _is_dataframe_series(x: Any) -> bool:
    return type(x).__module__.startswith("pandas") and type(x).__name__ == "Series"


def _numeric(arr: np.ndarray, what: str) -> np.ndarray:
    kind = arr.dtype.kind
    if kind == "f":
        return np.ascontiguousarray(arr, dtype=np.float64)
    if kind in "iu":
        if arr.size and int(np.max(np.abs(arr.astype(np.float64)))) > _EXACT_INT:
            raise DataError(f"{what}: integers beyond 2**53 do not convert to float64 exactly; scale them first")
        return np.ascontiguousarray(arr, dtype=np.float64)
    if kind == "b":
        raise DataError(f"{what}: boolean values are not numeric features; convert them explicitly "
                        "(e.g. X.astype(float))")
    if kind in "US":
        first = arr.flat[0] if arr.size else ""
        raise DataError(f"{what}: strings are not numeric features (dtype {arr.dtype}, e.g. {str(first)!r}); "
                        "encode them first")
    if kind == "O":
        for v in arr.flat:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise DataTypeError(f"{what}: non-numeric value {v!r:.40} ({type(v).__name__}); each argument must be "
                                    "a real number, not a string or other object: encode such features as numbers")
            if isinstance(v, (int, np.integer)) and abs(int(v)) > _EXACT_INT:
                raise DataError(f"{what}: integers beyond 2**53 do not convert to float64 exactly; scale them first")
        return np.ascontiguousarray(arr.astype(np.float64))
    if kind == "c":
        raise DataError(f"{what}: Complex data not supported (dtype {arr.dtype}); features must be real numbers")
    raise DataError(f"{what}: values of dtype {arr.dtype} are not numeric features (real numbers)")


def _as_vector(v: Any, what: str, n: int) -> np.ndarray:
    """A 1-D vector of ``n`` values (labels or client names), or a one-line DataError."""
    if _is_dataframe(v):
        raise DataError(f"{what}: expected a 1-D vector of {n} values; got a DataFrame of shape {v.shape}")
    if isinstance(v, str) or np.isscalar(v):
        raise DataError(f"{what}: expected a 1-D vector of {n} values; got {type(v).__name__} {v!r:.40}")
    try:
        arr = v.to_numpy() if _is_dataframe_series(v) else np.asarray(v)
    except ValueError:
        raise DataError(f"{what}: expected a 1-D vector of {n} values; got a ragged nested list") from None
    if arr.ndim != 1:
        raise DataError(f"{what}: expected a 1-D vector of {n} values; got shape {arr.shape}")
    if arr.shape[0] != n:
        raise DataError(f"{what}: {arr.shape[0]} values for {n} rows of X; they must have the same length")
    missing = _missing(arr)
    if missing.any():
        row = int(np.argmax(missing))
        v = arr[row]
        raise DataError(f"{what}: missing value ({'None' if v is None else float(v)}) at row {row}")
    return arr


def _missing(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "f":
        return np.isnan(arr)
    if arr.dtype.kind == "O":
        return np.array([v is None or (isinstance(v, float) and v != v) for v in arr], dtype=bool)
    return np.zeros(arr.shape, dtype=bool)


def _encode_labels(ys: list[np.ndarray], what: str) -> tuple[list[np.ndarray], np.ndarray]:
    """Codes 0..C-1 of the labels of every client (one code table for all) and the distinct labels."""
    allv = np.concatenate(ys) if len(ys) > 1 else ys[0]
    try:
        classes, inv = np.unique(allv, return_inverse=True)
    except TypeError:
        raise DataError(f"{what}: labels of mixed types ({sorted({type(v).__name__ for v in allv})}); "
                        "use one type") from None
    inv = inv.reshape(-1).astype(np.int64)
    cuts = np.cumsum([len(v) for v in ys])[:-1]
    return list(np.split(inv, cuts)), classes


def _client_order(cid: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Client index of every row, clients ordered by the text of their names (as a table's client column)."""
    try:
        uniq, inv = np.unique(cid, return_inverse=True)
    except TypeError:
        raise DataError(f"clients: client names of mixed types ({sorted({type(v).__name__ for v in cid})}); "
                        "use one type") from None
    texts = [str(u) for u in uniq]
    if len(set(texts)) != len(texts):
        raise DataError(f"clients: distinct client names print alike ({texts}); use names that differ as text")
    order = sorted(range(len(uniq)), key=lambda i: texts[i])
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    return rank[inv.reshape(-1)], [texts[i] for i in order]


def _check_partition(partition: Any) -> dict[str, Any] | None:
    if partition is None:
        return None
    if isinstance(partition, str):
        part = {"name": partition}
    elif isinstance(partition, dict):
        part = dict(partition)
    else:
        raise ConfigError(f"from_arrays partition: a partition name or a mapping {{'name': ..., **options}}; "
                          f"got {type(partition).__name__}")
    name = part.get("name") or "iid"
    allowed = [p for p in available_partitions() if p != "by_column"]
    if name == "by_column":
        raise ConfigError("from_arrays partition: 'by_column' is given by clients= (the client of every row)")
    if name not in allowed:
        raise ConfigError(f"from_arrays partition: unknown partition {name!r}; choose one of {', '.join(allowed)}")
    part["name"] = name
    return part


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: clients must not change the caller's arrays (nor can they on Ray)."""
    v = a.view()
    v.flags.writeable = False
    return v


__all__ = ["ArrayData", "from_arrays"]
