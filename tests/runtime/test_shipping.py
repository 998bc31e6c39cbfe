"""Code shipping (fedray.runtime.shipping) and slim installs (fedray.core.extras).

* The staged copy of fedray is importable as installed: it holds fedray.actors and
  fedray.algorithms (which live outside fedray/ in the checkout), no bytecode, and its
  folder is keyed by content.
* The user's runtime_env is merged, not overwritten; ship_code decides what is shipped.
* On the embedded instance a plug-in module that the driver imports from a folder added
  to sys.path after Ray started runs on Ray workers only because it is shipped.
* A neural algorithm without torch fails at validation with one line naming the extra.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fedray
from fedray.api.settings import ship_settings
from fedray.core.errors import ConfigError
from fedray.runtime.shipping import code_paths as _code_paths
from fedray.runtime.shipping import fedray_package_dir, merge_runtime_env
from tests import plugins


def test_staged_fedray_is_the_installed_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))
    staged = fedray_package_dir()
    assert staged.name == "fedray"
    for rel in ("__init__.py", "api/session.py", "data/__init__.py", "nn/__init__.py", "actors/client_actor.py",
                "actors/server_actor.py", "algorithms/kmeans.py"):
        assert (staged / rel).is_file(), rel
    assert not list(staged.rglob("__pycache__")) and not list(staged.rglob("*.pyc"))
    # importable from the staging folder alone: -S skips the .pth files (so the editable install's
    # finder), site-packages is added back as a plain folder for numpy, ray, ...
    import sysconfig

    code = ("import sys; sys.path[:0] = [sys.argv[1]]; sys.path.append(sys.argv[2]); "
            "import fedray.actors.client_actor, fedray.algorithms.kmeans, fedray.api.session; print(fedray.__file__)")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(staged.parent), sysconfig.get_paths()["purelib"]],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(staged / "__init__.py")
    assert fedray_package_dir() == staged  # cached: same content, same folder


def test_user_runtime_env_is_merged_not_overwritten():
    user = {"pip": ["scikit-learn"], "env_vars": {"A": "1"}, "py_modules": ["gcs://theirs.zip"],
            "working_dir": "gcs://wd.zip"}
    merged = merge_runtime_env(user, ["/stage/fedray", "gcs://theirs.zip"])
    assert merged == {"pip": ["scikit-learn"], "env_vars": {"A": "1"}, "working_dir": "gcs://wd.zip",
                      "py_modules": ["gcs://theirs.zip", "/stage/fedray"]}
    assert user["py_modules"] == ["gcs://theirs.zip"]  # the config is not modified
    assert merge_runtime_env(None, []) == {}
    with pytest.raises(ConfigError, match="runtime.runtime_env.py_modules: must be a list"):
        merge_runtime_env({"py_modules": "x"}, ["/stage/fedray"])


PLUGIN = plugins.MEAN


@pytest.fixture
def plugin_on_path(tmp_path, monkeypatch):
    """A single-file plug-in in a folder the driver adds to sys.path (after Ray started)."""
    name = f"fr_shipped_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{name}:Mean"
    sys.modules.pop(name, None)


def code_paths(cfg, on_cluster: bool):
    """The paths shipped for experiment configuration ``cfg`` (its ship settings, as a session reads them)."""
    return _code_paths(ship_settings(cfg), on_cluster)


def _cfg(algorithm: str, **runtime) -> dict:
    return {"seed": 5, "algorithm": {"name": algorithm}, "data": {"dataset": "sklearn:iris"},
            "federation": {"n_clients": 4}, "runtime": {"progress": False, **runtime}}


def test_ship_code_modes_choose_paths(plugin_on_path):
    cfg = fedray.make_config(_cfg(plugin_on_path))
    plugin_file = Path(sys.modules[plugin_on_path.split(":")[0]].__file__)
    assert code_paths(cfg, on_cluster=False) == [plugin_file]  # embedded: the plug-in only
    on_cluster = code_paths(cfg, on_cluster=True)
    assert on_cluster[0].name == "fedray" and on_cluster[1:] == [plugin_file]
    assert code_paths(fedray.make_config(cfg, overrides=["runtime.ship_code=never"]), on_cluster=True) == []
    always = code_paths(fedray.make_config(cfg, overrides=["runtime.ship_code=always"]), on_cluster=False)
    assert [p.name for p in always] == ["fedray", plugin_file.name]
    assert code_paths(fedray.make_config(_cfg("kmeans")), on_cluster=False) == []  # built-ins: nothing


def test_plugin_added_to_sys_path_after_ray_started_runs_on_ray_workers(ray_session, plugin_on_path):
    local = fedray.run(_cfg(plugin_on_path, backend="local"))
    shipped = fedray.run(_cfg(plugin_on_path, backend="ray"))
    np.testing.assert_array_equal(shipped.model["mean"], local.model["mean"])
    # the same run without shipping cannot import the plug-in on the workers
    with pytest.raises(Exception, match="No module named|server actor died"):
        fedray.run(_cfg(plugin_on_path, backend="ray", ship_code="never", startup_timeout=60))


NEURAL = ["flacc", "fedavg", "local", "ifca", "cfl", "flhc", "fedcref"]


def test_neural_algorithm_without_torch_names_the_extra_before_ray_starts():
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import fedray
        from fedray.tools.cli import main
        for name in {NEURAL!r}:
            try:
                fedray.make_config(algorithm={{"name": name}}, runtime={{"backend": "ray"}})
            except fedray.ConfigError as exc:
                print("ERR", exc)
        fedray.make_config(algorithm={{"name": "kmeans"}})
        assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
        sys.exit(main(["run", "--set", "algorithm.name=flacc"]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    errs = [ln for ln in out.stdout.splitlines() if ln.startswith("ERR")]
    assert len(errs) == len(NEURAL), out.stdout + out.stderr
    for name, line in zip(NEURAL, errs):
        assert line == (f"ERR algorithm.name: {name!r} needs torch, which is not installed; install it with: "
                        "pip install \"fedray[nn]\" (or pip install torch first to choose its build)")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "fedray[nn]" in out.stderr, out.stderr


# --- what a plug-in ships -----------------------------------------------------------------------
def _project_with_secrets(root: Path, name: str) -> Path:
    """A plug-in package in a project folder holding secrets, a repository and large data."""
    pkg = root / name
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "algo.py").write_text(PLUGIN)
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "helpers.py").write_text("X = 1\n")
    (pkg / "defaults.json").write_text("{}")  # package data: shipped
    for where in (root, pkg):
        (where / ".env").write_text("SECRET=1\n")
        (where / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        (where / ".ssh").mkdir()
        (where / ".ssh" / "id_ed25519").write_text("key\n")
        (where / ".git").mkdir()
        (where / ".git" / "config").write_text("[core]\n")
        (where / "data").mkdir()
        with open(where / "data" / "big.bin", "wb") as fh:  # sparse: 500 MB that take no disk
            fh.truncate(500 * 2**20)
    (pkg / "server.pem").write_text("cert")
    (pkg / "generated.py").write_text("Y = 2\n")
    (pkg / "scratch").mkdir()
    (pkg / "scratch" / "__init__.py").write_text("")
    (root / ".gitignore").write_text(f"{name}/generated.py\nscratch/\n")
    return pkg


def test_a_plugin_ships_only_its_python_package_never_secrets_or_data(tmp_path, monkeypatch, caplog):
    name = f"fr_pkg_{tmp_path.name.replace('-', '_')}"
    _project_with_secrets(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))
    cfg = fedray.make_config(_cfg(f"{name}.algo:Mean"))
    with caplog.at_level(logging.INFO, logger="fedray.runtime.shipping"):
        [shipped] = code_paths(cfg, on_cluster=False)
    files = sorted(p.relative_to(shipped).as_posix() for p in shipped.rglob("*") if p.is_file())
    assert shipped.name == name
    assert files == ["__init__.py", "algo.py", "defaults.json", "sub/__init__.py", "sub/helpers.py"]
    assert sum((shipped / f).stat().st_size for f in files) < 100_000
    assert f"shipping plug-in '{name}' to the Ray workers: 5 files" in caplog.text
    sys.modules.pop(name, None)


def test_a_plugin_larger_than_the_cap_is_refused_naming_its_largest_files(tmp_path, monkeypatch):
    name = f"fr_big_{tmp_path.name.replace('-', '_')}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "algo.py").write_text(PLUGIN)
    with open(pkg / "weights.npy", "wb") as fh:  # package data above the cap (sparse)
        fh.truncate(3 * 10**6)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))
    cfg = fedray.make_config(_cfg(f"{name}.algo:Mean", ship_max_mb=1))
    with pytest.raises(ConfigError, match=rf"ship_max_mb=1: plug-in '{name}' would ship 3.0 MB .*largest files: "
                                          rf"{name}/weights.npy \(3.0 MB\)") as err:
        code_paths(cfg, on_cluster=False)
    assert "\n" not in str(err.value)
    sys.modules.pop(name, None)


def test_a_staged_plugin_package_runs_on_ray_workers(ray_session, tmp_path, monkeypatch):
    name = f"fr_pkgray_{tmp_path.name.replace('-', '_')}"
    _project_with_secrets(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))
    local = fedray.run(_cfg(f"{name}.algo:Mean", backend="local"))
    shipped = fedray.run(_cfg(f"{name}.algo:Mean", backend="ray"))
    np.testing.assert_array_equal(shipped.model["mean"], local.model["mean"])
    sys.modules.pop(name, None)
    sys.modules.pop(f"{name}.algo", None)
