"""Sweeps: grids expand, every run gets one row of measurements, Ray is reused, memory counts child processes."""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pandas as pd
import psutil
import pytest

from fedray.analysis.sweep import MAX_SHARE, PeakMemory, expand_grid, parse_grid, sweep
from fedray.core.errors import ConfigError
from fedray.tools.cli import main

BASE = {
    "seed": 3,
    "algorithm": {"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box", "max_rounds": 4, "tol": 1e-12}},
    "data": {"dataset": "blobs", "options": {"points_per_client": 40, "n_features": 2, "n_centers": 3}},
    "federation": {"rounds": 4},
    "runtime": {"backend": "local", "progress": False},
}


def test_parse_and_expand_grid():
    grid = parse_grid(["federation.n_clients=10,100", "runtime.backend=local,ray", "runtime.clients_per_actor=auto,1"])
    assert grid == {"federation.n_clients": [10, 100], "runtime.backend": ["local", "ray"],
                    "runtime.clients_per_actor": ["auto", 1]}
    combos = expand_grid(grid)
    assert len(combos) == 8 and combos[0] == {"federation.n_clients": 10, "runtime.backend": "local",
                                              "runtime.clients_per_actor": "auto"}
    assert combos[1]["runtime.clients_per_actor"] == 1  # last key varies fastest
    with pytest.raises(ConfigError, match="expected KEY=V1,V2"):
        parse_grid(["federation.n_clients"])
    with pytest.raises(ConfigError, match="federation.n_clients given twice"):
        parse_grid(["federation.n_clients=1", "federation.n_clients=2"])


def test_bad_grid_value_fails_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="federation.fraction"):
        sweep(BASE, {"federation.n_clients": [3], "federation.fraction": [0.5, 1.5]}, out=tmp_path)
    assert not (tmp_path / "sweep.parquet").exists()


def test_local_sweep_writes_one_row_per_run(tmp_path):
    df = sweep(BASE, {"federation.n_clients": [3, 6], "algorithm.name": ["kmeans", "federated-fcm"]}, out=tmp_path)
    assert len(df) == 4 and (df["error"] == "").all()
    assert list(df["federation.n_clients"]) == [3, 3, 6, 6]
    assert list(df["algorithm"]) == ["kmeans", "federated-fcm"] * 2
    assert (df["rounds"] == 4).all() and (df["peak_mem_mb"] > 0).all() and (df["startup_s"] >= 0).all()
    # every client sends the same statistics each round: bytes up grow with the clients, exactly
    km = df[df["algorithm"] == "kmeans"].set_index("n_clients")
    assert km.loc[6, "bytes_up"] == 2 * km.loc[3, "bytes_up"]
    back = pd.read_parquet(tmp_path / "sweep.parquet")
    pd.testing.assert_frame_equal(back, df, check_dtype=False)
    assert (tmp_path / "sweep.png").stat().st_size > 10_000 and (tmp_path / "grid.yaml").exists()


def test_mixed_grid_values_share_one_parquet_column(tmp_path):
    df = sweep(BASE, {"federation.n_clients": [2], "runtime.clients_per_actor": [1, "auto"]}, out=tmp_path, plot=False)
    back = pd.read_parquet(tmp_path / "sweep.parquet")
    assert list(back["runtime.clients_per_actor"]) == ["1", "auto"] and len(df) == 2


def test_sweep_reuses_a_running_ray_and_matches_local(ray_session, tmp_path):
    df = sweep(BASE, {"federation.n_clients": [4], "runtime.backend": ["local", "ray"]}, plot=False)
    assert ray_session.is_initialized()  # not shut down: the sweep did not start it
    assert list(df["backend"]) == ["local", "ray"] and (df["ray_init_s"] == 0).all()
    assert df["objective"].iloc[0] == df["objective"].iloc[1]  # same seed, same bits on both runtimes
    assert df["actors"].iloc[1] >= 1 and df["processes"].iloc[1] > df["processes"].iloc[0]


def test_peak_memory_counts_descendant_processes():
    # a shell whose child holds 320 MB: only counting descendants can see it
    code = "import numpy as np, time; a = np.ones(40_000_000); time.sleep(60)"
    shell = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} -c '{code}'; true"])
    try:
        with PeakMemory(interval=0.05, pid=shell.pid) as mem:
            deadline = time.monotonic() + 60
            while mem.peak_pss_mb < 300 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        for p in psutil.Process(shell.pid).children(recursive=True):
            p.kill()
        shell.kill()
        shell.wait()
    assert mem.peak_pss_mb >= 300 and mem.max_processes == 2


def test_peak_memory_sampler_takes_at_most_its_share_of_a_core(monkeypatch):
    """A sample slower than the interval (hundreds of large processes) spaces the next one out, so the
    sampler is busy about MAX_SHARE of the time, not all of it (back to back it would be about 1)."""
    mem = PeakMemory(interval=0.001, include_ray=False)
    busy: list[float] = []

    def slow_sample():
        t = time.perf_counter()
        time.sleep(0.02)
        busy.append(time.perf_counter() - t)

    monkeypatch.setattr(mem, "sample", slow_sample)
    t0 = time.perf_counter()
    with mem:
        time.sleep(1.0)
    elapsed = time.perf_counter() - t0
    assert len(busy) >= 3  # it still samples
    assert sum(busy) <= 2 * MAX_SHARE * elapsed + 0.05  # the first and last samples come on top


def test_cli_sweep(tmp_path, capsys):
    out = tmp_path / "s"
    rc = main(["sweep", "--set", "data.dataset=blobs", "--set", "algorithm.params.n_clusters=2",
               "--set", "federation.rounds=3", "--set", "runtime.backend=local",
               "--grid", "federation.n_clients=2,4", "--out", str(out), "--no-plot"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "federation.n_clients" in text and str(out) in text
    df = pd.read_parquet(out / "sweep.parquet")
    assert list(df["n_clients"]) == [2, 4] and np.all(df["rounds"] >= 1)
