"""The command line as a user types it."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import yaml

from fedray.tools.cli import main
from tests import plugins


def test_run_yaml_with_overrides_writes_outputs(tmp_path, capsys):
    cfg = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}},
           "data": {"dataset": "sklearn:wine", "scale": "standard"},
           "federation": {"n_clients": 4}, "runtime": {"backend": "local"}}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    code = main(["run", str(path), "--set", "federation.n_clients=6", "--set", "seed=3", "--out", str(out), "-q"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_clients"] == 6 and summary["seed"] == 3
    assert summary["config"]["federation"]["n_clients"] == 6
    assert set(summary["final"]) >= {"ari", "nmi", "acc", "davies_bouldin", "objective"}
    rounds = pd.read_parquet(out / "rounds.parquet")
    assert {"round", "phase", "clients_sampled", "clients_answered", "clients_failed", "center_shift",
            "objective", "bytes_down", "bytes_up", "wall_s"} <= set(rounds.columns)
    assert len(rounds) == summary["rounds"]
    assert len(pd.read_parquet(out / "clients.parquet")) == 6
    assert yaml.safe_load((out / "config.yaml").read_text())["seed"] == 3
    assert (out / "plots" / "convergence.png").stat().st_size > 0
    assert "outputs:" in capsys.readouterr().out


def test_quickstart_on_ray(ray_session, tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), "-q"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "ray"
    assert summary["final"]["center_distance_to_central"] < 1e-9  # full participation: exact
    assert (out / "plots" / "centers.png").exists()
    text = capsys.readouterr().out
    assert "ari" in text and str(out) in text


def test_list_names_algorithms_datasets_partitions(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    for word in ("kmeans", "federated-fcm", "sklearn:iris", "benchmark:BATTERY/NAME", "dirichlet", "by_column"):
        assert word in text


def test_clustering_never_imports_torch():
    code = ("import sys, fedray\n"
            "fedray.run(algorithm={'name': 'kmeans', 'params': {'n_clusters': 3}}, runtime={'backend': 'local'})\n"
            "fedray.available_algorithms()\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_current_folder_gives_plugins_but_never_shadows_a_library(tmp_path):
    """`fedray run` finds module:Class plug-ins in the current folder, yet a matplotlib.py there never runs."""
    from pathlib import Path

    script = Path(sys.executable).with_name("fedray")
    assert script.is_file(), "the console script is installed with the package"
    (tmp_path / "matplotlib.py").write_text("open('SHADOWED', 'w').close()\nraise SystemExit('shadowed')\n")
    plugins.write_module(tmp_path, "fr_cwd_plugin")
    proc = subprocess.run([str(script), "run", "--set", "algorithm.name=fr_cwd_plugin:Mean", "--set",
                           "runtime.backend=local", "--set", "data.dataset=sklearn:iris", "--set",
                           "federation.n_clients=4", "--out", "out", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (tmp_path / "SHADOWED").exists()
    assert (tmp_path / "out" / "plots" / "convergence.png").is_file()  # drawn by the real matplotlib
