"""Code shipping: fedray and the user's plug-in modules reach Ray worker nodes that lack them.

A Ray worker node needs Ray and fedray's dependencies; it does not need
fedray itself, nor the modules a configuration names (``algorithm.name:
"pkg.mod:Class"``, ``algorithm.params.model: "pkg.mod:function"``). This module
builds the ``runtime_env`` that every fedray actor (client actors and the server
actor) is created with:

* **fedray** as an importable *staging directory* ``<cache>/<hash>/fedray``: the
  installed package laid out as it is imported (``fedray.actors`` and
  ``fedray.algorithms`` live in ``actors/`` and ``algorithms/`` of the source
  tree, so shipping the ``fedray/`` folder alone would miss them). The folder is
  keyed by a hash of its content and built once. A wheel is not used because
  Ray installs a ``.whl`` in ``py_modules`` with ``pip install`` *including its
  dependencies* on every node, which needs the package index and shadows the
  node's own numpy, scipy, ...
* **plug-in modules**: a single ``.py`` file as it is; a package as a staged copy
  of its Python package only (:mod:`fedray.runtime.ship_files`: the folders with
  an ``__init__.py``, no dotfile, no key file, nothing a ``.gitignore`` ignores),
  refused above ``runtime.ship_max_mb`` with the largest files named. The log
  says what was shipped and how large it was.
* the user's own ``runtime.runtime_env`` (``pip``, ``env_vars``, ``working_dir``,
  ``py_modules``, ...), merged: user entries first, fedray's appended. Its local
  paths are uploaded honouring ``.gitignore``; a ``working_dir`` never sends
  dotfiles or key files (:data:`NEVER_SHIPPED`).

Local paths are uploaded to the cluster's object store (GCS) here, on the
driver, so the environment can be given per actor (``.options(runtime_env=...)``):
Ray accepts only URIs there. That also works when the user called
``ray.init`` before fedray. Through Ray Client (``ray://``) the environment
goes into the job's ``runtime_env`` when fedray opens the connection
(:func:`connect_for`), because Ray 2.60's client cannot pin packages uploaded
after it connected; the actors inherit it.

When is what shipped (``runtime.ship_code``):

========  ==================================================================
``auto``  plug-in modules always (Ray workers do not see the driver's
          ``sys.path`` additions, even on one machine, except modules installed
          in site-packages); fedray only when connected to a cluster
          (``runtime.address`` set, or a Ray instance with more than one node)
``always`` fedray and the plug-in modules, also on an embedded instance
``never``  nothing: the nodes already have fedray and the plug-ins (a baked image)
========  ==================================================================
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
import site
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from fedray.core.errors import ConfigError
from fedray.runtime.connect import CLIENT_PREFIX, connect, resolve_address
from fedray.runtime.settings import ShipSettings
from fedray.runtime.ship_files import check_size, plugin_files

#: Patterns (.gitignore syntax) never uploaded from a user's ``working_dir`` either: dotfiles and
#: dot-folders, private keys and certificates.
NEVER_SHIPPED = [".*", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.pem", "*.key", "*.p12", "*.pfx"]

log = logging.getLogger(__name__)

# Subpackages that setuptools maps outside fedray/ (pyproject: package-dir).
_MAPPED = ("actors", "algorithms")
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so.tmp")


# --- fedray as a staging directory ----------------------------------------------------
def _package_sources() -> dict[str, Path]:
    """Relative path inside the ``fedray`` package -> file on this machine."""
    roots: list[tuple[str, Path]] = [("", Path(__file__).resolve().parents[1])]  # the fedray package
    for sub in _MAPPED:
        spec = importlib.util.find_spec(f"fedray.{sub}")
        if spec is not None and spec.submodule_search_locations:
            path = Path(list(spec.submodule_search_locations)[0])
            if not _is_inside(path, roots[0][1]):
                roots.append((sub, path))
    files: dict[str, Path] = {}
    for prefix, root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            rel_dir = Path(dirpath).relative_to(root)
            if rel_dir.parts and not (Path(dirpath) / "__init__.py").exists():
                # Only package folders (and the package data inside them) are part of fedray.
                continue
            for name in sorted(filenames):
                if name.endswith(_SKIP_SUFFIXES) or name.startswith("."):
                    continue
                rel = Path(prefix, rel_dir, name).as_posix()
                files.setdefault(rel, Path(dirpath) / name)
    return files


def _is_inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def cache_dir() -> Path:
    """Where staging folders are kept: ``$FEDRAY_CACHE_DIR`` or ``~/.cache/fedray``."""
    base = os.environ.get("FEDRAY_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "fedray")
    return Path(base) / "ship"


def fedray_package_dir() -> Path:
    """An importable copy of the installed fedray package, ``<cache>/<hash>/fedray``.

    Keyed by a SHA-256 of every shipped file's path and content, so an edited
    checkout gives a new folder and an unchanged one is reused.
    """
    files = {f"fedray/{rel}": src for rel, src in _package_sources().items()}
    target = stage(files) / "fedray"
    log.info("fedray staged for shipping in %s (%d files)", target, len(files))
    return target


def stage(files: dict[str, Path]) -> Path:
    """A folder ``<cache>/<hash>`` holding exactly ``files`` (relative name -> source), built once.

    Keyed by a SHA-256 of every file's name and content; built in a temporary folder and
    renamed into place, so a concurrent build or an interruption never leaves a partial copy.
    """
    h = hashlib.sha256()
    for rel, src in sorted(files.items()):
        h.update(rel.encode())
        h.update(b"\0")
        h.update(src.read_bytes())
        h.update(b"\0")
    digest = h.hexdigest()[:16]
    target = cache_dir() / digest
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=target.parent))
    try:
        for rel, src in files.items():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        (tmp / ".complete").write_text(digest)
        try:
            os.replace(tmp, target)
        except OSError:  # built concurrently by another process: use theirs
            if not (target / ".complete").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def stage_plugin(name: str, path: Path, max_mb: float) -> Path:
    """What is shipped of plug-in ``name`` found at ``path``: a ``.py`` file as it is, a package as a
    staged copy of its Python package only (see :mod:`fedray.runtime.ship_files`), under ``max_mb``."""
    files = plugin_files(path)
    size = check_size(name, files, max_mb)
    shown = ", ".join(sorted(files)[:8]) + (", ..." if len(files) > 8 else "")
    log.info("shipping plug-in %r to the Ray workers: %d files, %.1f kB (%s)", name, len(files), size / 1e3, shown)
    for rel, src in sorted(files.items()):
        log.debug("shipping %s (from %s, %d bytes)", rel, src, src.stat().st_size)
    if path.is_file():
        return path
    return stage(files) / path.name


def shipped_size(path: Path) -> tuple[int, int]:
    """(number of files, total bytes) of a folder or file that would be shipped."""
    if path.is_file():
        return 1, path.stat().st_size
    n = size = 0
    for p in path.rglob("*"):
        if p.is_file():
            n += 1
            size += p.stat().st_size
    return n, size


# --- plug-in modules --------------------------------------------------------------------
def module_path(name: str) -> Path:
    """The directory of package ``name`` or the file of single-file module ``name``."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise ConfigError(f"algorithm: plug-in module {name!r} is not importable on the driver; "
                          "check its spelling and that its folder is on PYTHONPATH or installed")
    if spec.submodule_search_locations:
        locations = list(spec.submodule_search_locations)
        if len(locations) != 1:
            raise ConfigError(f"plug-in package {name!r} is a namespace package spread over {locations}; "
                              "Ray can ship only a package with one folder (add an __init__.py)")
        return Path(locations[0])
    if not spec.origin or not spec.origin.endswith(".py"):
        raise ConfigError(f"plug-in module {name!r} ({spec.origin}) is not a Python source file or package; "
                          "install it on every node and set runtime.ship_code: never")
    return Path(spec.origin)


def _site_dirs() -> list[Path]:
    dirs = {sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenv without getsitepackages
        pass
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        dirs.add(user)
    return [Path(d).resolve() for d in dirs if d]


def _installed(path: Path) -> bool:
    return any(_is_inside(path, d) for d in _site_dirs())


# --- runtime_env -------------------------------------------------------------------------
def code_paths(ship: ShipSettings, on_cluster: bool) -> list[Path]:
    """Local paths fedray ships for a run (fedray's staging folder first, then its plug-in modules)."""
    mode = ship.ship_code
    if mode == "never":
        return []
    paths: list[Path] = []
    if mode == "always" or on_cluster:
        paths.append(fedray_package_dir())
    for name in ship.modules:
        p = module_path(name)
        if mode == "auto" and not on_cluster and _installed(p):
            continue  # workers on this machine import it from the same site-packages
        paths.append(stage_plugin(name, p, ship.ship_max_mb))
    return paths


def merge_runtime_env(user: dict[str, Any] | None, py_modules: list[str]) -> dict[str, Any]:
    """The user's ``runtime_env`` with fedray's ``py_modules`` appended (nothing of the user's dropped)."""
    env = copy.deepcopy(dict(user or {}))
    if py_modules:
        theirs = env.get("py_modules") or []
        if not isinstance(theirs, list):
            raise ConfigError(f"runtime.runtime_env.py_modules: must be a list of paths or URIs; got {theirs!r}")
        env["py_modules"] = list(theirs) + [m for m in py_modules if m not in theirs]
    return env


def build_runtime_env(ship: ShipSettings, on_cluster: bool) -> dict[str, Any] | None:
    """The ``runtime_env`` every fedray actor of this run is created with (None: none needed).

    Must be called with Ray initialised: local paths (fedray's staging folder,
    plug-ins, the user's ``working_dir`` / ``py_modules``) are uploaded to the
    cluster and replaced by their ``gcs://`` URIs.
    """
    paths = code_paths(ship, on_cluster)
    env = merge_runtime_env(ship.runtime_env, [str(p) for p in paths])
    if not env:
        return None
    for p in paths:
        n, size = shipped_size(p)
        log.info("shipping %s to the Ray workers (%d files, %.1f kB before compression)", p, n, size / 1e3)
    return upload_local_paths(env)


def upload_local_paths(env: dict[str, Any]) -> dict[str, Any]:
    """Upload local ``py_modules`` and ``working_dir`` entries; returns the env with URIs only."""
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    scratch = tempfile.mkdtemp(prefix="fedray-upload-")
    try:
        env = upload_py_modules_if_needed(env, include_gitignore=True, scratch_dir=scratch, logger=log)
        if env.get("working_dir"):  # fedray's own py_modules are staged clean; a working_dir is the user's
            theirs = list(env.get("excludes") or [])
            env["excludes"] = theirs + [p for p in NEVER_SHIPPED if p not in theirs]
        env = upload_working_dir_if_needed(env, include_gitignore=True, scratch_dir=scratch, logger=log)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"runtime.runtime_env: cannot ship {env.get('py_modules') or env.get('working_dir')}: "
                          f"{str(exc).splitlines()[0]}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    env.pop("excludes", None)
    return env


def on_cluster(address: str | None) -> bool:
    """Whether the driver is connected to a cluster (not an embedded single-node instance)."""
    if address and address != "local":
        return True
    import ray

    try:
        return sum(1 for n in ray.nodes() if n.get("Alive")) > 1
    except Exception:  # noqa: BLE001 - Ray Client without node info: assume a cluster
        return True


# Ray Client (ray://) does not pin packages uploaded after it connected (Ray 2.60 answers the
# pin call with UNIMPLEMENTED and the upload never returns), so through Ray Client fedray's
# code goes into the job's runtime_env when fedray opens the connection. Set while that
# connection is the current one.
_client_job_env: dict[str, Any] | None = None


def _client_connected() -> bool:
    try:
        from ray.util.client import ray as client_ray

        return bool(client_ray.is_connected())
    except Exception:  # noqa: BLE001 - Ray without the client module
        return False


def connect_for(ship: ShipSettings) -> bool:
    """Start or join Ray for a run (see :func:`fedray.runtime.connect.connect`); True if connected here.

    Through Ray Client the code to ship is given to ``ray.init`` as the job's
    ``runtime_env``; every actor of the job inherits it.
    """
    global _client_job_env
    import ray


    rt = ship
    if ray.is_initialized():
        return False
    target = resolve_address(rt.address)
    if target and target.startswith(CLIENT_PREFIX):
        env = merge_runtime_env(rt.runtime_env, [str(p) for p in code_paths(ship, on_cluster=True)])
        started = connect(rt.address, rt.num_cpus, **({"runtime_env": env} if env else {}))
        _client_job_env = env
        return started
    _client_job_env = None
    return connect(rt.address, rt.num_cpus)


def actor_runtime_env(ship: ShipSettings) -> dict[str, Any] | None:
    """The ``runtime_env`` to create fedray's actors with, uploading local paths (None: none needed)."""
    if _client_connected():
        if _client_job_env is not None:
            return None  # given to the job when fedray connected: the actors inherit it
        if ship.ship_code != "never" and (code_paths(ship, on_cluster=True) or ship.runtime_env):
            raise ConfigError("runtime.ship_code: code cannot be shipped through a Ray Client connection opened "
                              "before fedray; let fedray connect (runtime.address: ray://HOST:PORT), or pass the "
                              "runtime_env to ray.init yourself and set runtime.ship_code: never")
        return None
    return build_runtime_env(ship, on_cluster(ship.address))
