"""Deterministic random streams.

All randomness in a run derives from the experiment seed through
:class:`numpy.random.SeedSequence`, keyed by (seed, client id, round) for clients
and (seed, round) for the server. Nothing uses a global generator, so results do
not depend on the runtime, the number of actors or the order of execution.
"""
from __future__ import annotations

import numpy as np

_SERVER = 0
_CLIENT = 1
_DATA = 2

# The named sub-streams, one place for all of them (their values are part of every seed's results).
# Server streams, keyed by (seed, round, stream, ...):
SAMPLING_STREAM = 1  #: the clients sampled each round (sample_clients)
ALGORITHM_STREAM = 7  #: RoundContext.rng, the algorithm's own server draws
FAULT_STREAM = 11  #: the injected faults' plan (fedray.layers.faults)
MASK_RING_STREAM = 13  #: the public mask graph of secure aggregation (privacy.mask_neighbors)
# Client streams, keyed by (seed, client, round, stream, ...):
DP_NOISE_STREAM = 29  #: seeded DP noise (privacy.dp.seeded_noise, debugging only)
# Data streams, keyed by (seed, stream, ...):
SPLIT_STREAM = 41  #: each client's own train/test split (fedray.nn.split), keyed by the client too
PARTITION_STREAM = 1  #: the partition of a pooled data set over clients
BLOB_CENTERS_STREAM = 2  #: the centres of generated blobs
BLOB_ROWS_STREAM = 3  #: the rows of each client's generated blobs
CLASS_SUBSETS_STREAM = 11  #: FedCRef's class-subset federations
IMAGE_FEDERATIONS_STREAM = 60  #: the image federations of Mehta & Shao (groups, rotations, swaps)
WRITERS_STREAM = 61  #: the writers chosen as clients of a natural federation (by_writer)
MOTIVATIONAL_STREAM = 101  #: the scenario stallmann-motivational
TRIEBE_1D_STREAM = 102  #: the scenario triebe-1d
CENTRAL_STARTS_STREAM = 7001  #: the central baseline's starts in K selection


def _u(x: int) -> int:
    """Non-negative key (negative rounds are set-up and evaluation passes)."""
    x = int(x)
    return x if x >= 0 else 2**62 - x


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
    rng = server_rng(seed, round_, SAMPLING_STREAM)
    return np.sort(rng.choice(n_clients, size=m, replace=False))


def n_sampled(fraction: float, n_clients: int) -> int:
    """Clients sampled per round, as :func:`fedray.core.seeding.sample_clients` samples them."""
    return min(n_clients, max(1, int(np.floor(fraction * n_clients + 1e-12))))
