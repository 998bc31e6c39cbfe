"""What keeps the steps after the rounds within a small multiple of the data, at any number of clients.

- Sums over every client outside the rounds (the plots' histograms and moments) are taken in parts of
  clients (:func:`total_in_parts`): the server holds one part's replies at a time, never a reply per
  client of the whole federation, and the sum has the bits of one sum (:class:`~fedray.core.stats.RunningTotal`).
- The central baseline runs on at most ``evaluation.central_max_rows`` rows of the union: above that it
  runs on a uniform sample of that many rows (:func:`central_rows`), drawn from the seed, and the summary
  and the log say so.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedray.core.contract import Task
from fedray.core.errors import ConfigError, DataError
from fedray.core.seeding import CENTRAL_ROWS_STREAM, server_rng
from fedray.core.stats import RunningTotal, Stats

#: Bytes of replies the server holds at once in a sum over every client outside the rounds.
PART_BYTES = 64 << 20
#: Clients of the first part (its replies' size sets the size of the next parts).
FIRST_PART = 256


def total_in_parts(run: Callable[[dict[int, Task]], Any], tasks: dict[int, Task],
                   part_bytes: int = PART_BYTES) -> Stats:
    """The sum of ``tasks``' statistics, asked of the clients in parts of consecutive client ids.

    ``run(tasks)`` runs some of the tasks and returns their replies (all of them answered). The
    first part has :data:`FIRST_PART` clients; the next ones as many as fit in ``part_bytes`` of
    replies at the first part's bytes a client. Same bits as one :func:`fedray.total` of all replies.
    """
    ids = sorted(tasks)
    acc = RunningTotal()
    lo, size = 0, FIRST_PART
    while lo < len(ids):
        part = ids[lo:lo + size]
        replies = run({c: tasks[c] for c in part})
        if lo == 0:
            per_client = max(1, int(np.sum(_nbytes(replies))) // max(1, len(part)))
            size = max(FIRST_PART, part_bytes // per_client)
        acc.add(replies)
        lo += len(part)
    return acc.result()


def all_answered(call: Any, tasks: dict[int, Task], res: Any) -> Any:
    """The replies of ``res`` (an ExecResult of ``tasks`` run as ``call``); raises :class:`DataError` in one
    line naming how many clients did not answer, and the first one's error."""
    if len(res.replies) < len(tasks):
        first = next(iter(res.errors.values()), "no reply").strip()
        raise DataError(f"{call.label()}: {len(tasks) - len(res.replies)} of {len(tasks)} clients did not "
                        f"answer: {(first.splitlines() or [''])[-1]}")
    return res.replies


def _nbytes(replies: Any) -> np.ndarray:
    cols = getattr(replies, "columns", None)
    if cols is not None:
        return cols()[2]
    return np.asarray([r.nbytes for r in replies], dtype=np.int64)


def central_rows(n_samples: np.ndarray, max_rows: int, seed: int) -> dict[int, np.ndarray] | None:
    """The rows of each client a central baseline runs on: None (every row) when the union has at most
    ``max_rows`` rows, else a uniform sample of ``max_rows`` rows of the union without replacement,
    drawn from the seed (client id -> sorted positions of its rows; clients with none left out).

    Parameters
    ----------
    n_samples : ndarray (n_clients,) of int
        Rows of each client, in client-id order.
    """
    n = np.asarray(n_samples, dtype=np.int64)
    total = int(n.sum())
    if total <= max_rows:
        return None
    chosen = np.sort(server_rng(seed, 0, CENTRAL_ROWS_STREAM).choice(total, size=max_rows, replace=False))
    starts = np.concatenate([[0], np.cumsum(n)])
    owner = np.searchsorted(starts, chosen, side="right") - 1
    cut = np.flatnonzero(np.diff(owner)) + 1
    return {int(o[0]): c - starts[o[0]] for o, c in zip(np.split(owner, cut), np.split(chosen, cut))}


def feature_box(bounds: list[tuple[float, float]], n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """``privacy.feature_bounds`` as the (low, high) arrays of the federation's box, one pair per feature."""
    if len(bounds) != n_features:
        raise ConfigError(f"privacy.feature_bounds: {len(bounds)} (low, high) pairs for {n_features} features; "
                          "give one pair per feature")
    b = np.asarray(bounds, dtype=np.float64)
    return b[:, 0].copy(), b[:, 1].copy()


