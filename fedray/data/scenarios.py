"""The papers' federated scenarios as named data sets (``data.dataset: scenario:NAME``).

* ``scenario:stallmann-motivational`` — Stallmann & Wilbik (2022), Sections 1.1 and
  3.2.1: five 2-D Gaussians, 500 points at (0, 0) and (1, 1), 1000 at (0, 1) and
  (1, 0) (σ = 0.2) and 120 at (0.5, 0.5) (σ = 0.01), split over three natural
  clients — each holds 40 points of the small cluster; client 1: 500 each of
  (0, 0) and (0, 1); client 2: 500 each of (0, 1) and (1, 0); client 3: 500 each of
  (1, 1) and (1, 0). The clients are the data set's ``groups``, so the default
  partition is ``by_column`` (three clients). Alone, each client sees two
  clusters; the union has five. ``meta`` carries the true centres and the
  paper's local-only range of K (2..5, Table 1).
* ``scenario:triebe-1d`` — Triebe & Rajagopal (2019), Section 2.1: 50 non-IID
  clients with 10 one-dimensional samples each, every client drawn from one of
  five Gaussians with means 1, ..., 5 and scale 0.2 (chosen uniformly at random).
  Options ``n_clients``, ``samples_per_client``, ``n_centers``, ``scale``.

The G2 set-up of Stallmann & Wilbik (Section 3.2.2) needs no scenario: it is
``benchmark:g2mg/g2mg_D_S`` with a uniform random split, see :func:`g2_config`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedray.core.errors import ConfigError
from fedray.core.seeding import MOTIVATIONAL_STREAM, TRIEBE_1D_STREAM, data_rng
from fedray.data.datasets import Dataset, register_scenario

MOTIVATIONAL_CENTERS = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
# (cluster, points) held by each client, Section 3.2.1
MOTIVATIONAL_CLIENTS = (
    ((0, 500), (1, 500), (4, 40)),
    ((1, 500), (3, 500), (4, 40)),
    ((2, 500), (3, 500), (4, 40)),
)


@register_scenario("stallmann-motivational")
def stallmann_motivational(seed: int = 0, sigma: float = 0.2, small_sigma: float = 0.01) -> Dataset:
    """The motivational example of Stallmann & Wilbik (2022); 3120 points, 3 clients.

    Parameters
    ----------
    seed : int
        Seed of the draw.
    sigma : float
        Standard deviation of the four large clusters (paper: 0.2).
    small_sigma : float
        Standard deviation of the small cluster at (0.5, 0.5) (paper: 0.01).

    Returns
    -------
    Dataset
        ``X`` (3120, 2), ``y`` (3120,) the generating Gaussian (0..4), ``groups``
        the client names ``client-1`` .. ``client-3``.
    """
    if not (sigma > 0 and small_sigma > 0):
        raise ConfigError(f"data.options: sigma and small_sigma must be > 0; got {sigma!r}, {small_sigma!r}")
    rng = data_rng(seed, MOTIVATIONAL_STREAM)
    X, y, g = [], [], []
    for ci, holdings in enumerate(MOTIVATIONAL_CLIENTS):
        for cluster, n in holdings:
            s = small_sigma if cluster == 4 else sigma
            X.append(MOTIVATIONAL_CENTERS[cluster] + rng.normal(scale=s, size=(n, 2)))
            y.append(np.full(n, cluster, dtype=np.int64))
            g.append(np.full(n, f"client-{ci + 1}"))
    meta = {"true_centers": MOTIVATIONAL_CENTERS.tolist(), "local_k_range": [2, 5], "true_k": 5}
    return Dataset(np.vstack(X), np.concatenate(y), ("x0", "x1"), (2,), "scenario:stallmann-motivational",
                   groups=np.concatenate(g), meta=meta)


@register_scenario("triebe-1d")
def triebe_1d(seed: int = 0, n_clients: int = 50, samples_per_client: int = 10, n_centers: int = 5,
              scale: float = 0.2) -> Dataset:
    """The synthetic non-IID data of Triebe & Rajagopal (2019): one Gaussian per client.

    Parameters
    ----------
    seed : int
        Seed of the draw.
    n_clients : int
        Number of clients (paper: 50), kept as the clients by the default partition by_column.
    samples_per_client : int
        One-dimensional samples per client (paper: 10).
    n_centers : int
        Gaussians with means 1, ..., n_centers; each client draws from one (paper: 5).
    scale : float
        Standard deviation of every Gaussian (paper: 0.2).

    Returns
    -------
    Dataset
        ``X`` (n_clients · samples_per_client, 1), ``y`` the client's Gaussian,
        ``groups`` the client index (zero-padded names, so ``by_column`` keeps the order).
    """
    for key, v in (("n_clients", n_clients), ("samples_per_client", samples_per_client), ("n_centers", n_centers)):
        if int(v) < 1:
            raise ConfigError(f"data.options.{key}: must be >= 1; got {v!r}")
    if not scale > 0:
        raise ConfigError(f"data.options.scale: must be > 0; got {scale!r}")
    rng = data_rng(seed, TRIEBE_1D_STREAM)
    means = np.arange(1, n_centers + 1, dtype=np.float64)
    which = rng.integers(0, n_centers, size=n_clients)
    X = means[np.repeat(which, samples_per_client)] + rng.normal(scale=scale, size=n_clients * samples_per_client)
    width = len(str(n_clients - 1))
    groups = np.repeat(np.array([f"client-{i:0{width}d}" for i in range(n_clients)]), samples_per_client)
    meta = {"true_centers": means[:, None].tolist(), "true_k": int(n_centers)}
    return Dataset(X[:, None], np.repeat(which, samples_per_client).astype(np.int64), ("x0",), (1,),
                   "scenario:triebe-1d", groups=groups, meta=meta)


def g2_dataset(dim: int, spread: int, battery: str = "g2mg") -> str:
    """The ``data.dataset`` string of one G2 set: ``g2mg`` (Gagolewski's variant) or ``g2`` (Fränti's originals)."""
    if battery == "g2":
        return f"benchmark:g2/g2-{int(dim)}-{int(spread)}"
    if battery == "g2mg":
        return f"benchmark:g2mg/g2mg_{int(dim)}_{int(spread)}"
    raise ConfigError(f"battery: expected 'g2' or 'g2mg'; got {battery!r}")


def g2_config(dim: int, spread: int, n_clients: int, *, seed: int = 0, data_dir: str | None = None,
              algorithm: str = "fedfcm", params: dict[str, Any] | None = None, battery: str = "g2mg") -> dict[str, Any]:
    """Configuration of the G2 experiment (Stallmann & Wilbik, Section 3.2.2) for one set.

    ``benchmark:g2mg/g2mg_{dim}_{spread}`` (2048 points, two Gaussians), or with ``battery="g2"`` the
    original set ``benchmark:g2/g2-{dim}-{spread}``, split uniformly at random over ``n_clients`` clients,
    on the local runtime.
    """
    return {
        "seed": int(seed),
        "algorithm": {"name": algorithm, "params": dict(params or {})},
        "data": {"dataset": g2_dataset(dim, spread, battery), "data_dir": data_dir,
                 "partition": {"name": "iid"}},
        "federation": {"n_clients": int(n_clients), "fraction": 1.0},
        "runtime": {"backend": "local", "progress": False},
    }
