"""Federations: one :class:`ClientSpec` (a recipe) per client.

The driver decides *which* rows each client gets (from labels or sizes only) and
ships a small recipe; the client actor builds its shard from the recipe with
:func:`materialize`. Generated data (``blobs``) never exists outside the client
that owns it, and a Parquet source with ``by_column`` reads only that client's rows.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.core.seeding import PARTITION_STREAM, data_rng
from fedray.core.sizes import CLIENT_BYTES, RECIPE_BYTES
from fedray.data.blobs import (  # noqa: F401  (the blobs generator's names stay importable from here)
    BLOBS_DEFAULTS,
    BLOBS_OPTIONS,
    generate_block,
    generate_client_blobs,
)
from fedray.data.datasets import (
    DATA_SOURCES,
    DataSource,
    check_columns,
    data_source,
    is_numeric,
    load_dataset,
    load_pooled,
    load_table,
    read_table,
    resolve_data_dir,
    table_feature_columns,
)
from fedray.data.partitions import FEDERATION_BUILDERS, TRANSFORMS, partition_indices
from fedray.data.recipes import ClientSpec, RecipeRange, recipe_kinds


@dataclass(frozen=True)
class Federation:
    specs: Sequence[ClientSpec]  # a list, or a RecipeRange (generated data: nothing per client)
    feature_names: tuple[str, ...]
    sample_shape: tuple[int, ...]
    has_labels: bool
    n_classes: int | None
    notes: tuple[str, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def n_clients(self) -> int:
        return len(self.specs)


# Federation builders: partitions that need more than index lists (per-client
# transforms, train/test splits, group ids), e.g. ``rotated`` image federations.
# ``fn(dataset, data_cfg, n_clients, seed, **options) -> Federation``.
def register_federation_builder(name: str) -> Any:
    return FEDERATION_BUILDERS.register(name)


#: Option annotations whose values :func:`federation_builder` checks (the others are the builder's to check).
_OPTION_KINDS = {"int": "an integer", "float": "a finite number", "bool": "true or false"}


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "bool" or isinstance(value, bool):
        return kind == "bool" and isinstance(value, bool)
    if kind == "int":
        return isinstance(value, (int, np.integer))
    return isinstance(value, (int, float, np.integer, np.floating)) and bool(np.isfinite(value))


def _check_option(builder: str, key: str, value: Any, annotation: str) -> None:
    kind, _, rest = str(annotation).partition(" | ")
    if kind not in _OPTION_KINDS or rest not in ("", "None") or (rest and value is None):
        return
    if not _is_kind(value, kind):
        none = " or null" if rest else ""
        raise ConfigError(f"data.partition.{key}: must be {_OPTION_KINDS[kind]}{none} for {builder!r}; "
                          f"got {value!r}")


def federation_builder(name: str) -> Any:
    """Register a federation builder ``fn(ds, data, n_clients, seed, **options)``; before it runs, unknown
    ``data.partition`` keys, and values of its ``int``, ``float`` and ``bool`` options of another type, are
    a ConfigError naming them (never a TypeError, nor a string or float silently cut to an integer)."""

    def deco(fn: Any) -> Any:
        params = {k: p.annotation for k, p in inspect.signature(fn).parameters.items()
                  if k not in ("ds", "data", "n_clients", "seed")}
        allowed = list(params)

        @functools.wraps(fn)
        def wrapper(ds: Any, data: Any, n_clients: int | None, seed: int, **options: Any) -> Federation:
            unknown = sorted(set(options) - set(allowed))
            if unknown:
                raise ConfigError(f"data.partition: unknown option(s) {unknown} for {name!r}; allowed: {allowed}")
            for key, value in options.items():
                _check_option(name, key, value, params[key])
            return fn(ds, data, n_clients, seed, **options)

        register_federation_builder(name)(wrapper)
        return wrapper

    return deco


def register_transform(name: str) -> Any:
    return TRANSFORMS.register(name)


def available_federations() -> list[str]:
    """Partition names that build whole federations (per-client transforms, hidden groups)."""
    return FEDERATION_BUILDERS.names()


def build_federation(data: Any, n_clients: int | None, seed: int) -> Federation:
    """Build client recipes from a validated ``data`` config section."""
    name = data.dataset
    if not isinstance(name, str) and callable(getattr(name, "federation", None)):
        return name.federation(n_clients, seed)  # arrays from Python (fedray.from_arrays: ArrayData)
    src, _, rest = data_source(name)
    options = dict(data.options or {})
    part = dict(data.partition or {})
    pname = part.pop("name", None)
    if pname is None:
        pname = src.natural_partition
    rng = data_rng(seed, PARTITION_STREAM)
    ddir = str(resolve_data_dir(data.data_dir) or "") or None
    if pname in FEDERATION_BUILDERS:
        builder = FEDERATION_BUILDERS[pname]
        # fedray's builders read labels and shapes only: they get the pooled set as cached (pixels as 8-bit
        # codes); a user's builder gets X as values, as load_dataset gives them
        load = load_pooled if str(getattr(builder, "__module__", "")).startswith("fedray.") else load_dataset
        return builder(load(name, ddir, seed=seed, **options), data, n_clients, seed, **part)
    if src.federation is not None:
        built = src.federation(rest, data, n_clients, seed, pname, part)
        if built is not None:
            return built
    if src.data_options is not None:
        options.update(src.data_options(data))
    ds = load_pooled(name, ddir, seed=seed, **options)  # labels and shapes: the rows stay as cached
    if pname is None:
        pname = "by_column" if ds.groups is not None else "iid"
    if pname == "by_column":
        if ds.groups is None:
            raise ConfigError("data.partition.name: 'by_column' needs a client column (data.client_column)")
        part["groups"] = ds.groups
        parts = partition_indices(pname, ds.n_samples, ds.y, 0, rng, **part)
    else:
        if n_clients is None:
            n_clients = 10
        if n_clients > ds.n_samples:
            raise DataError(f"federation.n_clients: {n_clients} clients but {name} has only {ds.n_samples} samples")
        parts = partition_indices(pname, ds.n_samples, ds.y, n_clients, rng, **part)
    source = {"kind": "pooled", "dataset": name, "data_dir": ddir, "seed": seed, "options": options}
    module = getattr(src.load, "__module__", None) or ""
    if module.partition(".")[0] not in ("fedray", "__main__"):
        source["module"] = module  # a user's source: the process that builds a shard imports what registers it
    names = [str(v) for v in np.unique(ds.groups)] if pname == "by_column" else [f"client-{i}" for i in range(len(parts))]
    specs = [ClientSpec(i, source, p, names[i]) for i, p in enumerate(parts)]
    n_classes = ds.n_classes
    return Federation(specs, ds.feature_names, ds.sample_shape, ds.y is not None, n_classes,
                      extras=dict(ds.meta))


def _blobs_federation(options: dict, n_clients: int, seed: int, pname: str | None, part: dict) -> Federation:
    unknown = set(options) - set(BLOBS_DEFAULTS)
    if unknown:
        raise ConfigError(f"data.options: unknown option(s) {sorted(unknown)} for blobs; allowed: {sorted(BLOBS_DEFAULTS)}")
    opts = {**BLOBS_DEFAULTS, **options}
    for key in ("points_per_client", "n_features", "n_centers"):
        if int(opts[key]) < 1:
            raise ConfigError(f"data.options.{key}: must be >= 1; got {opts[key]!r}")
    if not float(opts["cluster_std"]) > 0:
        raise ConfigError(f"data.options.cluster_std: must be > 0; got {opts['cluster_std']!r}")
    if pname not in (None, "iid", "dirichlet"):
        raise ConfigError(f"data.partition.name: blobs supports 'iid' and 'dirichlet'; got {pname!r}")
    alpha = float(part.get("alpha", 0.5)) if pname == "dirichlet" else None
    source = {"kind": "blobs", "seed": seed, "alpha": alpha, **{k: opts[k] for k in BLOBS_DEFAULTS}}
    specs = RecipeRange(source, 0, n_clients)  # one object for the whole population
    d = int(opts["n_features"])
    return Federation(specs, tuple(f"x{i}" for i in range(d)), (d,), True, int(opts["n_centers"]))


@functools.lru_cache(maxsize=64)
def _column_names(d: int) -> tuple[str, ...]:
    """``("x0", ..., "x{d-1}")``, one tuple shared by all clients of a process (a million clients need no
    million copies)."""
    return tuple(f"x{i}" for i in range(d))


def regenerable(specs: Sequence[ClientSpec]) -> bool:
    """Whether ``specs`` are recipes a host can build again at will, in bulk (generated data), so that
    their shards need not stay in memory (``runtime.resident``)."""
    return isinstance(specs, RecipeRange) and specs.source.get("kind") == "blobs"


def generate_rows(specs: RecipeRange, ids: np.ndarray | None) -> Any:
    """The rows of the generated clients ``ids`` of ``specs``, one after another: ``(X, y, offsets)``
    (the same bits as each client's own :func:`materialize`); with ``ids=None``, only what is known
    without generating: ``(offsets of every client of specs, feature names)``."""
    src = specs.source
    n, d = int(src["points_per_client"]), int(src["n_features"])
    if ids is None:
        return np.arange(len(specs) + 1, dtype=np.int64) * n, _column_names(d)
    return generate_block(src, np.asarray(ids, dtype=np.int64))


def _table_by_column(path: str, kind: str, data: Any) -> Federation:
    if not data.client_column:
        raise ConfigError("data.client_column: 'by_column' needs the name of the column that names the client")
    columns, dtypes = table_schema(path, kind)
    if data.client_column not in columns:
        raise DataError(f"data.client_column: column {data.client_column!r} is not in {path!r} (it has {columns})")
    if data.label_column is not None and data.label_column not in columns:
        raise DataError(f"data.label_column: column {data.label_column!r} is not in {path!r} (it has {columns})")
    feats = table_feature_columns(columns, dtypes, data.feature_columns, data.label_column, data.client_column)
    # The driver reads only the client (and label) column: the feature values stay with the clients.
    df = read_table(path, kind, columns=[c for c in (data.client_column, data.label_column) if c])
    check_columns(df, None, data.label_column, data.client_column)
    if kind == "csv":  # feature columns: the schema came from the first rows; no value there may be coerced
        check_columns(read_table(path, kind, nrows=5000), data.feature_columns, None, None)
    values = sorted(df[data.client_column].unique().tolist(), key=str)
    label_values = None
    if data.label_column is not None:
        label_values = sorted(df[data.label_column].dropna().unique().tolist(), key=str)
    source = {"kind": "table", "path": path, "format": kind, "features": feats, "label_column": data.label_column,
              "client_column": data.client_column, "label_values": label_values}
    specs = [ClientSpec(i, {**source, "value": v}, None, str(v)) for i, v in enumerate(values)]
    return Federation(specs, tuple(feats), (len(feats),), label_values is not None,
                      len(label_values) if label_values is not None else None)


def table_schema(path: str, kind: str) -> tuple[list[str], Any]:
    """Column names and pandas dtypes of a table without reading its rows (CSV: from the first rows)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"data.dataset: file {str(p)!r} does not exist")
    if not p.is_file():
        raise DataError(f"data.dataset: {kind}:{path} is not a file (a directory?); give the path of one "
                        f"{kind.upper()} file")
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            empty = pq.read_schema(p).empty_table().to_pandas()
        except (pa.ArrowException, OSError, ValueError):
            read_table(path, kind)  # raises the one-line error with its hint
            raise
        return list(empty.columns), empty.dtypes
    head = read_table(path, kind, nrows=5000)
    return list(head.columns), head.dtypes


def put_shards(specs: list[ClientSpec]) -> list[ClientSpec]:
    """Recipes whose rows travel with them (kind ``arrays``) with each shard moved to Ray's object store.

    One ``ray.put`` per shard; the recipe keeps the reference, so each client's actor
    fetches its own shard once and nothing broadcasts the whole table. Other recipes
    are returned as they are. The caller keeps the returned specs alive as long as the
    actors may need them (a restarted actor rebuilds its shards from the same recipes).
    """
    if "arrays" not in recipe_kinds(specs):
        return specs

    import ray

    out = []
    for s in specs:
        if s.source.get("kind") == "arrays" and isinstance(s.source["shard"], tuple):
            s = dataclasses.replace(s, source={**s.source, "shard": ray.put(s.source["shard"])})
        out.append(s)
    return out


def materialize_many(specs: list[ClientSpec]) -> list[tuple[np.ndarray, np.ndarray | None, tuple[str, ...]]]:
    """:func:`materialize` for several clients; table clients of one file share one read."""
    tables: dict[tuple, list[int]] = {}
    for i, spec in enumerate(specs):
        src = spec.source
        if src["kind"] == "table":
            tables.setdefault((src["path"], src["format"], src["client_column"]), []).append(i)
    prefetched: dict[int, Any] = {}
    for (path, fmt, col), idx in tables.items():
        src = specs[idx[0]].source
        cols = list(dict.fromkeys([*src["features"], *([src["label_column"]] if src["label_column"] else []), col]))
        values = [specs[i].source["value"] for i in idx]
        try:
            df = read_table(path, fmt, columns=cols, filters=[(col, "in", values)])
        except Exception as exc:  # noqa: BLE001 - every client of this file reports it
            for i in idx:
                prefetched[i] = exc
            continue
        groups = dict(iter(df.groupby(col, sort=False)))
        for i in idx:
            prefetched[i] = groups.get(specs[i].source["value"], df.iloc[:0])
    out = []
    for i, spec in enumerate(specs):
        if isinstance(prefetched.get(i), Exception):
            out.append(prefetched[i])
            continue
        try:
            out.append(materialize(spec, prefetched.get(i)))
        except Exception as exc:  # noqa: BLE001 - reported per client by the host
            out.append(exc)
    return out


def materialize(spec: ClientSpec, table: Any = None) -> tuple[np.ndarray, np.ndarray | None, tuple[str, ...]]:
    """Build a client's shard from its recipe: ``(X, y, feature_names)``.

    Transforms listed in ``spec.meta["transforms"]`` (``[(name, kwargs), ...]``) are
    applied in order after loading.
    """
    X, y, names = _materialize_raw(spec, table)
    transforms = spec.meta.get("transforms", ())
    if transforms:
        for tname, kw in transforms:
            X, y = TRANSFORMS[tname](X, y, **dict(kw))
    return X, y, names


def _materialize_raw(spec: ClientSpec, table: Any = None) -> tuple[np.ndarray, np.ndarray | None, tuple[str, ...]]:
    src = spec.source
    kind = src["kind"]
    if kind == "blobs":
        X, y = generate_client_blobs(src, spec.client_id)
        return X, y, _column_names(X.shape[1])
    if kind == "pooled":
        if "module" in src and src["dataset"].partition(":")[0] not in DATA_SOURCES:
            importlib.import_module(src["module"])
        ds = load_pooled(src["dataset"], src["data_dir"], seed=src["seed"], **src["options"])
        idx = spec.indices if spec.indices is not None else np.arange(ds.n_samples)
        y = ds.y[idx] if ds.y is not None else None
        return ds.rows(idx), y, ds.feature_names  # this shard's rows as values (image pixels: 8-bit codes / 255)
    if kind == "arrays":
        shard = src["shard"]
        if not isinstance(shard, tuple):  # a reference into Ray's object store (see put_shards)
            import ray

            shard = ray.get(shard)
        X, y = shard
        return X, y, tuple(src["features"])
    if kind == "table":
        cols = list(src["features"]) + [c for c in (src["label_column"],) if c]
        df = table if table is not None else read_table(
            src["path"], src["format"], columns=cols + [src["client_column"]],
            filters=[(src["client_column"], "==", src["value"])])
        bad = [c for c in src["features"] if not is_numeric(df[c].dtype)]
        if bad:
            raise DataError(f"client {spec.name!r}: columns {bad} are not numeric")
        X = df[src["features"]].to_numpy(dtype=np.float64)
        y = None
        if src["label_column"]:
            lookup = {v: i for i, v in enumerate(src["label_values"])}
            y = np.array([lookup.get(v, -1) for v in df[src["label_column"]]], dtype=np.int64)
        return X, y, tuple(src["features"])
    raise DataError(f"unknown shard recipe {kind!r}")


def check_memory(cfg: Any) -> None:
    """Refuse, before anything is built, a generated federation that cannot fit in memory.

    For ``blobs`` the size is known from the configuration: the recipes live in the
    driver; the shards live in the client hosts (this machine unless
    ``runtime.address`` names a cluster). Raises :class:`~fedray.core.errors.ConfigError`
    with the estimate.
    """

    if cfg.data.dataset != "blobs" or cfg.federation.n_clients is None:
        return
    try:
        import psutil

        available = float(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no estimate without psutil
        return
    opts = {**BLOBS_DEFAULTS, **(cfg.data.options or {})}
    try:  # 1e10 and "1e10" are sizes too (YAML reads 1e10 as a string)
        rows, d, k = (int(float(opts[key])) for key in ("points_per_client", "n_features", "n_centers"))
    except (TypeError, ValueError, OverflowError, KeyError):
        return  # reported by the federation builder with the key named
    n = int(cfg.federation.n_clients)
    need = n * RECIPE_BYTES
    if _hosts_here(cfg):
        # one client's shard and the centres are built at least once, whatever is kept
        need += n * CLIENT_BYTES + (rows * (d + 1) + k * d) * 8
        data = n * rows * (d + 1) * 8
        if cfg.runtime.resident == "always" or (cfg.runtime.resident == "auto" and data <= available / 2):
            need += data  # kept in memory (else generated again whenever clients run)
    if need > available:
        raise ConfigError(f"federation.n_clients: {n} clients of {rows} x {d} points need about {_gib(need)} of memory "
                          f"here, but {_gib(available)} is available; use fewer clients or points, or a cluster "
                          "(runtime.address)")


def _hosts_here(cfg: Any) -> bool:
    return cfg.runtime.backend == "local" or not cfg.runtime.address


def shard_residency(cfg: Any, specs: Sequence[ClientSpec]) -> bool:
    """Whether the hosts keep the shards in memory (``runtime.resident``): ``always``; ``never`` (only
    for recipes the hosts can build again, generated data); ``auto``: kept unless they are generated
    data whose rows would take more than half of the memory available here."""
    mode = cfg.runtime.resident
    regen = regenerable(specs)
    if mode == "never" and not regen:
        raise ConfigError("runtime.resident: 'never' builds the shards again from their recipes, which only "
                          f"generated data (data.dataset: blobs) can; {str(cfg.data.dataset)[:60]!r} is read once, "
                          "use 'auto' or 'always'")
    if mode != "auto":
        return mode == "always"
    if not regen or not _hosts_here(cfg):
        return True
    try:
        import psutil

        available = float(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no estimate: keep them
        return True
    src = specs.source
    need = len(specs) * int(src["points_per_client"]) * (int(src["n_features"]) + 1) * 8
    return need <= available / 2


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


# --- data sources whose federation is built here (generated per client; a table read by each client) ---
def _blobs_source(rest: str, data: Any, n_clients: int | None, seed: int, pname: str | None,
                  part: dict) -> Federation:
    return _blobs_federation(dict(data.options or {}), n_clients or 10, seed, pname, part)


def _no_pool(rest: str, ddir: Any, options: dict) -> Any:
    raise ConfigError("data.dataset: 'blobs' cannot be loaded as a pooled data set (each client generates its own)")


def _table_source(kind: str) -> DataSource:
    def federation(rest: str, data: Any, n_clients: int | None, seed: int, pname: str | None,
                   part: dict) -> Federation | None:
        if pname == "by_column" or (pname is None and data.client_column):
            return _table_by_column(rest, kind, data)
        return None

    def load(rest: str, ddir: Any, options: dict) -> Any:
        return load_table(rest, kind, **options)

    def columns(data: Any) -> dict[str, Any]:
        return {"feature_columns": data.feature_columns, "label_column": data.label_column,
                "client_column": data.client_column}

    return DataSource(load, f"the user's own {kind.upper()} table (data.feature_columns, data.label_column, "
                            "data.client_column pick its columns)", arg="PATH", open_options=True,
                      data_options=columns, federation=federation)


DATA_SOURCES.register("blobs", DataSource(_no_pool, "Gaussian blobs generated inside each client",
                                          open_options=True, federation=_blobs_source))
DATA_SOURCES.register("csv", _table_source("csv"))
DATA_SOURCES.register("parquet", _table_source("parquet"))
