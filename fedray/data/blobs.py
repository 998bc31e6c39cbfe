"""Generated ``blobs`` shards: one client's (:func:`generate_client_blobs`) or a block of many (:func:`generate_block`).

Every client draws its points from its own stream, ``data_rng(seed, BLOB_ROWS_STREAM, client)``:
the blob of each point by ``Generator.choice(k, p=w)`` and the noise by
``Generator.normal(scale=cluster_std)``, around centres shared by all clients. The block
generator gives bit for bit the rows the one-client generator gives, for any set of ids: the
seed hashing runs once over the ids (:func:`fedray.core.seeding.data_seed_words`), each client
makes only its two draws, and the blob choice and the sums run once over the block.
"""
from __future__ import annotations

import functools

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.core.seeding import BLOB_CENTERS_STREAM, BLOB_ROWS_STREAM, SeedWords, data_rng, data_seed_words

BLOBS_DEFAULTS = {"points_per_client": 200, "n_features": 2, "n_centers": 5, "cluster_std": 1.0,
                  "center_box": (-10.0, 10.0), "weights": None}
#: One-line meaning of each ``blobs`` option (``fedray describe blobs``).
BLOBS_OPTIONS = {
    "points_per_client": "points each client draws",
    "n_features": "dimension d of the points",
    "n_centers": "number of Gaussian blobs (the true K); every client draws from the same centres",
    "cluster_std": "standard deviation of each blob (the same in every direction)",
    "center_box": "(low, high): the blob centres are drawn uniformly in this box, per feature",
    "weights": "relative size of each blob in every client's points (None: equal); with data.partition "
               "dirichlet each client draws its own from Dir(alpha) instead",
}

#: Clients per chunk of :func:`generate_block` (bounds its scratch memory, not its output).
BLOCK_CHUNK = 1 << 14


@functools.lru_cache(maxsize=16)
def _blob_centers(seed: int, k: int, d: int, lo: float, hi: float) -> np.ndarray:
    """The blob centres (k, d), drawn once per process for all of its clients (read-only)."""
    out = data_rng(seed, BLOB_CENTERS_STREAM).uniform(lo, hi, size=(k, d))
    out.flags.writeable = False
    return out


def _source_centers(source: dict) -> np.ndarray:
    lo, hi = source["center_box"]
    return _blob_centers(int(source["seed"]), int(source["n_centers"]), int(source["n_features"]), float(lo),
                         float(hi))


def generate_client_blobs(source: dict, client_id: int) -> tuple[np.ndarray, np.ndarray]:
    """One client's shard: X (n, d) float64 and y (n,) int64 (the reference :func:`generate_block` matches)."""
    centers = _source_centers(source)
    rng = data_rng(source["seed"], BLOB_ROWS_STREAM, client_id)
    k, n = centers.shape[0], int(source["points_per_client"])
    if source.get("alpha"):
        w = rng.dirichlet(np.full(k, source["alpha"]))
    elif source.get("weights") is not None:
        w = np.asarray(source["weights"], dtype=float) / np.sum(source["weights"])
    else:
        w = np.full(k, 1.0 / k)
    y = rng.choice(k, size=n, p=w)
    X = centers[y] + rng.normal(scale=float(source["cluster_std"]), size=(n, centers.shape[1]))
    return X, y.astype(np.int64)


def generate_block(source: dict, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shards of the clients ``ids`` of a ``blobs`` source, in one block.

    Parameters
    ----------
    source : dict
        A ``blobs`` recipe (``ClientSpec.source``: seed, alpha and the ``BLOBS_DEFAULTS`` keys).
    ids : ndarray of int, shape (m,)
        Client ids, in any order, repeats allowed.

    Returns
    -------
    X : ndarray of float64, shape (sum n_i, d), C-contiguous
        The rows of client ``ids[j]`` are ``X[offsets[j]:offsets[j + 1]]``, bit for bit
        ``generate_client_blobs(source, ids[j])[0]``.
    y : ndarray of int64, shape (sum n_i,)
        The blob of each row.
    offsets : ndarray of int64, shape (m + 1,)
    """
    centers = _source_centers(source)
    k, d = centers.shape
    n, scale = int(source["points_per_client"]), float(source["cluster_std"])
    alpha = source.get("alpha")
    keys = np.asarray(ids)
    if keys.ndim != 1:
        raise ConfigError(f"ids: expected a 1-d array of client ids; got shape {keys.shape}")
    m = keys.size
    X = np.empty((m * n, d), dtype=np.float64)
    y = np.empty(m * n, dtype=np.int64)
    cdf = None if alpha else _shared_cdf(source, k)
    dir_alpha = np.full(k, alpha) if alpha else None
    for start in range(0, m, BLOCK_CHUNK):
        stop = min(m, start + BLOCK_CHUNK)
        words = data_seed_words(source["seed"], (BLOB_ROWS_STREAM,), keys[start:stop])
        rows = slice(start * n, stop * n)
        _fill_chunk(words, n, X[rows].reshape(stop - start, n, d), y[rows].reshape(stop - start, n), cdf,
                    dir_alpha)
        Xc = X[rows]
        np.multiply(Xc, scale, out=Xc)
        Xc += 0.0  # normal() is loc + scale * z with loc 0.0: a -0.0 becomes 0.0 there too
        Xc += centers[y[rows]]
    return X, y, np.arange(m + 1, dtype=np.int64) * n


def _fill_chunk(words: np.ndarray, n: int, Z: np.ndarray, y: np.ndarray, cdf: np.ndarray | None,
                dir_alpha: np.ndarray | None) -> None:
    """Each client's draws, in its stream's order: (dirichlet weights,) n uniforms for the blob
    choice, then the standard normals into ``Z`` (c, n, d); ``y`` (c, n) gets the blobs."""
    c = words.shape[0]
    u = np.empty((c, n), dtype=np.float64)
    seed_words = SeedWords(words[0])
    Generator, PCG64 = np.random.Generator, np.random.PCG64
    if dir_alpha is None:
        for row, ui, zi in zip(words, u, Z):
            seed_words.words = row
            rng = Generator(PCG64(seed_words))
            rng.random(out=ui)
            rng.standard_normal(out=zi)
        y[...] = np.searchsorted(cdf, u, side="right")
        return
    w = np.empty((c, dir_alpha.size), dtype=np.float64)
    for row, wi, ui, zi in zip(words, w, u, Z):
        seed_words.words = row
        rng = Generator(PCG64(seed_words))
        wi[...] = rng.dirichlet(dir_alpha)
        rng.random(out=ui)
        rng.standard_normal(out=zi)
    _check_p(w)
    cdfs = np.cumsum(w, axis=1)
    cdfs /= cdfs[:, -1:]
    # searchsorted(cdf_i, u, side="right") is the number of cdf_i entries <= u (cdf_i is sorted)
    y[...] = 0
    for j in range(w.shape[1]):
        y += cdfs[:, j:j + 1] <= u


def _shared_cdf(source: dict, k: int) -> np.ndarray:
    """The blob cdf every client shares (no Dirichlet weights), as ``Generator.choice`` builds it."""
    if source.get("weights") is not None:
        try:
            w = np.asarray(source["weights"], dtype=float) / np.sum(source["weights"])
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"data.options.weights: expected {k} numbers; got {source['weights']!r}") from exc
        if w.shape != (k,):
            raise ConfigError(f"data.options.weights: expected {k} numbers (one per centre); got {source['weights']!r}")
        _check_p(w[None, :])
    else:
        w = np.full(k, 1.0 / k)
    cdf = w.cumsum()
    cdf /= cdf[-1]
    return cdf


def _check_p(w: np.ndarray) -> None:
    """Generator.choice's checks of p, for every row of ``w`` (c, k)."""
    atol = max(1e-8, np.sqrt(np.finfo(np.float64).eps))
    if np.isnan(w).any() or (w < 0).any() or (np.abs(w.sum(axis=1) - 1.0) > atol).any():
        raise DataError("blobs: the blob weights of a client are not probabilities (NaN, negative, or a sum "
                        "other than 1); check data.options.weights or the Dirichlet alpha")
