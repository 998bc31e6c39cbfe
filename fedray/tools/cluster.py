"""Offline checks of Ray cluster files: ``fedray cluster validate FILE ...``.

Two kinds of file are understood:

* **Ray cluster launcher** YAML (``ray up``; providers ``local``, ``aws``,
  ``gcp``, ...): unknown keys (at the top level, in ``provider`` where the
  provider is known, in each node type), ``head_node_type`` not among
  ``available_node_types``, ``min_workers > max_workers`` (per node type and
  summed against the global ``max_workers``), resource amounts that are not
  non-negative integers, the provider's required fields (also when they are
  null: GCP ``project_id``, AWS ``region``); then Ray's own offline checks
  (``prepare_config`` + ``validate_config``, as ``ray up`` runs them); then
  fedray's own needs: setup commands that install Ray (at the driver's
  version when pinned) and no ``pip install fedray`` from a package index
  (there is none: fedray ships itself, see :mod:`fedray.runtime.shipping`), and a
  worker node type (for the on-premises ``local`` provider: the worker start
  command) declaring the client-slot resource (``fedray_client``) that client
  actors ask for, so that they stay off a head node that does not declare it.
* **KubeRay** ``RayCluster`` manifests: what the KubeRay operator requires
  (``apiVersion: ray.io/v1``, ``kind: RayCluster``, ``headGroupSpec`` and
  ``workerGroupSpecs`` with ``rayStartParams`` whose values are strings, a
  container with an ``image`` and cpu and memory ``resources``), the Ray
  version of the images (``rayproject/ray:2.60.0-py311``) and ``rayVersion``
  equal to the installed Ray, unknown keys, ``minReplicas > maxReplicas``,
  ``replicas`` outside that range, duplicate group names, the client-slot
  resource in ``rayStartParams``, and no ``pip install`` in lifecycle hooks (a
  failing postStart hook gets the container killed, and it races ``ray
  start``) nor of fedray from an index.

No cloud credentials or network access are needed; the schema of Ray's
cluster launcher shipped with the installed ``ray`` package is used for the
deeper type checks when ``jsonschema`` is available.

This module holds the entry points and the command line; the checks live in
:mod:`fedray.tools.cluster_launcher` and :mod:`fedray.tools.cluster_kuberay`,
the :class:`Issue` type and shared helpers in :mod:`fedray.tools.cluster_issues`.
"""
from __future__ import annotations

import argparse
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from fedray.core.errors import ConfigError
from fedray.tools.cluster_issues import CLIENT_RESOURCE, Issue
from fedray.tools.cluster_kuberay import (
    HEAD_GROUP,
    RAYCLUSTER_SPEC,
    RAYCLUSTER_TOP,
    WORKER_GROUP,
    validate_raycluster,
)
from fedray.tools.cluster_launcher import (
    LAUNCHER_KEYS,
    LOCAL_ONLY_KEYS,
    NODE_TYPE_KEYS,
    PROVIDER_KEYS,
    PROVIDER_REQUIRED,
    validate_launcher,
)
from fedray.tools.cluster_security import validate_dockerfile

__all__ = ["CLIENT_RESOURCE", "HEAD_GROUP", "Issue", "LAUNCHER_KEYS", "LOCAL_ONLY_KEYS", "NODE_TYPE_KEYS",
           "PROVIDER_KEYS", "PROVIDER_REQUIRED", "RAYCLUSTER_SPEC", "RAYCLUSTER_TOP", "WORKER_GROUP", "add_cli",
           "cmd_init", "cmd_validate", "is_dockerfile", "validate", "validate_file"]


# --- entry points ----------------------------------------------------------------
def validate_file(path: str | Path, resource: str = CLIENT_RESOURCE) -> list[Issue]:
    """Check one cluster file; returns its issues (empty when the file is fine).

    A file may hold several YAML documents (a RayCluster and its NetworkPolicy); a
    file named ``Dockerfile`` (or ``*.Dockerfile``, ``Dockerfile.*``) is checked as
    an image recipe (:func:`fedray.tools.cluster_security.validate_dockerfile`).

    Raises
    ------
    ConfigError
        If the file does not exist, is not YAML, or is neither kind of cluster file.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"cluster file {str(p)!r} does not exist")
    if is_dockerfile(p):
        return validate_dockerfile(p)
    try:
        docs = [d for d in yaml.safe_load_all(p.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        raise ConfigError(f"cluster file {str(p)!r} is not valid YAML: {exc}") from None
    if not docs:
        raise ConfigError(f"cluster file {str(p)!r} is empty")
    main = [d for d in docs if not (isinstance(d, dict) and d.get("kind") in COMPANION_KINDS)]
    if len(main) != 1:
        raise ConfigError(f"cluster file {str(p)!r} holds {len(main)} cluster definitions; give one per file "
                          f"(besides {', '.join(COMPANION_KINDS)} documents)")
    return validate(main[0], resource, [d for d in docs if d is not main[0]])


#: Kubernetes documents that may sit beside a RayCluster in one file.
COMPANION_KINDS = ("NetworkPolicy", "Secret", "ServiceAccount")


def is_dockerfile(p: Path) -> bool:
    return p.name == "Dockerfile" or p.name.endswith(".Dockerfile") or (
        p.name.startswith("Dockerfile.") and not p.name.endswith(".dockerignore"))


def validate(doc: Any, resource: str = CLIENT_RESOURCE, others: list[Any] | tuple = ()) -> list[Issue]:
    """Check a parsed cluster file (launcher config or RayCluster manifest); ``others``: the other
    documents of its file (a RayCluster's NetworkPolicy)."""
    if not isinstance(doc, dict):
        raise ConfigError("a cluster file must hold a mapping at the top level")
    if doc.get("kind") == "RayCluster" or str(doc.get("apiVersion", "")).startswith("ray.io/"):
        return validate_raycluster(doc, resource, [d for d in others if isinstance(d, dict)])
    if "provider" in doc or "available_node_types" in doc:
        return validate_launcher(doc, resource)
    raise ConfigError("not a Ray cluster launcher file (no 'provider') nor a KubeRay RayCluster "
                      "(no 'kind: RayCluster')")


# --- command line -------------------------------------------------------------------
def cmd_validate(args: argparse.Namespace) -> int:
    files: list[Path] = []
    for f in args.files:
        p = Path(f)
        files.extend(sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml") or is_dockerfile(q))
                     if p.is_dir() else [p])
    if not files:
        raise ConfigError(f"no cluster files (*.yaml) in {args.files}")
    failed = 0
    for f in files:
        issues = validate_file(f, args.resource)
        errors = [i for i in issues if i.level == "error"]
        status = "FAILED" if errors else "ok"
        print(f"{f}: {status}" + (f" ({len(errors)} error(s))" if errors else ""))
        for i in issues:
            print(f"  {i}")
        failed += bool(errors)
    return 1 if failed else 0


def cmd_init(args: argparse.Namespace) -> int:
    """Copy the cluster files installed with fedray (launcher YAMLs, KubeRay manifest, Dockerfile) to DEST."""

    src = files("fedray.cluster_configs")
    names = sorted(f.name for f in src.iterdir() if f.name.endswith((".yaml", "Dockerfile")))
    if not names:
        raise ConfigError("this installation of fedray has no cluster files (fedray/cluster_configs)")
    dest = Path(args.dest)
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"cluster init: {str(dest)!r} is a file; give a folder")
    clash = [n for n in names if (dest / n).exists()]
    if clash and not args.force:
        raise ConfigError(f"cluster init: {str(dest)!r} already has {', '.join(clash)}; use --force to overwrite")
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        (dest / n).write_bytes(src.joinpath(n).read_bytes())
    print(f"{len(names)} files in {dest}: {', '.join(names)}")
    return 0


def add_cli(subparsers: Any) -> None:
    """Add ``fedray cluster validate`` and ``fedray cluster init`` to the command line."""
    c = subparsers.add_parser("cluster", help="Ray cluster files: offline checks")
    csub = c.add_subparsers(dest="cluster_command", required=True)
    v = csub.add_parser("validate", help="check cluster launcher YAMLs and KubeRay RayCluster manifests offline")
    v.add_argument("files", nargs="+", help="files or folders (all *.yaml and Dockerfiles in them)")
    v.add_argument("--resource", default=CLIENT_RESOURCE, help=f"client-slot resource name (default {CLIENT_RESOURCE})")
    v.set_defaults(func=cmd_validate)
    i = csub.add_parser("init", help="copy the cluster files installed with fedray (AWS, GCP, on-premises, "
                                     "KubeRay, Dockerfile) to a folder")
    i.add_argument("dest", nargs="?", default="cluster_configs", help="folder (default ./cluster_configs)")
    i.add_argument("--force", action="store_true", help="overwrite files already there")
    i.set_defaults(func=cmd_init)
