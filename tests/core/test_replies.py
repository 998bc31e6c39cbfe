"""A round's replies kept column-wise (fedray.core.contract.Replies): a list of Reply to every
reader, the same sums as the Reply objects give, and no per-client object unless read."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import fedray
from fedray.core.contract import Reply
from fedray.core.errors import FedrayError
from fedray.core.replies import Replies, reply_columns
from fedray.core.stats import StatsBlock


def _host(ids: list[int], seed: int) -> tuple[np.ndarray, StatsBlock, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = len(ids)
    block = StatsBlock(sums=rng.normal(size=(n, 3, 2)) * 1e3, counts=rng.integers(0, 9, size=(n, 3)),
                       sse=rng.random(n))
    return np.array(ids), block, rng.random(n), rng.integers(100, 200, size=n)


def _two_hosts_out_of_order() -> Replies:
    r = Replies()
    r.add_columns(*_host([5, 6, 7, 8], 1))  # the second host answered first
    r.add_columns(*_host([0, 1, 2, 3, 4], 0))
    r.sort_by_client()
    return r


def test_total_of_columns_equals_total_of_the_reply_objects_bit_for_bit():
    cols = _two_hosts_out_of_order()
    objs = list(_two_hosts_out_of_order())  # materialised: Reply objects in client-id order
    assert [r.client_id for r in objs] == list(range(9))
    a, b = fedray.total(cols), fedray.total(r.update for r in objs)
    c = fedray.total(objs)  # a list of Reply sums their updates too
    for k in ("sums", "counts", "sse"):
        assert np.array_equal(a[k], b[k]) and np.array_equal(a[k], c[k])
    np.testing.assert_allclose(a["sse"], sum(float(r.update["sse"]) for r in objs), rtol=1e-12)


def test_columns_need_no_reply_objects_and_reading_builds_them():
    r = _two_hosts_out_of_order()
    ids, seconds, nbytes = reply_columns(r)
    assert ids.tolist() == list(range(9)) and len(r) == 9
    assert r._list is None  # nothing was built for the columns, the length or the sort
    first = r[0]
    assert isinstance(first, Reply) and first.client_id == 0 and first.seconds == seconds[0]
    assert r._list is not None
    assert reply_columns(r)[0].tolist() == ids.tolist()  # the same columns from the objects


def test_overlapping_hosts_are_merged_in_client_order():
    r = Replies()
    r.add_columns(*_host([0, 4, 8], 0))
    r.add_columns(*_host([1, 2, 9], 1))
    r.sort_by_client()
    assert [x.client_id for x in r] == [0, 1, 2, 4, 8, 9]


def test_list_operations_work_as_on_a_list():
    r = _two_hosts_out_of_order()
    extra = Reply(99, fedray.Stats(sums=np.zeros((3, 2)), counts=np.zeros(3), sse=np.array(0.0)))
    r.append(extra)
    assert len(r) == 10 and r[-1] is extra
    r[0] = extra
    assert r[0] is extra
    kept = [x for x in r if x.client_id != 99]
    assert len(kept) == 8
    both = r + [extra]
    assert isinstance(both, list) and len(both) == 11
    back = pickle.loads(pickle.dumps(r))
    assert [x.client_id for x in back] == [x.client_id for x in r]


def test_an_empty_round_sums_to_an_error():
    with pytest.raises(ValueError, match="empty"):
        fedray.total(Replies())


def test_dropping_replies_by_flags_keeps_the_rest_and_their_sum_bit_for_bit():
    """Replies.where (a deadline's late clients leave the round) keeps exactly the unflagged replies;
    their sum, read straight from the source blocks, equals the sum of the kept Reply objects."""
    cols = _two_hosts_out_of_order()
    keep = np.array([True, False, True, True, False, True, True, True, False])
    kept = cols.where(keep)
    assert reply_columns(kept)[0].tolist() == [0, 2, 3, 5, 6, 7]
    assert kept.where(np.array([True, True, False, True, True, True])).columns()[0].tolist() == [0, 2, 5, 6, 7]
    objs = [r for r, k in zip(_two_hosts_out_of_order(), keep) if k]
    a, b = fedray.total(kept), fedray.total(r.update for r in objs)
    for k in ("sums", "counts", "sse"):
        assert np.array_equal(a[k], b[k])
    assert [r.client_id for r in kept] == [0, 2, 3, 5, 6, 7]  # read as a list: the same replies
    with pytest.raises(ValueError, match="flags for 9 replies"):
        cols.where(np.ones(4, dtype=bool))
    as_list = Replies(list(_two_hosts_out_of_order())).where(keep)
    assert [r.client_id for r in as_list] == [0, 2, 3, 5, 6, 7]
    summed = Replies.summed(np.arange(3), np.zeros(3), np.ones(3, dtype=np.int64), fedray.total(objs))
    with pytest.raises(FedrayError, match="hold only their sum"):  # a sum gives no client's reply back
        summed.where(np.array([True, False, True]))


def test_replies_less_the_late_ones_pickle_as_their_rows():
    """Replies kept by flags travel (a checkpoint, a Ray actor) as the plain rows they keep."""
    import pickle

    keep = np.array([False, True, True, False, True, True, True, True, True])
    kept = _two_hosts_out_of_order().where(keep)
    back = pickle.loads(pickle.dumps(kept))
    assert [r.client_id for r in back] == [1, 2, 4, 5, 6, 7, 8]
    a, b = fedray.total(kept), fedray.total(r.update for r in back)
    for k in ("sums", "counts", "sse"):
        assert np.array_equal(a[k], b[k])
