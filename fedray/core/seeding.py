"""Deterministic random streams.

All randomness in a run derives from the experiment seed through
:class:`numpy.random.SeedSequence`, keyed by (seed, client id, round) for clients
and (seed, round) for the server. Nothing uses a global generator, so results do
not depend on the runtime, the number of actors or the order of execution.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.random.bit_generator import ISeedSequence

from fedray.core.errors import ConfigError

_SERVER = 0
_CLIENT = 1
_DATA = 2

# The named sub-streams, one place for all of them (their values are part of every seed's results).
# Server streams, keyed by (seed, round, stream, ...):
SAMPLING_STREAM = 1  #: the clients sampled each round (sample_clients)
ALGORITHM_STREAM = 7  #: RoundContext.rng, the algorithm's own server draws
FAULT_STREAM = 11  #: the injected faults' plan (fedray.layers.faults)
MASK_RING_STREAM = 13  #: the public mask graph of secure aggregation (privacy.mask_neighbors)
BLOCKS_STREAM = 17  #: the fixed client blocks of privacy.cohorts='blocks' (client_blocks)
DEVICES_STREAM = 19  #: the device profile drawn for each client (federation.devices)
AVAILABILITY_STREAM = 23  #: the generated availability traces (federation.availability)
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
CENTRAL_ROWS_STREAM = 7002  #: the rows of a subsampled central baseline (evaluation.central_max_rows)


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


def data_rng_many(seed: int, key_prefix: tuple[int, ...], ids: np.ndarray) -> Iterator[np.random.Generator]:
    """The generators ``data_rng(seed, *key_prefix, i)`` for every ``i`` in ``ids``, in order.

    Bit for bit those of :func:`data_rng` (the same PCG64 state, hence the same draws), at a
    fraction of the cost: the seed hashing runs once over all ids (:func:`data_seed_words`).
    The ids are checked at once; the generators are made one at a time, as the iterator is consumed.
    """
    words = data_seed_words(seed, key_prefix, ids)
    return (np.random.Generator(np.random.PCG64(SeedWords(row))) for row in words)


def data_seed_words(seed: int, key_prefix: tuple[int, ...], ids: np.ndarray) -> np.ndarray:
    """PCG64 seed words (n, 4) uint64: row ``j`` is what ``data_rng(seed, *key_prefix, ids[j])``
    hands its PCG64 (``SeedSequence([...]).generate_state(4, np.uint64)``), hashed for all ids at once.

    ``ids`` are integers (negative ones are mapped as :func:`data_rng` maps them); ids of different
    sizes in 32-bit words are hashed in groups of one size.
    """
    return _seed_words((_u(seed), _DATA, *map(_u, key_prefix)), ids, ())


def client_rng_many(seed: int, ids: np.ndarray, round_: int, *stream: int) -> list[np.random.Generator]:
    """The generators ``client_rng(seed, i, round_, *stream)`` for every client ``i`` in ``ids``, in order.

    Bit for bit those of :func:`client_rng` (the same PCG64 state, hence the same draws); the seed
    hashing runs once over all ids (:func:`client_seed_words`), as :func:`data_rng_many`'s does.
    """
    words = client_seed_words(seed, ids, round_, *stream)
    return [np.random.Generator(np.random.PCG64(SeedWords(row))) for row in words]


def client_seed_words(seed: int, ids: np.ndarray, round_: int, *stream: int) -> np.ndarray:
    """PCG64 seed words (n, 4) uint64: row ``j`` is what ``client_rng(seed, ids[j], round_, *stream)``
    hands its PCG64, hashed for all ids at once."""
    return _seed_words((_u(seed), _CLIENT), ids, (_u(round_), *map(_u, stream)))


def _seed_words(before: tuple[int, ...], ids: np.ndarray, after: tuple[int, ...]) -> np.ndarray:
    """Seed words (n, 4) uint64 of ``SeedSequence([*before, _u(id), *after])`` for every id (non-negative
    ints ``before`` and ``after``), hashed column-wise."""
    key = _ids_as_keys(ids)
    head = [w for v in before for w in _words32(v)]
    tail = [w for v in after for w in _words32(v)]
    out = np.empty((key.size, 4), dtype=np.uint64)
    n_words = np.where(key >> np.uint64(32) == 0, 1, 2)  # a uint64 is one or two words
    for n in np.unique(n_words):
        sel = np.flatnonzero(n_words == n)
        cols = [np.full(sel.size, w, dtype=np.uint32) for w in head]
        cols += [((key[sel] >> np.uint64(32 * i)) & np.uint64(_MASK32)).astype(np.uint32) for i in range(int(n))]
        cols += [np.full(sel.size, w, dtype=np.uint32) for w in tail]
        out[sel] = _generate_state(_mix_entropy(cols))
    return out


class SeedWords(ISeedSequence):
    """A seed sequence that hands a bit generator precomputed seed words (see :func:`data_seed_words`)."""

    __slots__ = ("words",)

    def __init__(self, words: np.ndarray) -> None:
        self.words = words

    def generate_state(self, n_words: int, dtype: type = np.uint32) -> np.ndarray:
        if n_words != self.words.size or np.dtype(dtype) != self.words.dtype:
            raise ConfigError(f"SeedWords holds {self.words.size} words of {self.words.dtype}; "
                              f"asked for {n_words} of {np.dtype(dtype)}")
        return self.words


# numpy's SeedSequence hashing (numpy/random/bit_generator.pyx), vectorised over the ids.
_POOL = 4
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R = 0xCA01F9DD, 0x4973F715
_XSHIFT = np.uint32(16)
_MASK32 = 0xFFFFFFFF


def _words32(x: int) -> list[int]:
    """Little-endian 32-bit words of ``x >= 0`` as SeedSequence takes an int (0 is one word)."""
    out = [x & _MASK32]
    x >>= 32
    while x:
        out.append(x & _MASK32)
        x >>= 32
    return out


def _ids_as_keys(ids: np.ndarray) -> np.ndarray:
    """``_u`` of every id, as uint64 (``2**62 - x`` for a negative ``x``)."""
    arr = np.asarray(ids)
    if arr.ndim != 1 or not (arr.dtype.kind in "iu" or arr.size == 0):
        raise ConfigError(f"ids: expected a 1-d array of integers; got shape {arr.shape} of {arr.dtype}")
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64)
    arr = arr.astype(np.int64)
    key = arr.astype(np.uint64)  # wraps: 2**62 - x below is taken modulo 2**64, hence exact
    neg = arr < 0
    key[neg] = np.uint64(2**62) - key[neg]
    return key


def _hashmix(value: np.ndarray, const: list[int]) -> np.ndarray:
    value = value ^ np.uint32(const[0])
    const[0] = (const[0] * _MULT_A) & _MASK32
    value = value * np.uint32(const[0])
    return value ^ (value >> _XSHIFT)


def _mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    r = np.uint32(_MIX_MULT_L) * x - np.uint32(_MIX_MULT_R) * y
    return r ^ (r >> _XSHIFT)


def _mix_entropy(cols: list[np.ndarray]) -> list[np.ndarray]:
    """SeedSequence.mix_entropy: the pool (4 columns) from the entropy's 32-bit word columns."""
    const = [_INIT_A]
    zero = np.zeros_like(cols[0])
    pool = [_hashmix(cols[i] if i < len(cols) else zero, const) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = _mix(pool[dst], _hashmix(pool[src], const))
    for src in range(_POOL, len(cols)):
        for dst in range(_POOL):
            pool[dst] = _mix(pool[dst], _hashmix(cols[src], const))
    return pool


def _generate_state(pool: list[np.ndarray]) -> np.ndarray:
    """SeedSequence.generate_state(4, np.uint64): (n, 4) uint64 from the pool."""
    const = _INIT_B
    state = np.empty((pool[0].size, 8), dtype=np.uint32)
    for i in range(8):
        v = pool[i % _POOL] ^ np.uint32(const)
        const = (const * _MULT_B) & _MASK32
        v = v * np.uint32(const)
        state[:, i] = v ^ (v >> _XSHIFT)
    return state.astype("<u4", copy=False).view("<u8").astype(np.uint64, copy=False)


def sample_clients(seed: int, round_: int, n_clients: int, fraction: float) -> np.ndarray:
    """Client ids taking part in ``round_``: m = max(1, floor(fraction * n)) without replacement.

    Returns the ids sorted ascending.
    """
    m = n_sampled(fraction, n_clients)
    if m >= n_clients:
        return np.arange(n_clients)
    rng = server_rng(seed, round_, SAMPLING_STREAM)
    return np.sort(rng.choice(n_clients, size=m, replace=False))


def client_blocks(seed: int, n_clients: int, size: int) -> np.ndarray:
    """Each client's fixed block (privacy.cohorts='blocks'): a seeded permutation of the clients cut
    into ``n_clients // size`` blocks of ``size`` clients, the last also holding the remainder
    (every block has at least ``size`` clients; one block when there are fewer than ``2 size``)."""
    n_blocks = max(1, n_clients // size)
    order = server_rng(seed, 0, BLOCKS_STREAM).permutation(n_clients)
    blocks = np.empty(n_clients, dtype=np.int64)
    blocks[order] = np.minimum(np.arange(n_clients) // size, n_blocks - 1)
    return blocks


def block_cohorts(privacy: Any, fraction: float) -> bool:
    """Rounds sample whole fixed blocks (:func:`sample_blocks`): secure aggregation at ``fraction`` < 1 with
    ``privacy.cohorts`` ``blocks``, or ``auto`` (the default) without DP."""
    auto = privacy.cohorts == "auto" and privacy.dp is None
    return bool(privacy.secure_aggregation and fraction < 1 and (privacy.cohorts == "blocks" or auto))


def sample_blocks(seed: int, round_: int, blocks: np.ndarray, fraction: float) -> np.ndarray:
    """Client ids taking part in ``round_`` when cohorts are unions of fixed ``blocks``:
    max(1, floor(fraction * blocks)) whole blocks without replacement; sorted ascending."""
    n_blocks = int(blocks.max()) + 1 if blocks.size else 0
    m = n_sampled(fraction, n_blocks)
    if m >= n_blocks:
        return np.arange(blocks.size)
    chosen = server_rng(seed, round_, SAMPLING_STREAM).choice(n_blocks, size=m, replace=False)
    return np.flatnonzero(np.isin(blocks, chosen))


def n_sampled(fraction: float, n_clients: int) -> int:
    """Clients sampled per round, as :func:`fedray.core.seeding.sample_clients` samples them."""
    return min(n_clients, max(1, int(np.floor(fraction * n_clients + 1e-12))))
