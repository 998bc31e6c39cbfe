"""The steps after the rounds stay within a small multiple of the data (fedray.api.scale).

* The central baseline runs on at most evaluation.central_max_rows rows: above, on a seeded uniform
  sample of that many rows, and the summary and the log say so.
* Sums over every client outside the rounds (the plots' histograms) are taken in parts of clients,
  with the same bits as one sum, and the histograms are numpy's.
"""
from __future__ import annotations

import logging

import numpy as np

import fedray
from fedray.api.plotdata import _histogram2d
from fedray.api.scale import central_rows, total_in_parts
from fedray.core.contract import Reply, Task
from fedray.core.stats import RunningTotal, Stats, StatsBlock, total

RUN = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}}, "runtime": {"backend": "local", "progress": False},
       "data": {"dataset": "blobs", "options": {"points_per_client": 50}}, "federation": {"n_clients": 12}}


def test_central_baseline_subsamples_above_its_row_limit_and_says_so(caplog):
    full = fedray.run(**RUN, central_baseline=True, output=False)
    assert full.final["central_baseline_rows"] == {"rows": 600, "of_rows": 600, "subsampled": False}
    with caplog.at_level(logging.WARNING, logger="fedray"):
        part = fedray.run(**RUN, central_baseline=True, output=False, **{"evaluation.central_max_rows": 150})
    assert part.final["central_baseline_rows"] == {"rows": 150, "of_rows": 600, "subsampled": True}
    assert any("central baseline: on a uniform sample of 150 of the union's 600 rows" in r.getMessage()
               for r in caplog.records)
    assert "central_ari" in part.final and part.model["central_centers"].shape == (3, 2)
    assert "a uniform sample of 150 of 600 rows" in part.table() and "uniform sample" not in full.table()
    again = fedray.run(**RUN, central_baseline=True, output=False, **{"evaluation.central_max_rows": 150})
    np.testing.assert_array_equal(again.model["central_centers"], part.model["central_centers"])  # from the seed


def test_central_rows_are_a_uniform_sample_without_replacement():
    n = np.array([5, 0, 300, 1, 94])
    assert central_rows(n, 400, 0) is None
    rows = central_rows(n, 100, 3)
    assert sum(len(v) for v in rows.values()) == 100
    for c, pos in rows.items():
        assert n[c] > 0 and np.all(np.diff(pos) > 0) and pos.min() >= 0 and pos.max() < n[c]
    share = np.mean([len(central_rows(n, 100, s).get(2, ())) for s in range(200)])
    assert abs(share - 75.0) < 3.0  # client 2 holds 3/4 of the rows


def _replies(rng: np.random.Generator, lo: int, hi: int, block: bool) -> list[Reply] | object:
    ids = np.arange(lo, hi)
    a, s = rng.normal(size=(len(ids), 4, 3)), rng.normal(size=len(ids))
    if not block:
        return [Reply(int(c), Stats(a=a[i], s=s[i]), 0.0, 104) for i, c in enumerate(ids)]
    from fedray.core.replies import Replies

    out = Replies()
    out.add_columns(ids, StatsBlock(a=a, s=s), np.zeros(len(ids)), np.full(len(ids), 104))
    return out


def test_a_sum_taken_in_parts_has_the_bits_of_one_sum():
    for block in (False, True):
        rng = np.random.default_rng(1)
        parts = [_replies(rng, lo, hi, block) for lo, hi in ((0, 7), (7, 300), (300, 1000))]
        whole = total([r for p in parts for r in (list(p) if block else p)])
        acc = RunningTotal()
        for p in parts:
            acc.add(p)
        got = acc.result()
        for k in ("a", "s"):
            assert got[k].tobytes() == whole[k].tobytes()

    tasks = dict.fromkeys(range(5000), Task(print, None, None))
    asked = []

    def run(part):
        asked.append(len(part))
        ids = sorted(part)
        return [Reply(c, Stats(h=np.full((30, 30), float(c % 7)), n=np.array(1.0)), 0.0, 7208) for c in ids]

    got = total_in_parts(run, tasks, part_bytes=4 << 20)
    assert asked[0] == 256 and max(asked) == (4 << 20) // 7208 and sum(asked) == 5000  # <= 4 MB of replies at once
    assert float(got["n"]) == 5000 and got["h"][0, 0] == sum(c % 7 for c in range(5000))


def test_batched_histograms_are_numpys():
    class _Batch:
        def __init__(self, X, offsets):
            self.X, self.offsets = X, offsets

    rng = np.random.default_rng(2)
    X = rng.normal(size=(500, 3))
    X[::9, 0] = 2.0  # on the last edge
    offsets = np.array([0, 0, 120, 121, 500])
    edges = (np.linspace(-2, 2, 26), np.linspace(-3, 1, 11))
    mean, axes = np.zeros(3), np.eye(3)[:, :2]
    many = _histogram2d.__fedray_batched__([None] * 4, (edges, mean, axes), _Batch(X, offsets))
    for i in range(4):
        P = X[offsets[i]:offsets[i + 1]]
        want = np.histogram2d(P[:, 0], P[:, 1], bins=edges)[0]
        np.testing.assert_array_equal(many.arrays["h"][i], want)
