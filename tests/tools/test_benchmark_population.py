"""``benchmarks/round_overhead.py --population``: the cross-device table (large populations, a small
cohort a round) has its columns and one row per configuration, a configuration that would not fit in
memory is skipped with a one-line reason before any process starts, and a failing child reports one line."""
from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
from types import SimpleNamespace

import psutil
import pytest


def _md_table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    return head, rows


@pytest.mark.slow  # the population benchmark end to end in a process of its own
def test_population_mode_writes_a_row_per_configuration_with_finite_timings(bench, tmp_path):
    """End to end in a fresh process: the table (markdown and CSV) has every column of the mode, in
    order, one row for the one configuration, its cohort from the fraction, and finite seconds."""
    out = tmp_path / "pop"
    cmd = [sys.executable, bench.__file__, "--population", "--populations", "200", "--fractions", "0.5",
           "--backends", "local", "--rounds", "2", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (out / "round_overhead_population.md").read_text()
    head, rows = _md_table(md)
    assert head == bench.POP_COLUMNS
    assert len(rows) == 1
    assert "Load before:" in md and "Load after:" in md and "host reference" in md
    assert md.index("host reference") < md.index("| population")  # the reference above the table
    with open(out / "round_overhead_population.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 1
    row = table[0]
    assert set(bench.POP_COLUMNS) <= set(row)
    assert (row["population"], row["fraction"], row["cohort"], row["backend"]) == ("200", "0.5", "100", "local")
    assert row["error"] == ""
    for col in ("startup_s", "round_s", "first_round_s", "eval_s", "peak_mem_mb", "bytes_per_client"):
        assert math.isfinite(float(row[col])), col
    assert float(row["peak_mem_mb"]) > 0 and float(row["eval_s"]) >= 0


@pytest.mark.parametrize("population,min_free,why", [
    (1_000_000, "0", "federation.n_clients"),   # refused by fedray.data.federation.check_memory
    (1_000, "2000", "estimate"),                 # fits check_memory, not the benchmark's margin
])
def test_a_configuration_that_does_not_fit_is_skipped_without_starting_it(bench, monkeypatch, capsys,
                                                                          population, min_free, why):
    """With 1.5 GiB available, neither 10^6 clients nor a margin of 2000 MiB fit: the row says why in
    one line, and no child process is started (so nothing can push the machine into swap)."""
    monkeypatch.setattr(bench, "REF_ROWS", 20_000)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=1.5 * 2**30, total=2 * 2**30))

    def no_child(*a, **k):
        raise AssertionError("a configuration that does not fit was started")

    monkeypatch.setattr(bench, "_child", no_child)
    rc = bench.main(["--population", "--populations", str(population), "--fractions", "0.01",
                     "--backends", "local", "--min-free-mb", min_free])
    assert rc == 1
    _, rows = _md_table(capsys.readouterr().out.split("host reference, one process", 2)[-1])
    assert len(rows) == 1
    error = rows[0][-1]
    assert error.startswith("skipped:") and why in error and "\n" not in error
    assert rows[0][:4] == ["kmeans", f"{population:,}", "0.01", f"{max(1, population // 100):,}"]


def test_a_failing_child_reports_one_line(bench):
    """A configuration that fails in the child gives its error as one line in the row, not a traceback."""
    spec = dict(algorithm="kmeans", backend="local", n_clients=50, clients_per_actor="auto", rounds=2,
                num_cpus=1, init="no-such-init", points=10, fraction=0.1)
    row = bench._one(spec)
    assert row["error"].startswith("ConfigError:") and "init" in row["error"]
    assert "\n" not in row["error"]
    assert (row["population"], row["cohort"]) == (50, 5)


def test_a_child_past_its_timeout_is_stopped_with_its_process_group(bench):
    """The per-configuration limit: a child still running at the limit is killed (with what it started)
    and its row says so."""
    spec = dict(algorithm="kmeans", backend="local", n_clients=50, clients_per_actor="auto", rounds=2,
                num_cpus=1, init="random-box", points=10, fraction=0.1)
    row = bench._child(spec, timeout=0.0)
    assert row["error"] == "timed out after 0 s"
    assert (row["population"], row["fraction"], row["cohort"]) == (50, 0.1, 5)


def test_bytes_per_client_is_peak_memory_less_the_rows_over_the_population(bench):
    cols = bench.population_columns({"n_clients": 1000, "points": 10, "fraction": 0.01}, 100.0)
    assert cols["cohort"] == 10
    assert math.isclose(cols["bytes_per_client"], (100.0 * 2**20 - 1000 * 10 * 9 * 8) / 1000)
    assert "bytes_per_client" not in bench.population_columns({"n_clients": 10, "fraction": 1.0}, float("nan"))


@pytest.mark.parametrize("text", ["1e5x", "2.5", "1e6,100,abc"])
def test_bad_population_lists_are_refused_in_one_line(bench, capsys, text):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--population", "--populations", text])
    assert exc.value.code == 2
    assert "--populations: expected comma-separated whole numbers" in capsys.readouterr().err


def test_population_configurations_cover_every_algorithm_and_count_written_as_powers_of_ten(bench):
    """``--algorithms`` gives one configuration per algorithm (k-means without it), and ``1e5`` is a count."""
    p = argparse.ArgumentParser()  # only its error() would be called
    args = SimpleNamespace(algorithms="federated-fcm,fedkmeans", populations="1e5,2000", fractions="0.01",
                           backends="ray", resident="auto", rounds=5, num_cpus=2, init="random-box")
    specs = bench.population_specs(args, p)
    assert [(s["algorithm"], s["n_clients"]) for s in specs] == [
        ("federated-fcm", 100_000), ("federated-fcm", 2000), ("fedkmeans", 100_000), ("fedkmeans", 2000)]
    assert {s["algorithm"] for s in bench.population_specs(SimpleNamespace(**{**vars(args), "algorithms": None}),
                                                            p)} == {"kmeans"}


def test_a_measured_smaller_population_bounds_the_estimate_of_a_larger_one(bench, monkeypatch):
    """10^6 clients on ray pass check_memory and the static estimate with 8 GiB available, but not once
    10^5 clients were measured at 2384 MiB: scaled beyond the base that is over 10 GiB, so it is skipped."""
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=8 * 2**30, total=16 * 2**30))
    spec = dict(algorithm="kmeans", backend="ray", n_clients=1_000_000, clients_per_actor="auto", rounds=2,
                num_cpus=2, init="random-box", points=10, fraction=0.001)
    assert bench.precheck(spec, 0) == ""
    measured = [{"backend": "ray", "population": 100_000, "peak_mem_mb": 2384.0, "error": ""}]
    assert bench.precheck(spec, 0, [{**measured[0], "backend": "local"}]) == ""  # another backend: no bound
    reason = bench.precheck(spec, 0, measured)
    assert reason.startswith("skipped: about 10,340 MiB needed (estimate)")
