"""The README's commands and ``examples/*.py`` in quick forms (local runtime, few rounds): each exits
0 and prints no WARNING line and no traceback; the YAML example and the quickstart run twice in a
row in the same folder. Property held: what a new user copies from the README runs clean."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from fedray.tools.cli import main; sys.exit(main())"]
LOCAL = ["--set", "runtime.backend=local"]
BAD = re.compile(r"\bWARNING\b|Warning:|Traceback|\x1b\[")


def _clean(args: list[str], cwd: Path, timeout: int = 240) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    bad = [ln for ln in text.splitlines() if BAD.search(ln)]
    assert not bad, bad
    return text


def test_the_quickstart_runs_clean_twice_and_shows_start_up_apart(tmp_path):
    for _ in range(2):
        text = _clean([*CLI, "quickstart", *LOCAL], tmp_path)
    assert "start-up (once a session)" in text and "start-up: ready in" in text
    assert (tmp_path / "fedray-output" / "quickstart" / "summary.json").is_file()


def test_the_yaml_example_runs_twice_in_a_row(tmp_path, data_dir):
    cmd = [*CLI, "run", str(REPO / "examples" / "kmeans_s1.yaml"), "--set", f"data.data_dir={data_dir}",
           "--set", "federation.n_clients=100", *LOCAL]
    for _ in range(2):
        text = _clean(cmd, tmp_path)
        assert "(settled)" in text or "(converged)" in text  # not the round cap
    assert len(list((tmp_path / "fedray-output").iterdir())) == 2


@pytest.mark.parametrize("sets", [
    ["algorithm.name=examples.plugins.kmedians:FederatedKMedians", "algorithm.params.n_clusters=3",
     "evaluation.central_baseline=true"],
    ["algorithm.name=examples.plugins.fedprox:FedProx", "algorithm.params.mu=0.01", "data.dataset=sklearn:digits",
     "data.partition={name: rotated, samples: [40, 80]}", "federation.n_clients=20", "federation.rounds=2"],
    ["algorithm.name=flacc", "data.dataset=sklearn:digits", "algorithm.params.n_merge=1",
     "data.partition={name: rotated, samples: [30, 60]}", "federation.n_clients=16", "federation.fraction=0.25",
     "federation.rounds=2"],
])
def test_the_readme_run_commands(tmp_path, sets):
    pytest.importorskip("torch") if "kmedians" not in sets[0] else None
    _clean([*CLI, "run", *[a for s in sets for a in ("--set", s)], *LOCAL, "--out", str(tmp_path / "o")], REPO)


def test_select_k_and_sweep(tmp_path):
    cfg = tmp_path / "my.yaml"
    cfg.write_text("algorithm: {name: federated-fcm}\ndata: {dataset: 'sklearn:iris'}\n"
                   "federation: {n_clients: 4}\nruntime: {backend: local}\n")
    text = _clean([*CLI, "select-k", str(cfg), "--k-min", "2", "--k-max", "3", "--method", "min", "--n-init", "2",
                   "--out", str(tmp_path / "k")], tmp_path)
    assert "select-k: K=3 (2 of 2)" in text and "chosen K (federated)" in text
    text = _clean([*CLI, "sweep", str(cfg), "--grid", "federation.n_clients=4,6", "--grid", "runtime.backend=local",
                   "--out", str(tmp_path / "s")], tmp_path)
    assert "sweep: run 2 of 2" in text


def test_trackers_command(tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    _clean([*CLI, "run", "--set", "algorithm.name=kmeans", "--set", "output.trackers=[tensorboard, mlflow]",
            *LOCAL, "--out", "runs/km"], tmp_path)
    assert (tmp_path / "runs" / "km" / "tensorboard").is_dir()


PYTHON_EXAMPLES = '''
import fedray
result = fedray.run(
    algorithm={"name": "federated-fcm", "params": {"n_clusters": 3, "m": 2.0}},
    data={"dataset": "sklearn:wine", "scale": "standard", "partition": {"name": "dirichlet", "alpha": 0.5}},
    federation={"n_clients": 10, "fraction": 0.5},
    runtime={"backend": "local"},
)
assert result.summary["stop_reason"] == "settled", result.summary["stop_reason"]
from sklearn.datasets import load_wine
result.predict(load_wine().data[:5])
with fedray.Session(data={"dataset": "sklearn:iris"}, federation={"n_clients": 5},
                    runtime={"backend": "local"}) as s:
    for k in (2, 3):
        print(k, s.run("kmeans", {"n_clusters": k}).final["davies_bouldin"])
import numpy as np
from fedray.estimators import FederatedKMeans, FederatedFuzzyCMeans
from sklearn.datasets import load_iris
X, y = load_iris(return_X_y=True)
site = np.array(["north", "south", "east"])[np.arange(len(X)) % 3]
result = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                    data=fedray.from_arrays(X, y, clients=site), runtime={"backend": "local"})
FederatedKMeans(n_clusters=3, random_state=0).fit(X, clients=site)
FederatedFuzzyCMeans(n_clusters=3, n_clients=5, random_state=0).fit(X).predict_proba(X[:2])
'''


def test_the_python_examples_show_progress_from_a_script(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(textwrap.dedent(PYTHON_EXAMPLES))
    text = _clean([sys.executable, str(script)], tmp_path)
    assert "start-up: reading sklearn:wine into 10 clients" in text  # progress from a plain script
    assert "federated-fcm: round" in text


@pytest.mark.slow  # every examples/*.py script in a process of its own
def test_examples_scripts_in_quick_form(tmp_path):
    pytest.importorskip("ray.tune")
    pytest.importorskip("torch")
    scripts = sorted((REPO / "examples").glob("*.py"))
    assert [p.name for p in scripts if p.name != "__init__.py"] == ["tune_flacc.py"]  # a new one needs a line here
    _clean([sys.executable, str(REPO / "examples" / "tune_flacc.py"), "--quick", "--storage", str(tmp_path / "t")],
           tmp_path, timeout=400)
    assert not (tmp_path / "tune-results").exists()
