"""Statistics of many clients in transit: sums over parts, narrowed columns, one task per cohort."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fedray.core.stats as stats_mod
from fedray.core.contract import CohortTasks, Task, one_task
from fedray.core.stats import Stats, StatsBlock, fold_rows, total
from fedray.runtime.clients import PackedOutcomes


def _reference(parts):
    return np.add.reduce(np.concatenate(parts).astype(np.float64), axis=0)


def _split(a: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    return np.split(a, cuts)


@pytest.mark.parametrize("trail", [(), (1,), (8,), (3, 5)])
@pytest.mark.parametrize("fold_rows_setting", [1 << 14, 7])
def test_fold_rows_equals_reduce_of_concatenation_bit_for_bit(trail, fold_rows_setting, monkeypatch):
    """fold_rows(parts) has the bits of np.add.reduce(np.concatenate(parts), axis=0): uneven parts,
    empty parts, many parts, narrowed (uint8) parts mixed with float64 ones, FOLD_ROWS small."""
    monkeypatch.setattr(stats_mod, "FOLD_ROWS", fold_rows_setting)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((300, *trail)) * 10 ** rng.uniform(-8, 8, (300, *trail))
    cases = [[a], _split(a, [0, 5, 5, 100, 299]), _split(a, list(range(3, 300, 3))), [a[:0], a, a[:0]]]
    for parts in cases:
        assert fold_rows(parts).tobytes() == _reference(parts).tobytes(), [len(p) for p in parts]
    counts = rng.integers(0, 200, (300, *trail)).astype(np.uint8)
    mixed = [
        counts[:40],
        counts[40:41].astype(np.float64),
        counts[41:41],
        counts[41:250],
        counts[250:].astype(np.float64),
    ]
    got = fold_rows(mixed)
    assert got.dtype == np.float64
    assert got.tobytes() == _reference(mixed).tobytes()
    big = rng.standard_normal((100, *trail))
    with_narrow = [big[:30], counts[:70], big[30:]]
    assert fold_rows(with_narrow).tobytes() == _reference(with_narrow).tobytes()


def _block(n: int = 2000, top: int = 200) -> StatsBlock:
    rng = np.random.default_rng(2)
    return StatsBlock(counts=rng.integers(0, top, (n, 4)).astype(float), sums=rng.standard_normal((n, 4, 3)),
                      sse=rng.random(n))


@pytest.mark.parametrize("top, dtype", [(200, np.uint8), (60_000, np.uint16), (5_000_000, np.uint32)])
def test_narrowed_counts_become_small_integers_and_read_back_the_same(top, dtype):
    """Integer-valued arrays become the smallest unsigned type that holds them; every read (rows,
    column, total) gives the same float64 values; nbytes_each does not change."""
    b = _block(top=top)
    b.arrays["counts"][0, 0] = top - 1  # the largest value is there
    n = b.narrowed()
    assert n.arrays["counts"].dtype == dtype and "counts" in n.narrow
    assert n.arrays["sums"].dtype == np.float64 and n.arrays["sse"].dtype == np.float64
    assert n.nbytes_each() == b.nbytes_each()
    assert n.column("counts").dtype == np.float64
    assert n.column("counts").tobytes() == b.column("counts").tobytes()
    for i in (0, 1, 1999):
        assert n.row(i)["counts"].dtype == np.float64
        assert {k: v.tobytes() for k, v in n.row(i).items()} == {k: v.tobytes() for k, v in b.row(i).items()}
    assert {k: v.tobytes() for k, v in total(n.rows()).items()} == {k: v.tobytes() for k, v in total(b.rows()).items()}


@pytest.mark.parametrize("spoil", ["fraction", "negative", "nan", "negzero", "small", "late_fraction"])
def test_arrays_that_are_not_small_counts_stay_float64(spoil):
    """Fractions (anywhere, not only in the first values), negatives, NaN, -0.0 and arrays of fewer
    than 1024 values are kept as float64."""
    b = _block(n=30 if spoil == "small" else 2000)
    c = b.arrays["counts"]
    if spoil == "fraction":
        c[0, 0] = 0.5
    elif spoil == "late_fraction":
        c[-1, -1] = 2.5
    elif spoil == "negative":
        c[-1, 0] = -1.0
    elif spoil == "nan":
        c[-1, 1] = np.nan
    elif spoil == "negzero":
        c[-1, 2] = -0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from casting NaN either
        n = b.narrowed()
    assert n.arrays["counts"].dtype == np.float64 and not n.narrow
    assert n.column("counts").tobytes() == c.tobytes()


def test_total_of_narrowed_multi_part_replies_equals_total_of_per_client_stats():
    """total() of replies sent as several narrowed parts equals, bit for bit, the total of the plain
    list of per-client Stats in client order."""
    from fedray.core.replies import Replies

    b = _block(n=3000)
    cuts = [0, 1100, 1100, 2500, 3000]
    parts = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        idx = np.arange(lo, hi)
        parts.append(PackedOutcomes(idx, np.zeros(len(idx)), np.full(len(idx), 8), b.take(idx).arrays, []).narrowed())
    assert any(p.narrow for p in parts)
    reference = total([Stats(**{k: v for k, v in b.row(i).items()}) for i in range(3000)])
    replies = Replies()
    for p in parts:
        replies.add_columns(p.client_ids, p.block(), p.seconds, p.nbytes)
    assert replies.column_parts() is not None, "the replies were not kept column-wise"
    got = total(replies)
    assert {k: v.tobytes() for k, v in got.items()} == {k: v.tobytes() for k, v in reference.items()}


# --- CohortTasks --------------------------------------------------------------
def _fn(payload, shared, client):
    return None


def test_cohort_tasks_is_a_mapping_of_sorted_unique_ids():
    """CohortTasks: getitem, contains, sorted iteration, len, KeyError; unsorted and repeated ids are
    made unique and sorted."""
    t = Task(_fn, 1)
    ct = CohortTasks([5, 1, 3, 3, 9, 1], t)
    assert list(ct) == [1, 3, 5, 9] and len(ct) == 4
    assert ct[3] is t and ct[np.int64(9)] is t
    assert 3 in ct and 4 not in ct and 0 not in ct and 10 not in ct and "x" not in ct
    for bad in (0, 4, 10, -1):
        with pytest.raises(KeyError):
            ct[bad]
    assert dict(ct) == {1: t, 3: t, 5: t, 9: t}
    assert list(ct.items()) == [(1, t), (3, t), (5, t), (9, t)]
    assert list(CohortTasks(range(4), t)) == [0, 1, 2, 3]
    assert len(CohortTasks([], t)) == 0 and list(CohortTasks([], t)) == []


def test_one_task():
    """one_task: the task of a cohort; of a dict whose values are one shared object; None for mixed
    tasks, for equal but distinct tasks, and for an empty cohort."""
    t, u = Task(_fn, 1), Task(_fn, 2)
    assert one_task(CohortTasks([2, 1], t)) is t
    assert one_task(CohortTasks([], t)) is None
    assert one_task({0: t, 1: t, 7: t}) is t
    assert one_task({0: t, 1: u}) is None
    assert one_task({0: Task(_fn, 1), 1: Task(_fn, 1)}) is None  # equal, not the same object
    assert one_task({}) is None
