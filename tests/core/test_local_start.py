"""The k-FED local start for many clients at once gives every client the bits of the per-client form.

* ``client_rng_many`` gives each client the generator ``client_rng`` gives it, draw for draw.
* ``local_centers``' batched form (stacked k-means++ and Lloyd) returns, for every client of a batch,
  exactly the centres and counts the plain function returns for that client alone with its own stream:
  over shard sizes, dimensions and numbers of centres, clients of equal and of different sizes, and the
  clients it hands to the plain function (empty shards, repeated rows, fewer rows than centres, values
  that are not finite, rows so close that every distance underflows to zero).
* A run's k-FED start is the same with batched forms on and off.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import fedray
from fedray.core.contract import batched_form
from fedray.core.local_start import gathered, local_centers, n_distinct
from fedray.core.seeding import client_rng, client_rng_many
from fedray.core.stats import StatsBlock
from fedray.runtime.clients import ClientBatch

SEED, ROUND = 11, 0


@pytest.mark.parametrize("round_", [0, 3, -2])
def test_client_rng_many_is_client_rng_draw_for_draw(round_):
    ids = np.array([0, 1, 7, 2**31 + 5, 2**33 + 1, 12345678901])
    for cid, g in zip(ids.tolist(), client_rng_many(SEED, ids, round_), strict=True):
        ref = client_rng(SEED, cid, round_)
        assert g.random() == ref.random() and g.integers(1000) == ref.integers(1000)
        np.testing.assert_array_equal(g.normal(size=5), ref.normal(size=5))


def _batch(shards: list[np.ndarray], ids: list[int] | None = None) -> ClientBatch:
    ids_arr = np.arange(len(shards)) if ids is None else np.asarray(ids)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in shards])]).astype(np.int64)
    d = shards[0].shape[1]
    X = np.concatenate(shards) if sum(len(s) for s in shards) else np.zeros((0, d))
    return ClientBatch(ids_arr, lambda: [], np.ascontiguousarray(X, dtype=np.float64), offsets, None, SEED, ROUND)


def _one(X: np.ndarray, cid: int, k: int) -> dict[str, np.ndarray]:
    """The per-client form for client ``cid`` alone, with its own stream."""
    client = SimpleNamespace(data=SimpleNamespace(X=X), rng=client_rng(SEED, cid, ROUND))
    return local_centers({"k": k}, None, client)


def _assert_same(batch: ClientBatch, shards: list[np.ndarray], k: int) -> object:
    errors = set()
    for cid, X in zip(batch.ids.tolist(), shards):
        try:
            _one(X, cid, k)
        except ValueError as exc:  # numpy's choice refuses NaN probabilities (a value that is not finite)
            errors.add(str(exc))
    if errors:
        with pytest.raises(ValueError) as err:
            batched_form(local_centers)([{"k": k}] * len(shards), None, batch)
        assert str(err.value) in errors
        return None
    got = batched_form(local_centers)([{"k": k}] * len(shards), None, batch)
    rows = got.rows() if isinstance(got, StatsBlock) else got
    assert len(rows) == len(shards)
    for cid, X, row in zip(batch.ids.tolist(), shards, rows):
        ref = _one(X, cid, k)
        for name in ("centers", "counts"):
            a, b = np.asarray(row[name]), ref[name]
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"client {cid}: {name} differ"
    return got


@pytest.mark.parametrize("d", [1, 2, 3, 8, 13])
@pytest.mark.parametrize("k", [1, 3, 7])
def test_batched_local_start_is_the_per_client_one(d, k):
    rng = np.random.default_rng(d * 100 + k)
    sizes = [200] * 6 + [k, 9 + k, 50, 50, 1000]
    shards = []
    for i, n in enumerate(sizes):
        centres = rng.normal(scale=4.0, size=(4, d))
        shards.append(centres[rng.integers(4, size=n)] + rng.normal(size=(n, d)) * (0.2 + 0.1 * i))
    got = _assert_same(_batch(shards), shards, k)
    # the replies one client alone sends: local centres are each client's own, never statistics to sum or mask
    assert all(type(r) is dict for r in got)


def test_many_centres_and_long_shards():
    rng = np.random.default_rng(5)
    shards = [rng.normal(size=(n, 2)) for n in (100, 100, 4200)]
    _assert_same(_batch(shards), shards, 40)  # k above the pairwise check of the first rows
    _assert_same(_batch(shards[2:]), shards[2:], 3)  # rows past the numpy kernels' short path
    wide = [rng.normal(size=(n, 5)) for n in (300, 300, 3000)]  # k x d past a pairwise sum's first block
    _assert_same(_batch(wide), wide, 40)


def test_clients_the_stack_leaves_to_the_plain_function():
    rng = np.random.default_rng(1)
    good = rng.normal(size=(30, 2))
    repeated = np.repeat(rng.normal(size=(2, 2)), 10, axis=0)  # 2 distinct rows: k is cut to 2
    dup_head = np.vstack([good[:1], good[:1], good[1:20]])  # the first rows repeat, 20 distinct rows
    tiny = np.array([[0.0, 0.0], [1e-170, 0.0], [2e-170, 0.0], [3e-170, 0.0]])  # every distance underflows to 0
    shards = [good, repeated, dup_head, np.zeros((0, 2)), good[:2], tiny, good + 1.0]
    ids = [3, 4, 8, 9, 20, 21, 2**33]
    got = _assert_same(_batch(shards, ids), shards, 3)
    assert isinstance(got, list)
    for cid in range(6):  # a value that is not finite: the plain function's result, or its error
        not_finite = good.copy()
        not_finite[3 + cid, 1] = np.inf if cid % 2 else np.nan
        _assert_same(_batch([good, not_finite], [100, cid]), [good, not_finite], 3)


def test_payloads_that_differ_are_refused_so_the_host_runs_clients_one_by_one():
    shards = [np.random.default_rng(0).normal(size=(20, 2))] * 2
    with pytest.raises(ValueError):
        batched_form(local_centers)([{"k": 2}, {"k": 3}], None, _batch(shards))


def test_gathered_reads_columns_as_the_replies_list():
    from fedray.core.contract import Reply
    from fedray.core.replies import Replies

    rng = np.random.default_rng(2)
    C, w = rng.normal(size=(5, 3, 2)), rng.integers(1, 9, size=(5, 3)).astype(float)
    cols = Replies()
    cols.add_columns(np.arange(5), StatsBlock(centers=C, counts=w), np.zeros(5), np.zeros(5, dtype=np.int64))
    listed = [Reply(i, {"centers": C[i], "counts": w[i]}) for i in range(5)]
    listed.insert(2, Reply(9, {"centers": np.zeros((0, 2)), "counts": np.zeros(0)}))  # sent none: left out
    for replies in (cols, listed):
        got_C, got_w = gathered(replies)
        np.testing.assert_array_equal(got_C, C.reshape(-1, 2))
        np.testing.assert_array_equal(got_w, w.ravel())
    X = np.repeat(np.arange(3.0)[:, None], 5000, axis=0)  # three distinct rows, far past the prefix checked
    assert n_distinct(X, 3) >= 3 and n_distinct(X[:4000], 3) == 1 and n_distinct(X, 4) == 3


@pytest.mark.parametrize("alg", [{"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": 2}},
                                 {"name": "kfed", "params": {"n_clusters": 3, "local_clusters": 4}}])
def test_a_runs_kfed_start_is_the_same_batched_or_not(alg):
    kw = dict(algorithm=alg, data={"dataset": "blobs", "options": {"points_per_client": 40, "n_features": 3}},
              federation={"n_clients": 30}, seed=4, output=False)
    on = fedray.run(runtime={"backend": "local", "progress": False}, **kw)
    off = fedray.run(runtime={"backend": "local", "batched": False, "progress": False}, **kw)
    for name in on.model:
        np.testing.assert_array_equal(np.asarray(on.model[name]), np.asarray(off.model[name]), err_msg=name)
