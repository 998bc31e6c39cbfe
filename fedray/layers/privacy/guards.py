"""The guards a client applies before it sends statistics, and the count of small clusters.

* the minimum-sample guard (Corcuera Bárcena et al. 2021, Sec. 4.2): a client withholds L
  statistics unless its N_m samples of F features give N_m F > L;
* the small-cluster guard (``privacy.min_cluster_count``): a client zeroes every cluster whose
  point count is positive but below the minimum;
* :func:`count_small_clusters`: the clusters whose sum is (nearly) one row, counted as disclosures.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedray.core.contract import Reply
from fedray.core.errors import RoundFailedError
from fedray.core.stats import COUNTS_OF, Stats

# Per-cluster sums and the point counts next to them (crisp clusters: the small-cluster guard and count):
# the roles the statistics' arrays have (fedray.core.stats.COUNTS_OF).
CLUSTER_PAIRS = COUNTS_OF


def small_cluster_guard(stats: Stats, min_count: float) -> tuple[Stats, int]:
    """Zero the clusters whose count is positive but below ``min_count``; returns them counted."""
    arrays = {k: np.array(stats[k], dtype=np.float64) for k in stats}
    hit = 0
    for s, c in CLUSTER_PAIRS.items():
        if s in arrays and c in arrays and arrays[c].ndim == 1 and arrays[s].shape[:1] == arrays[c].shape:
            small = (arrays[c] > 0) & (arrays[c] < min_count)
            if small.any():
                hit += int(small.sum())
                k = arrays[c].shape[0]
                for v in arrays.values():
                    if v.ndim >= 1 and v.shape[0] == k:
                        v[small] = 0.0
    return (Stats(**arrays) if hit else stats), hit


def count_small_clusters(stats: Any, below: float = 2.0) -> int:
    """Clusters of ``stats`` whose count is in (0, below): their sum is (nearly) one row."""
    if not isinstance(stats, Stats):
        return 0
    n = 0
    for s, c in CLUSTER_PAIRS.items():
        if s in stats and c in stats and np.ndim(stats[c]) == 1:
            cnt = np.asarray(stats[c])
            n += int(np.sum((cnt > 1e-9) & (cnt < below - 1e-9)))
    return n


def enough_samples(X: np.ndarray, n_statistics: int) -> bool:
    """The minimum-sample guard: N_m > L / F, i.e. the N_m F unknowns exceed the L equations."""
    F = max(1, X.shape[1])
    return X.shape[0] * F > n_statistics


#: The statistic a client adds beside its crisp per-cluster sums under secure aggregation without DP:
#: 1 for each cluster it has a point in. Summed, it is each cluster's number of contributors.
CONTRIBUTORS = "_contributors"


def with_contributors(stats: Stats) -> Stats:
    """``stats`` with :data:`CONTRIBUTORS` added when it holds crisp per-cluster sums and counts."""
    for s, c in CLUSTER_PAIRS.items():
        if s in stats and c in stats and np.ndim(stats[c]) == 1 and CONTRIBUTORS not in stats:
            return Stats(**dict(stats), **{CONTRIBUTORS: (np.asarray(stats[c]) > 0).astype(np.float64)})
    return stats


def per_cluster_support(total: Stats, min_cohort: int) -> tuple[Stats, int]:
    """A secure total without :data:`CONTRIBUTORS`, every per-cluster component with fewer than
    ``min_cohort`` contributors (but some) zeroed; returns it and how many clusters were zeroed."""
    if CONTRIBUTORS not in total:
        return total, 0
    support = np.asarray(total[CONTRIBUTORS])
    low = (support > 0.5) & (support < min_cohort - 0.5)
    k = support.shape[0]
    arrays = {n: np.array(v, dtype=np.float64) for n, v in total.items() if n != CONTRIBUTORS}
    if low.any():
        for v in arrays.values():
            if v.ndim >= 1 and v.shape[0] == k:
                v[low] = 0.0
    return Stats(**arrays), int(low.sum())


def fill_withheld(res: Any, call: Any) -> None:
    """Withheld statistics count as zero, so that any aggregation that sums replies works."""
    withheld = [k for k, r in enumerate(res.replies) if r.update is None]
    if not withheld:
        return
    sent = next((r.update for r in res.replies if isinstance(r.update, Stats)), None)
    if sent is None:
        raise RoundFailedError(
            f"{call.label()}: every client withheld its statistics (privacy.min_samples_guard: a client sends "
            f"L statistics only if its N_m samples of F features give N_m * F > L); use fewer clusters, "
            f"fewer and larger clients, or turn the guard off")
    zero = sent.zero()
    for k in withheld:
        r = res.replies[k]
        res.replies[k] = Reply(r.client_id, zero, r.seconds, r.nbytes)
