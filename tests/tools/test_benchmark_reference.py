"""The host reference of ``benchmarks/round_overhead.py``: the columns that let figures from
machines of different speed be compared are computed from the measured round, not made up."""
from __future__ import annotations

import math


def test_reference_columns_scale_with_the_rows_of_the_configuration(bench):
    ref = {"read": 0.004, "kmeans": 0.050}
    row = {"algorithm": "kmeans", "n_clients": 1000, "points": 1000, "round_s": 0.075}  # 10^6 rows
    bench.against_reference(row, ref)
    assert math.isclose(row["pass_s"], 0.050)
    assert math.isclose(row["x_pass"], 1.5)
    assert math.isclose(row["read_frac"], 0.004 / 0.075)
    small = {"algorithm": "kmeans", "n_clients": 100, "points": 100, "round_s": 0.075}  # 10^4 rows
    bench.against_reference(small, ref)
    assert math.isclose(small["pass_s"], 0.0005)
    assert math.isclose(small["x_pass"], 150.0)


def test_a_failed_or_unreferenced_configuration_gets_no_reference_columns(bench):
    ref = {"read": 0.004, "kmeans": 0.050}
    failed = {"algorithm": "kmeans", "n_clients": 10, "points": 10, "round_s": float("nan"), "error": "timeout"}
    other = {"algorithm": "federated-fcm", "n_clients": 10, "points": 10, "round_s": 0.01}
    for row in (failed, other):
        bench.against_reference(row, ref)
        assert "x_pass" not in row and "pass_s" not in row


def test_host_reference_times_a_read_and_each_named_kernel(bench, monkeypatch):
    monkeypatch.setattr(bench, "REF_ROWS", 20_000)
    ref = bench.host_reference(["kmeans", "federated-fcm", "not-a-kernel"], repeat=2)
    assert set(ref) == {"read", "kmeans", "federated-fcm"}
    assert all(0 < v < 10 for v in ref.values())
