"""Bulk generation of ``blobs`` shards: the block generator and the vectorised seed hashing give,
bit for bit, what the one-client generator (``generate_client_blobs``) and ``data_rng`` give."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fedray.core.errors import ConfigError, DataError
from fedray.core.seeding import BLOB_ROWS_STREAM, data_rng, data_rng_many, data_seed_words
from fedray.data import blobs
from fedray.data.blobs import BLOBS_DEFAULTS, generate_block, generate_client_blobs

SEEDS = [0, 1, 2**32 - 1, 2**32, 2**40 + 7, 2**62 + 3, -5]
MIXED_IDS = np.array([0, 1, 2**32 - 1, 2**32, 2**33 + 5, 17, 2**32 + 1, 3], dtype=np.int64)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("prefix", [(BLOB_ROWS_STREAM,), (41, 2**35 + 9)])
def test_data_rng_many_is_data_rng_draw_for_draw(seed, prefix):
    """For every id (one- and two-word ids mixed), the generator has data_rng's state and draws."""
    for cid, rng in zip(MIXED_IDS, data_rng_many(seed, prefix, MIXED_IDS), strict=True):
        ref = data_rng(seed, *prefix, int(cid))
        assert rng.bit_generator.state == ref.bit_generator.state, (seed, prefix, int(cid))
        np.testing.assert_array_equal(rng.random(5), ref.random(5))
        np.testing.assert_array_equal(rng.standard_normal(3), ref.standard_normal(3))


def test_seed_words_map_negative_and_unsigned_ids_as_data_rng_does():
    """Negative ids become 2**62 - x (as data_rng's keys); uint64 ids above 2**63 are taken as they are."""
    neg = np.array([-1, -7, -(2**40)], dtype=np.int64)
    big = np.array([2**63 + 11, 2**64 - 1, 0], dtype=np.uint64)
    for ids in (neg, big):
        words = data_seed_words(9, (BLOB_ROWS_STREAM,), ids)
        for cid, row in zip(ids, words, strict=True):
            want = np.random.SeedSequence([9, 2, BLOB_ROWS_STREAM, int(cid) if cid >= 0 else 2**62 - int(cid)])
            np.testing.assert_array_equal(row, want.generate_state(4, np.uint64))


def test_seed_words_of_no_ids_and_bad_ids():
    """No ids give an empty (0, 4) table; a 2-d or float array of ids is refused in one line."""
    assert data_seed_words(0, (1,), np.array([], dtype=np.int64)).shape == (0, 4)
    with pytest.raises(ConfigError, match="ids"):
        data_seed_words(0, (1,), np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ConfigError, match="ids"):
        data_seed_words(0, (1,), np.array([1.0, 2.0]))
    with pytest.raises(ConfigError, match="ids"):
        data_rng_many(0, (1,), np.array([1.0, 2.0]))  # checked when called, not when first drawn from


def _source(**options):
    return {"kind": "blobs", "seed": options.pop("seed", 7), "alpha": options.pop("alpha", None),
            **{**BLOBS_DEFAULTS, **options}}


def _reference(source, ids):
    shards = [generate_client_blobs(source, int(c)) for c in ids]
    return np.concatenate([s[0] for s in shards]), np.concatenate([s[1] for s in shards])


CASES = {
    "default": dict(points_per_client=7, n_features=8),
    "one-point-one-feature": dict(points_per_client=1, n_features=1),
    "weights": dict(points_per_client=7, n_features=1, weights=[1.0, 3.0, 0.0, 2.0, 0.5]),
    "alpha": dict(points_per_client=7, n_features=8, alpha=0.3, seed=2**40 + 7),
    "small-alpha-many-centres": dict(points_per_client=1, n_features=8, alpha=0.05, n_centers=12),
    "one-centre": dict(points_per_client=7, n_features=3, n_centers=1, cluster_std=0.25, center_box=(2.0, 3.0)),
}
IDS = {
    "from-1000": np.arange(1000, 1040),
    "scattered": np.array([2**33 + 5, 3, 2**32 - 1, 99, 3, 2**32, 12345, 0, 1]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("ids_name", sorted(IDS))
def test_generate_block_is_the_per_client_shards_concatenated(case, ids_name):
    """Same bits as generate_client_blobs client by client, in the order of ids, with the right offsets."""
    source, ids = _source(**CASES[case]), IDS[ids_name]
    X, y, offsets = generate_block(source, ids)
    X_ref, y_ref = _reference(source, ids)
    assert X.dtype == np.float64 and X.flags.c_contiguous and y.dtype == np.int64 and offsets.dtype == np.int64
    np.testing.assert_array_equal(X.view(np.uint64), X_ref.view(np.uint64))
    np.testing.assert_array_equal(y, y_ref)
    n = int(source["points_per_client"])
    np.testing.assert_array_equal(offsets, np.arange(len(ids) + 1) * n)
    for j in (0, len(ids) - 1):
        np.testing.assert_array_equal(X[offsets[j]:offsets[j + 1]], generate_client_blobs(source, int(ids[j]))[0])


@pytest.mark.parametrize("case", ["default", "alpha"])
def test_generate_block_across_chunks(monkeypatch, case):
    """Ids spread over several chunks (a chunk of 3 clients) give the same block."""
    monkeypatch.setattr(blobs, "BLOCK_CHUNK", 3)
    source, ids = _source(**CASES[case]), np.arange(5, 16)
    X, y, _ = generate_block(source, ids)
    X_ref, y_ref = _reference(source, ids)
    np.testing.assert_array_equal(X.view(np.uint64), X_ref.view(np.uint64))
    np.testing.assert_array_equal(y, y_ref)


def test_generate_block_of_no_ids():
    """No ids give an empty block of the right width and one offset."""
    X, y, offsets = generate_block(_source(n_features=4), np.array([], dtype=np.int64))
    assert X.shape == (0, 4) and y.shape == (0,) and offsets.tolist() == [0]


def test_generate_block_refuses_bad_weights():
    """Weights that are not probabilities (a negative one, a wrong count) fail in one line, as choice() does."""
    with pytest.raises(DataError, match="weights"):
        generate_block(_source(weights=[1.0, -1.0, 1.0, 1.0, 1.0]), np.arange(3))
    with pytest.raises(ConfigError, match="weights"):
        generate_block(_source(weights=[1.0, 2.0]), np.arange(3))


def test_generate_block_memory_is_the_block_plus_one_chunk():
    """Nothing per client outlives the loop: the peak is the output plus one chunk's scratch,
    far below what a Generator kept per client would take (~1 kB each)."""
    source, m = _source(points_per_client=1, n_features=1), 60_000
    tracemalloc.start()
    try:
        X, y, offsets = generate_block(source, np.arange(m))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    output = X.nbytes + y.nbytes + offsets.nbytes
    assert peak < output + 6 * 2**20, (peak, output)
