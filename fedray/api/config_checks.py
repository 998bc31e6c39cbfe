"""The configuration's checks that need no data: across sections, run once it is validated
(:func:`validate_static`, called by :func:`fedray.api.config.make_config`)."""
from __future__ import annotations

from typing import Any

from fedray.api.federation_config import check_clock
from fedray.api.settings import user_layers
from fedray.api.tracking import check_available as check_trackers
from fedray.core.errors import ConfigError
from fedray.core.extras import check_requirements, missing
from fedray.core.registry import get_algorithm, make_params
from fedray.core.seeding import block_cohorts, n_sampled
from fedray.data.arrays import ArrayData
from fedray.data.datasets import check_dataset_name


def validate_static(cfg: Any) -> None:
    """Checks that need no data: algorithm and its parameters, dataset name, runtime."""

    cls = get_algorithm(cfg.algorithm.name)

    check_requirements(cls)
    check_trackers(cfg.output.trackers)
    make_params(cls, cfg.algorithm.params)
    if isinstance(cfg.data.dataset, ArrayData):
        _check_arrays(cfg)
    else:
        check_dataset_name(cfg.data.dataset)
    fed = cfg.federation
    if fed.n_clients is not None and fed.min_clients > fed.n_clients:
        raise ConfigError(
            f"federation.min_clients: {fed.min_clients} is more than federation.n_clients={fed.n_clients}")
    _check_reliability(cfg)
    check_clock(cfg)
    user_layers(cfg)  # each user layer is made once here, so that a bad one fails before Ray starts
    cls.check_config(cfg)


def _check_arrays(cfg: Any) -> None:
    """``data`` keys that apply to files only are unset; ``federation.n_clients`` agrees with the arrays' split."""
    d = cfg.data
    for key, arg in (("data_dir", None), ("feature_columns", "select the columns of X"),
                     ("label_column", "y="), ("client_column", "clients="), ("options", None),
                     ("partition", "partition=")):
        value = getattr(d, key)
        if value:
            how = f"pass {arg} to fedray.from_arrays instead" if arg else "remove it"
            raise ConfigError(f"data.{key}: {value!r} applies to files, not to data.dataset from fedray.from_arrays; "
                              + how)
    arrays, fed = d.dataset, cfg.federation
    if arrays.n_clients is not None:
        if "n_clients" in fed.model_fields_set and fed.n_clients not in (None, arrays.n_clients):
            raise ConfigError(f"federation.n_clients: {fed.n_clients}, but the arrays from fedray.from_arrays are "
                              f"split over {arrays.n_clients} clients; leave federation.n_clients unset")
        fed.n_clients = arrays.n_clients


def _check_reliability(cfg: Any) -> None:
    """Cross-section checks of ``faults``, ``privacy`` and ``checkpoint``."""
    f, rt = cfg.faults, cfg.runtime
    if f.crash_scope == "actor" and (f.crash_probability or f.crashes):
        if rt.backend != "ray":
            raise ConfigError("faults.crash_scope: 'actor' kills a Ray actor process and needs runtime.backend='ray'; "
                              f"got runtime.backend={rt.backend!r} (use crash_scope='client')")
        if rt.max_restarts == 0:
            raise ConfigError("faults.crash_scope: 'actor' needs runtime.max_restarts > 0 or -1 so that crashed actors "
                              "are restarted; got runtime.max_restarts=0")
    if f.delay_mode == "sleep" and f.delay_probability and rt.backend != "ray":
        raise ConfigError("faults.delay_mode: 'sleep' needs runtime.backend='ray' (the local runtime has no deadline); "
                          "use delay_mode='virtual'")
    if f.delay_probability and f.delay_seconds and rt.round_timeout is None:
        raise ConfigError("faults.delay_probability: delays only matter with a deadline; set runtime.round_timeout")
    _check_privacy(cfg)
    for r, c in f.crashes:
        if r < 0 or c < 0 or (cfg.federation.n_clients is not None and c >= cfg.federation.n_clients):
            raise ConfigError(f"faults.crashes: ({r}, {c}) must be (round >= 0, client id in "
                              f"[0, federation.n_clients))")


def _check_privacy(cfg: Any) -> None:
    """Privacy settings that cannot hold: min-max scaling from clients' extremes, cohorts below the minimum."""
    p = cfg.privacy
    if p.dp is not None and missing(("dp_accounting",)):
        raise ConfigError("privacy.dp: the epsilon of the guarantee is computed with dp-accounting, which is not "
                          "installed; install it with: pip install \"fedray[privacy]\"")
    if p.active and cfg.data.scale == "minmax" and p.feature_bounds is None:
        raise ConfigError("data.scale: 'minmax' uses each client's minimum and maximum (which can be rows) and is "
                          "refused under privacy; use data.scale='standard' (securely summed moments) or give "
                          "privacy.feature_bounds")
    for k, (lo, hi) in enumerate(p.feature_bounds or ()):
        if not (lo < hi):
            raise ConfigError(f"privacy.feature_bounds[{k}]: ({lo}, {hi}) must have low < high")
    n = cfg.federation.n_clients
    if p.secure_aggregation and n is not None:
        m = n if block_cohorts(p, cfg.federation.fraction) else n_sampled(cfg.federation.fraction, n)
        if m < p.min_cohort:
            raise ConfigError(f"privacy.min_cohort: secure aggregation needs cohorts of at least {p.min_cohort} "
                              f"clients; federation.n_clients={n} with fraction={cfg.federation.fraction} samples "
                              f"{m}")
