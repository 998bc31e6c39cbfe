"""Checks of the clients' shards, from the per-client descriptions their hosts return: empty or
non-finite shards, mismatched feature counts, values too large for float64 sums."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedray.core.errors import DataError
from fedray.core.stats import Stats, fold_rows


def describe_shard(client_id: int, name: str, X: np.ndarray, y: np.ndarray | None, feature_names: Any = (),
                   moments: bool = True) -> dict[str, Any]:
    """What :meth:`ClientHost.describe` reports for one shard ``X`` (n, d) with labels ``y`` (n,) or None.

    With ``moments=False`` only size, dimension and the first non-finite value (what
    :func:`check_descriptions` checks) are computed.
    """
    d: dict[str, Any] = {"client_id": client_id, "name": name, "n": int(X.shape[0]),
                         "n_features": int(X.shape[1]) if X.ndim == 2 else -1}
    finite = np.isfinite(X)
    if X.size and not finite.all():
        col = int(np.flatnonzero(~finite.all(axis=0))[0])
        row = int(np.flatnonzero(~finite[:, col])[0])
        colname = feature_names[col] if col < len(feature_names) else f"column {col}"
        d["bad_value"] = f"{float(X[row, col])} in column {colname!r} (row {row} of the client's shard)"
    elif X.shape[0] and moments:
        d["sum"] = X.sum(axis=0)
        d["sumsq"] = (X * X).sum(axis=0)
        d["min"] = X.min(axis=0)
        d["max"] = X.max(axis=0)
    if y is not None:
        d["classes"] = np.unique(y)
    return d


@dataclass
class Descriptions:
    """Per-client facts of many shards, column-wise (what hosts report at set-up; nothing per client
    is a Python object, so 10^7 clients cost their arrays only).

    Attributes
    ----------
    ids, n, n_features : ndarray of int, shape (n_clients,)
        Client ids (ascending), rows, features (-1: not a table).
    names : list of str or None
        Display names; None means ``client-<id>`` for every client.
    errors, bad_values : dict
        Client id -> why its shard could not be built / its first non-finite value (only the clients concerned).
    sum, sumsq : list of ndarray (n_i, d), or None
        Per-client column sums and sums of squares, in parts (one per chunk of clients, in order;
        None under privacy, or when a shard is empty or has a bad value).
    min, max : list of ndarray (m_i, d), or None
        Column extremes, in parts (a part may already be reduced over its clients).
    classes : ndarray
        The labels seen on any client (sorted, unique).
    """

    ids: np.ndarray
    n: np.ndarray
    n_features: np.ndarray
    names: list[str] | None = None
    errors: dict[int, str] = field(default_factory=dict)
    bad_values: dict[int, str] = field(default_factory=dict)
    sum: list[np.ndarray] | None = None
    sumsq: list[np.ndarray] | None = None
    min: list[np.ndarray] | None = None
    max: list[np.ndarray] | None = None
    classes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.ids)

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Column sums, sums of squares, minima and maxima of the union: the per-client sums added
        over the clients in id order (the same bits as summing the stacked rows), without stacking."""
        lo = np.min(np.concatenate(self.min), axis=0)
        hi = np.max(np.concatenate(self.max), axis=0)
        return fold_rows(self.sum), fold_rows(self.sumsq), lo, hi

    def drop_moments(self) -> None:
        """Forget the per-client moments (once they are summed)."""
        self.sum = self.sumsq = self.min = self.max = None

    def name(self, position: int) -> str:
        return self.names[position] if self.names is not None else f"client-{int(self.ids[position])}"

    def all_names(self) -> list[str]:
        return list(self.names) if self.names is not None else [f"client-{c}" for c in self.ids.tolist()]

    @classmethod
    def concat(cls, parts: list[Descriptions]) -> Descriptions:
        """The descriptions of several hosts as one, in client-id order."""
        parts = sorted((p for p in parts if len(p)), key=lambda p: int(p.ids[0])) or [cls.empty()]
        if len(parts) == 1:
            return parts[0]
        names = None
        if any(p.names is not None for p in parts):
            names = [nm for p in parts for nm in p.all_names()]
        moments = {}
        for key in ("sum", "sumsq", "min", "max"):
            arrs = [getattr(p, key) for p in parts]
            moments[key] = [a for part in arrs for a in part] if all(a is not None for a in arrs) else None
        out = cls(np.concatenate([p.ids for p in parts]), np.concatenate([p.n for p in parts]),
                  np.concatenate([p.n_features for p in parts]), names,
                  {k: v for p in parts for k, v in p.errors.items()},
                  {k: v for p in parts for k, v in p.bad_values.items()}, **moments,
                  classes=np.unique(np.concatenate([p.classes for p in parts])))
        if np.any(np.diff(out.ids) <= 0):
            raise ValueError("hosts describe overlapping clients")
        return out

    @classmethod
    def empty(cls) -> Descriptions:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z.copy(), z.copy())

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]]) -> Descriptions:
        """From per-client dicts (:func:`describe_shard`'s form)."""
        rows = sorted(rows, key=lambda d: d["client_id"])
        ids = np.array([d["client_id"] for d in rows], dtype=np.int64)
        moments = {}
        for key in ("sum", "sumsq", "min", "max"):
            arrs = [np.asarray(d[key], dtype=np.float64) for d in rows if key in d]
            same = len(arrs) == len(rows) and len({a.shape for a in arrs}) == 1
            moments[key] = [np.stack(arrs)] if rows and same else None
        classes = [np.asarray(d["classes"]) for d in rows if "classes" in d]
        return cls(ids, np.array([d["n"] for d in rows], dtype=np.int64),
                   np.array([d["n_features"] for d in rows], dtype=np.int64), [d.get("name", "") for d in rows],
                   {d["client_id"]: d["error"] for d in rows if "error" in d},
                   {d["client_id"]: d["bad_value"] for d in rows if "bad_value" in d}, **moments,
                   classes=np.unique(np.concatenate(classes)) if classes else np.zeros(0, dtype=np.int64))

    def row(self, position: int) -> dict[str, Any]:
        """The client at ``position`` as a dict (``client_id``, ``name``, ``n``, ``n_features``; its
        error or bad value where it has one)."""
        i = int(position)
        cid = int(self.ids[i])
        d = {"client_id": cid, "name": self.name(i), "n": int(self.n[i]), "n_features": int(self.n_features[i])}
        if cid in self.errors:
            d["error"] = self.errors[cid]
        if cid in self.bad_values:
            d["bad_value"] = self.bad_values[cid]
        return d

    def rows(self) -> list[dict[str, Any]]:
        """One dict per client (:meth:`row`)."""
        return [self.row(i) for i in range(len(self.ids))]

    # A sequence of per-client dicts, as the descriptions were before they became columns.
    def __getitem__(self, position: int) -> dict[str, Any]:
        if not -len(self.ids) <= int(position) < len(self.ids):
            raise IndexError(f"client position {position} of {len(self.ids)}")
        return self.row(int(position) % max(1, len(self.ids)))

    def __iter__(self) -> Any:
        return (self.row(i) for i in range(len(self.ids)))


def describe_block(ids: np.ndarray, names: list[str] | None, X: np.ndarray, y: np.ndarray | None,
                   offsets: np.ndarray, feature_names: Any = (), moments: bool = True) -> Descriptions:
    """:class:`Descriptions` of the shards ``X[offsets[i]:offsets[i + 1]]`` of clients ``ids``, vectorised.

    The per-client moments are the same bits as :func:`describe_shard`'s ``X.sum(axis=0)`` (clients
    of one size are summed as one (clients, rows, d) array, which numpy reduces row after row
    for every client, as it does one client's (rows, d) array)."""
    ids = np.asarray(ids, dtype=np.int64)
    sizes = np.diff(offsets)
    d = int(X.shape[1]) if X.ndim == 2 else -1
    out = Descriptions(ids, sizes.astype(np.int64), np.full(len(ids), d, dtype=np.int64), names)
    if y is not None and y.size:
        out.classes = np.unique(y)
    finite = bool(np.isfinite(X).all()) if X.size else True
    if not finite:
        owner = np.repeat(np.arange(len(ids)), sizes)
        bad_rows = np.flatnonzero(~np.isfinite(X.reshape(X.shape[0], -1)).all(axis=1))
        for pos in np.unique(owner[bad_rows]).tolist():
            rows = X[offsets[pos]:offsets[pos + 1]]
            out.bad_values[int(ids[pos])] = describe_shard(int(ids[pos]), "", rows, None, feature_names,
                                                           moments=False)["bad_value"]
    if moments and finite and len(ids) and np.all(sizes > 0):
        trail = X.shape[1:]
        s, ss = np.empty((len(ids), *trail)), np.empty((len(ids), *trail))
        lo, hi = np.empty((len(ids), *trail)), np.empty((len(ids), *trail))
        for size in np.unique(sizes).tolist():
            pos = np.flatnonzero(sizes == size)
            if len(pos) == len(ids):
                rows = X.reshape(len(ids), size, *trail)
            else:
                rows = X[(offsets[pos][:, None] + np.arange(size)).ravel()].reshape(len(pos), size, *trail)
            s[pos] = rows.sum(axis=1)
            ss[pos] = (rows * rows).sum(axis=1)
            lo[pos] = rows.min(axis=1)
            hi[pos] = rows.max(axis=1)
        # sums stay per client (their total must add clients in order); extremes need not
        out.sum, out.sumsq = [s], [ss]
        out.min, out.max = [lo.min(axis=0, keepdims=True)], [hi.max(axis=0, keepdims=True)]
    return out


def check_magnitude(lo: np.ndarray, hi: np.ndarray, n_samples: float, names: Any = ()) -> None:
    """Raise :class:`DataError` when values are so large that sums of squared distances overflow float64."""
    big = np.maximum(np.abs(lo), np.abs(hi))
    with np.errstate(over="ignore"):
        worst = 4.0 * max(n_samples, 1.0) * big * big
    bad = np.flatnonzero(~np.isfinite(worst))
    if bad.size:
        col = int(bad[0])
        name = names[col] if col < len(names) else f"column {col}"
        raise DataError(f"feature {name!r}: values up to {float(big[col]):.3g} are too large (sums of squared "
                        "distances would overflow float64); rescale the data, e.g. divide by a power of ten")


def check_descriptions(desc: Descriptions | list[dict[str, Any]]) -> int:
    """Raise :class:`DataError` for unusable shards (the first client in id order that has one); returns
    the common number of features."""
    if not isinstance(desc, Descriptions):
        desc = Descriptions.from_rows(desc)
    empty = desc.ids[desc.n == 0]
    firsts = [c for c in (min(desc.errors, default=None), min(desc.bad_values, default=None),
                          int(empty[0]) if empty.size else None) if c is not None]
    if firsts:
        cid = min(firsts)
        pos = int(np.searchsorted(desc.ids, cid))
        name = desc.name(pos)
        who = f"client {cid}" + (f" ({name})" if name and name != f"client-{cid}" else "")
        if cid in desc.errors:
            raise DataError(f"{who}: {desc.errors[cid]}")
        if cid in desc.bad_values:
            raise DataError(f"{who}: non-finite value {desc.bad_values[cid]}; clean or impute the data first "
                            "(NaN and inf are not allowed)")
        raise DataError(f"{who} has no samples; remove it or change the partition")
    dims = np.unique(desc.n_features).tolist()
    if len(dims) > 1:
        by = {dim: desc.ids[desc.n_features == dim][:5].tolist() for dim in dims}
        raise DataError(f"clients have different numbers of features: {by} (feature count: client ids)")
    return int(dims[0])


def column_moments(payload: Any, shared: Any, client: Any) -> Stats:
    """A client function: the shard's row count ``n`` (1,), column sums ``s`` (d,) and sums of squares
    ``ss`` (d,) — summed (securely under privacy) for the session's scaling and federated variances."""
    X = client.data.X
    return Stats(n=np.array([float(X.shape[0])]), s=X.sum(axis=0), ss=(X * X).sum(axis=0))
