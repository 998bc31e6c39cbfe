"""Deterministic random streams.

All randomness in a run derives from the experiment seed through
:class:`numpy.random.SeedSequence`, keyed by (seed, client id, round) for clients
and (seed, round) for the server. Nothing uses a global generator, so results do
not depend on the runtime, the number of actors or the order of execution.
"""
from __future__ import annotations

import numpy as np

_SERVER = 0


def _u(x: int) -> int:
    """Non-negative key (negative rounds are set-up and evaluation passes)."""
    x = int(x)
    return x if x >= 0 else 2**62 - x
_CLIENT = 1
_DATA = 2


def server_rng(seed: int, round_: int, *stream: int) -> np.random.Generator:
    """Generator of the server for ``round_`` (extra ints select sub-streams)."""
    return np.random.default_rng(np.random.SeedSequence([_u(seed), _SERVER, _u(round_), *map(_u, stream)]))


def client_rng(seed: int, client_id: int, round_: int, *stream: int) -> np.random.Generator:
    """Generator of client ``client_id`` in ``round_``."""
    return np.random.default_rng(
        np.random.SeedSequence([_u(seed), _CLIENT, _u(client_id), _u(round_), *map(_u, stream)])
    )


def data_rng(seed: int, *key: int) -> np.random.Generator:
    """Generator used to build data (partitions, generated shards)."""
    return np.random.default_rng(np.random.SeedSequence([_u(seed), _DATA, *map(_u, key)]))


def sample_clients(seed: int, round_: int, n_clients: int, fraction: float) -> np.ndarray:
    """Client ids taking part in ``round_``: m = max(1, floor(fraction * n)) without replacement.

    Returns the ids sorted ascending.
    """
    m = n_sampled(fraction, n_clients)
    if m >= n_clients:
        return np.arange(n_clients)
    rng = server_rng(seed, round_, 1)
    return np.sort(rng.choice(n_clients, size=m, replace=False))


def n_sampled(fraction: float, n_clients: int) -> int:
    """Clients sampled per round, as :func:`fedray.core.seeding.sample_clients` samples them."""
    return min(n_clients, max(1, int(np.floor(fraction * n_clients + 1e-12))))
