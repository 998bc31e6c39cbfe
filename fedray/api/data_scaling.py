"""A session's data checks and feature scaling, from per-client summaries (no row leaves a client).

:func:`check_and_scale` checks the clients' descriptions, sums their column moments (in the clear,
or under privacy through secure aggregation: :func:`private_moments`), joins the federation's release
log, and computes and applies the scaling of ``data.scale`` (``standard``: mean and standard deviation;
``minmax``: the federation's box). It returns the :class:`~fedray.core.contract.FederationInfo` the
algorithms are built on, and the scaler.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedray.api.scale import feature_box
from fedray.core import calls
from fedray.core.contract import FederationInfo, Task
from fedray.data.checks import Descriptions, check_descriptions, check_magnitude, column_moments
from fedray.layers.privacy import PrivacyLayer
from fedray.layers.stack import find_layer, join_federation


def check_and_scale(session: Any, desc: Descriptions
                    ) -> tuple[FederationInfo, tuple[np.ndarray, np.ndarray] | None]:
    """The federation's :class:`FederationInfo` and the scaler applied to its clients (None: none)."""
    cfg, federation = session.config, session.federation
    names = federation.feature_names
    n_features = check_descriptions(desc)
    n = desc.n
    N = float(n.sum())
    if cfg.privacy.active:
        s, ss, lo, hi = private_moments(session, n_features, N, names)
    else:  # per-client moments as rows, summed over clients in id order
        s, ss, lo, hi = desc.totals()
        check_magnitude(lo, hi, N, names)
    scaler = None
    mode = cfg.data.scale
    # the federation's release log (fedray.layers.stack.join_federation), shared by its sessions
    session.fingerprint = join_federation([sp.name for sp in federation.specs], n, n_features, (s, ss),
                                          (find_layer(session.layers, PrivacyLayer), session.secure))
    if cfg.privacy.feature_bounds is not None:  # the user's box, also for random starts and plots
        lo, hi = feature_box(cfg.privacy.feature_bounds, n_features)
    if mode == "standard":
        mean = s / N
        std = np.sqrt(np.maximum(ss / N - mean ** 2, 0.0))
        scaler = (mean, np.where(std > 0, std, 1.0))
    elif mode == "minmax":
        rng = hi - lo
        scaler = (lo, np.where(rng > 0, rng, 1.0))
    if scaler is not None:
        session.executor.apply_scaler(*scaler)
        lo, hi = (lo - scaler[0]) / scaler[1], (hi - scaler[0]) / scaler[1]
    n_classes = federation.n_classes or (int(desc.classes.max()) + 1 if desc.classes.size else None)
    info = FederationInfo(n_clients=len(desc), n_features=n_features, sample_shape=federation.sample_shape,
                          n_samples=n, feature_min=lo, feature_max=hi, n_classes=n_classes,
                          has_labels=federation.has_labels,
                          extras={**federation.extras, "feature_names": names})
    return info, scaler


def private_moments(session: Any, n_features: int, N: float, names: Any) -> tuple[np.ndarray, ...]:
    """Column sums and sums of squares through secure aggregation (no per-client moment or
    extreme reaches the server), and a box for the federation: ``privacy.feature_bounds`` if
    given, else mean +- 3 standard deviations (not the data's extremes)."""
    p = session.config.privacy
    tasks = dict.fromkeys(range(len(session.federation.specs)), Task(column_moments, None, None))
    if session.can_secure_sum():
        t = session.secure_sum_layer().secure_sum(calls.setup("moments"), tasks)
    else:  # too few clients for a secure sum: per-client moments reach the server (counted)
        res = session.call(calls.setup("moments"), tasks)
        t = sum((r.update for r in res.replies[1:]), start=res.replies[0].update)
        session.disclosures["setup_moments"] = len(res.replies)
    s, ss = t["s"], t["ss"]
    with np.errstate(over="ignore", invalid="ignore"):
        big = np.sqrt(ss)  # bounds every |x| of the union
    check_magnitude(-big, big, N, names)
    if p.feature_bounds is not None:
        lo, hi = feature_box(p.feature_bounds, n_features)
    else:
        mean = s / N
        std = np.sqrt(np.maximum(ss / N - mean ** 2, 0.0))
        lo, hi = mean - 3 * std, mean + 3 * std
    return s, ss, lo, hi
