"""Checks of the clients' shards, from the per-client descriptions their hosts return: empty or
non-finite shards, mismatched feature counts, values too large for float64 sums."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedray.core.errors import DataError
from fedray.core.stats import Stats


def describe_shard(client_id: int, name: str, X: np.ndarray, y: np.ndarray | None, feature_names: Any = (),
                   moments: bool = True) -> dict[str, Any]:
    """What :meth:`ClientHost.describe` reports for one shard ``X`` (n, d) with labels ``y`` (n,) or None.

    With ``moments=False`` only size, dimension and the first non-finite value (what
    :func:`fedray.api.session.check_descriptions` checks) are computed.
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


def check_descriptions(desc: list[dict[str, Any]]) -> int:
    """Raise :class:`DataError` for unusable shards; returns the common number of features."""
    for d in desc:
        who = f"client {d['client_id']}" + (f" ({d['name']})" if d.get("name") and d["name"] != f"client-{d['client_id']}" else "")
        if "error" in d:
            raise DataError(f"{who}: {d['error']}")
        if "bad_value" in d:
            raise DataError(f"{who}: non-finite value {d['bad_value']}; clean or impute the data first "
                            "(NaN and inf are not allowed)")
        if d["n"] == 0:
            raise DataError(f"{who} has no samples; remove it or change the partition")
    dims = sorted({d["n_features"] for d in desc})
    if len(dims) > 1:
        by = {dim: [d["client_id"] for d in desc if d["n_features"] == dim][:5] for dim in dims}
        raise DataError(f"clients have different numbers of features: {by} (feature count: client ids)")
    return int(dims[0])


def column_moments(payload: Any, shared: Any, client: Any) -> Stats:
    """A client function: the shard's row count ``n`` (1,), column sums ``s`` (d,) and sums of squares
    ``ss`` (d,) — summed (securely under privacy) for the session's scaling and federated variances."""
    X = client.data.X
    return Stats(n=np.array([float(X.shape[0])]), s=X.sum(axis=0), ss=(X * X).sum(axis=0))
