"""The plug-in contract: users' algorithms run exactly where built-in ones do.

* A toy plug-in that implements only the three required hooks runs through the
  whole loop (evaluation stages included) on ``local`` and ``ray`` with identical
  results, from Python and from the CLI as ``module:Class``, without registration.
* Every bad reference fails before any data with one line naming the problem.
* Installed packages are found through the entry-point group ``fedray.algorithms``.
* The worked k-medians plug-in (examples/plugins) is exact: federated equals the
  same iteration on the pooled rows.
* Built-in algorithms use only what a plug-in can use: public modules and names.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fedray
from fedray.core.errors import ConfigError
from tests import plugins

REPO = Path(__file__).resolve().parents[2]

TOY = textwrap.dedent('''
    """A federated mean and variance, overriding only the required hooks."""
    import numpy as np
    import fedray


    def moments(payload, shared, client):
        X = client.data.X
        return fedray.Stats(s=X.sum(axis=0), ss=(X ** 2).sum(axis=0), n=np.array(float(X.shape[0])))


    class FederatedMoments(fedray.Algorithm):
        def configure_round(self, ctx):
            if ctx.round >= 3:
                return None
            return {c: fedray.Task(moments) for c in ctx.sampled}

        def aggregate(self, ctx, replies):
            t = fedray.total(r.update for r in replies)
            self.mean = t["s"] / t["n"]
            self.var = t["ss"] / t["n"] - self.mean ** 2
            return {"n": float(t["n"])}

        def result(self):
            return {"mean": self.mean, "var": self.var}
''')

CFG = {"seed": 3, "data": {"dataset": "sklearn:wine", "partition": {"name": "dirichlet", "alpha": 0.5}},
       "federation": {"n_clients": 6}, "runtime": {"progress": False}}


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    (tmp_path / "toy_fedray_plugin.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "toy_fedray_plugin"
    sys.modules.pop("toy_fedray_plugin", None)


def _pooled(name: str) -> np.ndarray:
    from sklearn import datasets

    return getattr(datasets, f"load_{name}")().data


def test_toy_plugin_with_only_required_hooks_runs_and_is_exact_on_local(toy_module):
    res = fedray.run(CFG, algorithm={"name": f"{toy_module}:FederatedMoments"}, runtime={"backend": "local"},
                     output=False)
    X = _pooled("wine")
    # full participation: the federated mean of 6 clients is the pooled mean
    np.testing.assert_allclose(res.model["mean"], X.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(res.model["var"], X.var(axis=0), rtol=1e-9)
    assert len(res.history) == 3
    assert res.summary["algorithm"] == f"{toy_module}:FederatedMoments"  # default name: the reference
    assert res.final == {}  # default evaluation hooks: no stage, no metrics (and no crash)
    assert res.summary["converged"] is False


def test_toy_plugin_gives_identical_results_on_ray(toy_module, ray_session):
    name = f"{toy_module}:FederatedMoments"
    local = fedray.run(CFG, algorithm={"name": name}, runtime={"backend": "local"}, output=False)
    with fedray.Session(CFG, algorithm={"name": name}, runtime={"backend": "ray", "clients_per_actor": 2}) as s:
        remote = s.run(output=False)
    np.testing.assert_array_equal(local.model["mean"], remote.model["mean"])
    np.testing.assert_array_equal(local.model["var"], remote.model["var"])
    assert list(local.history["n"]) == list(remote.history["n"])


def test_session_runs_a_plugin_class_object(toy_module):
    import importlib

    cls = importlib.import_module(toy_module).FederatedMoments
    with fedray.Session(CFG, runtime={"backend": "local"}) as s:
        a = s.run(cls, {}, output=False)
        b = s.run(f"{toy_module}:FederatedMoments", {}, output=False)
    np.testing.assert_array_equal(a.model["mean"], b.model["mean"])


class _Staged(fedray.Algorithm):
    """Evaluation in two stages: the second uses the first's totals (as the centre-based bases do)."""

    def configure_round(self, ctx):
        return None

    def aggregate(self, ctx, replies):
        return {}

    def result(self):
        return {}

    def evaluation_task(self, stage, previous):
        if stage == 0:
            return fedray.Task(_count, evaluation=True)
        if stage == 1:
            self.n = fedray.total(r.update for r in previous)["n"]
            return fedray.Task(_count, evaluation=True)
        return None

    def summarize_evaluation(self, stages):
        return {"stages": len(stages), "n": float(self.n), "replies": len(stages[1])}


def _count(payload, shared, client):
    return fedray.Stats(n=np.array(float(client.data.X.shape[0])))


def test_evaluation_stages_receive_the_previous_stage_replies():
    with fedray.Session(CFG, runtime={"backend": "local"}) as s:
        res = s.run(_Staged, {}, output=False)
    cov = res.final.pop("evaluation_coverage")
    assert res.final == {"stages": 2, "n": 178.0, "replies": 6}
    assert cov["clients"] == cov["of_clients"] == 6 and cov["samples"] == 178


def test_plugin_runs_from_the_cli_on_local_and_ray_with_identical_results(tmp_path):
    (tmp_path / "cli_toy_plugin.py").write_text(TOY)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    outs = {}
    for backend in ("local", "ray"):
        out = tmp_path / backend
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from fedray.tools.cli import main; sys.exit(main())", "run", "-q",
             "--set", "algorithm.name=cli_toy_plugin:FederatedMoments", "--set", f"runtime.backend={backend}",
             "--set", "runtime.num_cpus=1" if backend == "ray" else "runtime.progress=false",
             "--set", "data.dataset=sklearn:wine", "--out", str(out)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "Token authentication" not in proc.stderr  # Ray's banners only with -v
        outs[backend] = np.load(out / "model.npz")
        assert json.loads((out / "summary.json").read_text())["algorithm"] == "cli_toy_plugin:FederatedMoments"
    np.testing.assert_array_equal(outs["local"]["mean"], outs["ray"]["mean"])
    np.testing.assert_array_equal(outs["local"]["var"], outs["ray"]["var"])


BAD = textwrap.dedent('''
    import fedray
    import numpy as np

    class Half(fedray.Algorithm):
        def configure_round(self, ctx):
            return None

    def a_function():
        pass
''')


@pytest.mark.parametrize("ref, message", [
    ("no_such_module_xyz:Algo", "cannot import module 'no_such_module_xyz'"),
    ("bad_fedray_plugin:Missing", "module 'bad_fedray_plugin' has no attribute 'Missing'"),
    ("bad_fedray_plugin:a_function", "is not a fedray.Algorithm subclass (it is a function)"),
    ("bad_fedray_plugin:np", "is not a fedray.Algorithm subclass (it is a module)"),
    ("bad_fedray_plugin:Half", "does not implement the required method(s) aggregate, result"),
    ("broken_fedray_plugin:X", "no module named 'missing_dependency_xyz'"),
    ("raising_fedray_plugin:X", "failed: RuntimeError: boom"),
    ("9bad:X", "is not a reference of the form package.module:Name"),
    ("kmean", "did you mean 'kmeans'"),
])
def test_bad_references_are_one_line_errors_before_any_data(tmp_path, monkeypatch, ref, message):
    (tmp_path / "bad_fedray_plugin.py").write_text(BAD)
    (tmp_path / "broken_fedray_plugin.py").write_text("import missing_dependency_xyz\n")
    (tmp_path / "raising_fedray_plugin.py").write_text("raise RuntimeError('boom\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        fedray.make_config(algorithm={"name": ref})
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_reports_a_bad_reference_in_one_line_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import sys; from fedray.tools.cli import main; sys.exit(main())",
                           "run", "--set", "algorithm.name=nowhere_xyz:Algo"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "cannot import module 'nowhere_xyz'" in proc.stderr


def test_installed_plugins_are_found_by_entry_point(tmp_path, monkeypatch):
    pkg = tmp_path / "fedray_toy_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(TOY)
    plugins.installed_distribution(
        tmp_path,
        "fedray-toy-pkg",
        "fedray.algorithms",
        "toy-moments = fedray_toy_pkg:FederatedMoments\ntoy-broken = fedray_toy_pkg:nothing_here\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from fedray.core.plugins import entry_points

    assert entry_points()["toy-moments"].value == "fedray_toy_pkg:FederatedMoments"
    res = fedray.run(CFG, algorithm={"name": "toy-moments"}, runtime={"backend": "local"}, output=False)
    np.testing.assert_allclose(res.model["mean"], _pooled("wine").mean(axis=0), rtol=1e-12)
    with pytest.raises(ConfigError, match="the installed plug-in 'toy-broken'.*failed to load"):
        fedray.make_config(algorithm={"name": "toy-broken"})
    listing = subprocess.run([sys.executable, "-c", "import sys; from fedray.tools.cli import main; sys.exit(main())",
                              "list"], env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True,
                             text=True, timeout=120)
    assert "toy-moments" in listing.stdout and "fedray_toy_pkg:FederatedMoments" in listing.stdout


def test_plugin_modules_names_what_must_travel_to_the_nodes(toy_module):
    from fedray.api.settings import ship_settings

    def modules(cfg):
        return list(ship_settings(cfg).modules)

    assert modules(fedray.make_config(algorithm={"name": "kmeans"})) == []
    cfg = fedray.make_config(algorithm={"name": f"{toy_module}:FederatedMoments"})
    assert modules(cfg) == [toy_module]
    cfg = fedray.make_config(algorithm={"name": "examples.plugins.kmedians:FederatedKMedians"})
    assert modules(cfg) == ["examples"]
    cfg = fedray.make_config(algorithm={"name": "kmeans"},
                             layers=[{"name": "examples.plugins.layers:DropClient", "params": {"client_id": 0}}])
    assert modules(cfg) == ["examples"]  # a user's layer names its module too


# --- the worked k-medians plug-in -----------------------------------------------------
KMED = "examples.plugins.kmedians:FederatedKMedians"
KCFG = {"seed": 1, "algorithm": {"name": KMED, "params": {"n_clusters": 3}},
        "data": {"dataset": "sklearn:iris", "partition": {"name": "dirichlet", "alpha": 0.5}},
        "federation": {"n_clients": 5}, "runtime": {"backend": "local", "progress": False}}


@pytest.fixture
def repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def test_kmedians_plugin_equals_the_central_iteration_and_reduces_its_objective(repo_on_path):
    res = fedray.run(KCFG, central_baseline=True, output=False)
    assert res.summary["converged"] is True
    assert res.final["center_distance_to_central"] < 1e-9
    obj = res.history.loc[res.history["phase"] == "train", "objective"].to_numpy()
    assert np.all(np.diff(obj) <= 1e-9 * obj[0])  # Weiszfeld steps never increase the sum of distances
    assert res.final["ari"] > 0.6


def test_kmedians_plugin_ray_equals_local(repo_on_path, ray_session):
    local = fedray.run(KCFG, output=False)
    remote = fedray.run(KCFG, runtime={"backend": "ray"}, output=False)
    np.testing.assert_array_equal(local.model["centers"], remote.model["centers"])


def test_kmedians_is_more_robust_to_outliers_than_kmeans():
    from examples.plugins.kmedians import weiszfeld_step, weiszfeld_sums

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 1, (200, 2)), [[1000.0, 1000.0]]])
    C = X.mean(axis=0, keepdims=True)
    for _ in range(200):
        s = weiszfeld_sums(X, C, 1e-9)
        C = weiszfeld_step(C, s["wx"], s["w"])
    assert np.linalg.norm(C) < 0.5 < np.linalg.norm(X.mean(axis=0))


# --- built-ins use only what a plug-in can use ---------------------------------------------
def _private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedray"):
            if any(part.startswith("_") for part in node.module.split(".")):
                bad.append(f"{path.name}: from {node.module}")
            bad += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        if isinstance(node, ast.Import):
            bad += [f"{path.name}: import {a.name}" for a in node.names
                    if a.name.startswith("fedray") and any(p.startswith("_") for p in a.name.split("."))]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and not (isinstance(node.args[0], ast.Name) and node.args[0].id == "self")):
            bad.append(f"{path.name}:{node.lineno}: getattr lookup of another object's hook")
    return bad


@pytest.mark.parametrize("path", sorted((REPO / "algorithms").glob("*.py")) + sorted((REPO / "examples" / "plugins")
                                                                                    .glob("*.py")),
                         ids=lambda p: p.name)
def test_algorithms_use_only_public_modules_and_names(path):
    assert _private_uses(path) == []


def test_algorithm_base_declares_every_hook_the_loop_calls():
    import inspect

    declared = {n for n, _ in inspect.getmembers(fedray.Algorithm)}
    for hook in ("configure_round", "aggregate", "result", "check_config", "validate", "evaluation_task",
                 "summarize_evaluation", "retries_for_missing", "predict", "predict_proba", "central", "aliases",
                 "fuzzy", "requires", "supervised",
                 "description", "name", "Params"):
        assert hook in declared, hook
    assert fedray.Algorithm.__abstractmethods__ == {"configure_round", "aggregate", "result"}
    sig = inspect.signature(fedray.Algorithm.evaluation_task)
    assert list(sig.parameters) == ["self", "stage", "previous"]
