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
"""
from __future__ import annotations

import argparse
import copy
import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedray.core.errors import ConfigError

CLIENT_RESOURCE = "fedray_client"

LAUNCHER_KEYS = {
    "cluster_name", "max_workers", "upscaling_speed", "idle_timeout_minutes", "provider", "auth", "docker",
    "head_node_type", "file_mounts", "cluster_synced_files", "file_mounts_sync_continuously", "rsync_exclude",
    "rsync_filter", "metadata", "initialization_commands", "setup_commands", "head_setup_commands",
    "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands", "no_restart",
    "available_node_types",
}
LOCAL_ONLY_KEYS = {"min_workers"}  # the on-premises provider still reads a global min_workers
NODE_TYPE_KEYS = {"node_config", "min_workers", "max_workers", "idle_timeout_s", "priority", "resources", "labels",
                  "initialization_commands", "worker_setup_commands", "docker"}
PROVIDER_KEYS = {
    "local": {"type", "head_ip", "worker_ips", "coordinator_address", "external_head_ip"},
    "aws": {"type", "region", "availability_zone", "cache_stopped_nodes", "security_group", "use_internal_ips",
            "use_external_head_ip", "disable_launch_config_check", "vpc_id", "cloudwatch", "key_pair",
            "foreground_node_launch", "max_num_nodes_per_launch_request"},
    "gcp": {"type", "region", "availability_zone", "project_id", "cache_stopped_nodes", "use_internal_ips"},
}
PROVIDER_REQUIRED = {"aws": ("region",), "gcp": ("region", "availability_zone", "project_id")}

RAYCLUSTER_TOP = {"apiVersion", "kind", "metadata", "spec"}
RAYCLUSTER_SPEC = {"rayVersion", "enableInTreeAutoscaling", "autoscalerOptions", "headGroupSpec", "workerGroupSpecs",
                   "headServiceAnnotations", "suspend", "managedBy", "gcsFaultToleranceOptions", "upgradeStrategy",
                   "authOptions"}
HEAD_GROUP = {"serviceType", "headService", "enableIngress", "rayStartParams", "template"}
WORKER_GROUP = {"groupName", "replicas", "minReplicas", "maxReplicas", "idleTimeoutSeconds", "suspend",
                "rayStartParams", "template", "scaleStrategy", "numOfHosts"}

_PIP = re.compile(r"(?:\buv\s+)?\bpip3?\s+install\b([^\n;&|]*)", re.IGNORECASE)
_RAY_IMAGE_TAG = re.compile(r"(?:^|/)ray(?:-ml|-llm)?:(?P<version>\d+\.\d+\.\d+)(?:-(?P<rest>[\w.-]+))?$")
_RESOURCES_FLAG = re.compile(r"--resources[= ]\s*(['\"])(\{.*?\})\1")


@dataclass(frozen=True)
class Issue:
    """One finding: ``level`` is ``"error"`` or ``"warning"``; ``where`` a dotted path in the file."""

    level: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.where}: {self.message}" if self.where else f"{self.level}: {self.message}"


class _Report:
    def __init__(self) -> None:
        self.issues: list[Issue] = []

    def error(self, where: str, message: str) -> None:
        self.issues.append(Issue("error", where, message))

    def warn(self, where: str, message: str) -> None:
        self.issues.append(Issue("warning", where, message))

    def unknown_keys(self, where: str, mapping: Any, allowed: set[str]) -> None:
        if not isinstance(mapping, dict):
            self.error(where, f"must be a mapping; got {type(mapping).__name__}")
            return
        for key in mapping:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; allowed: {', '.join(sorted(allowed))}"
                self.error(f"{where}.{key}" if where else str(key), f"unknown key {key!r}{hint}")


# --- entry points ----------------------------------------------------------------
def validate_file(path: str | Path, resource: str = CLIENT_RESOURCE) -> list[Issue]:
    """Check one cluster file; returns its issues (empty when the file is fine).

    Raises
    ------
    ConfigError
        If the file does not exist, is not YAML, or is neither kind of cluster file.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"cluster file {str(p)!r} does not exist")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"cluster file {str(p)!r} is not valid YAML: {exc}") from None
    return validate(doc, resource)


def validate(doc: Any, resource: str = CLIENT_RESOURCE) -> list[Issue]:
    """Check a parsed cluster file (launcher config or RayCluster manifest)."""
    if not isinstance(doc, dict):
        raise ConfigError("a cluster file must hold a mapping at the top level")
    if doc.get("kind") == "RayCluster" or str(doc.get("apiVersion", "")).startswith("ray.io/"):
        return _validate_raycluster(doc, resource)
    if "provider" in doc or "available_node_types" in doc:
        return _validate_launcher(doc, resource)
    raise ConfigError("not a Ray cluster launcher file (no 'provider') nor a KubeRay RayCluster "
                      "(no 'kind: RayCluster')")


# --- cluster launcher ----------------------------------------------------------------
def _validate_launcher(doc: dict, resource: str) -> list[Issue]:
    r = _Report()
    provider = doc.get("provider")
    ptype = provider.get("type") if isinstance(provider, dict) else None
    r.unknown_keys("", doc, LAUNCHER_KEYS | (LOCAL_ONLY_KEYS if ptype == "local" else set()))
    if not isinstance(provider, dict) or not ptype:
        r.error("provider", "missing; give at least provider.type (local, aws, gcp, azure, ...)")
    elif ptype in PROVIDER_KEYS:
        r.unknown_keys("provider", provider, PROVIDER_KEYS[ptype])
        for key in PROVIDER_REQUIRED.get(ptype, ()):
            if key not in provider:
                r.error(f"provider.{key}", f"required for provider type {ptype!r}")
            elif provider[key] is None or (isinstance(provider[key], str) and not provider[key].strip()):
                r.error(f"provider.{key}", f"is {'null' if provider[key] is None else 'empty'}; set it "
                                          f"({_REQUIRED_HINT.get((ptype, key), 'required')})")
        pid = provider.get("project_id")
        if ptype == "gcp" and isinstance(pid, str) and pid.strip() and not _GCP_PROJECT.match(pid):
            r.error("provider.project_id", f"{pid!r} is not a GCP project id (6-30 lowercase letters, digits or "
                                           "hyphens, starting with a letter)")
        if ptype == "local" and "coordinator_address" not in provider:
            if not provider.get("head_ip"):
                r.error("provider.head_ip", "required for an on-premises cluster (or give coordinator_address)")
            if not isinstance(provider.get("worker_ips"), list):
                r.error("provider.worker_ips", "must be a list of worker addresses")
    _check_workers_count(r, doc.get("max_workers"), "max_workers")
    if ptype == "local":
        _check_local(r, doc, provider if isinstance(provider, dict) else {}, resource)
    else:
        _check_node_types(r, doc, resource)
    _check_launcher_installs(r, doc)
    _schema_check(r, doc)
    if not any(i.level == "error" for i in r.issues):
        _ray_checks(r, doc)
    return r.issues


_REQUIRED_HINT = {
    ("gcp", "project_id"): "your GCP project id, e.g. from `gcloud config get-value project`",
    ("gcp", "region"): "e.g. us-west1",
    ("gcp", "availability_zone"): "e.g. us-west1-a",
    ("aws", "region"): "e.g. us-west-2",
}
_GCP_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")


def _pip_targets(command: str) -> list[str]:
    """Requirement arguments of every ``pip install`` in a shell command (options dropped)."""
    out: list[str] = []
    for m in _PIP.finditer(command):
        skip = False
        for tok in m.group(1).split():
            tok = tok.strip("'\"")
            if skip:
                skip = False
                continue
            if tok in ("-r", "-c", "-e", "--requirement", "--constraint", "-i", "--index-url", "--extra-index-url",
                       "-f", "--find-links", "--target", "-t", "--prefix", "--root", "--editable"):
                skip = tok not in ("-e", "--editable")  # -e takes the path that follows: keep it
                continue
            if tok.startswith("-") or not tok:
                continue
            out.append(tok)
    return out


def _from_index(target: str) -> str | None:
    """The project name when ``target`` is a requirement fetched from a package index, else None."""
    if any(c in target for c in "/\\~$") or target.startswith(".") or "://" in target or target.endswith(
            (".whl", ".tar.gz", ".zip")):
        return None  # a path, a URL or an archive
    m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)", target)
    return m.group(1).lower().replace("_", "-") if m else None


def _ray_pins(commands: list[str]) -> list[str]:
    pins = []
    for c in commands:
        for t in _pip_targets(c):
            m = re.match(r"^ray(?:\[[^\]]*\])?==([\w.]+)$", t)
            if m:
                pins.append(m.group(1))
    return pins


def _check_launcher_installs(r: _Report, doc: dict) -> None:
    """Ray on the nodes (at the driver's version when pinned), and no fedray from a package index."""
    import ray

    for where, cmd in _launcher_command_items(doc):
        for t in _pip_targets(cmd):
            if _from_index(t) == "fedray":
                r.error(where, f"`pip install {t}` installs fedray from a package index, which has no fedray; "
                               "drop it (fedray ships itself to the nodes, runtime.ship_code) or install a copy "
                               "(`pip install ~/fedray` after file_mounts, or an image built from "
                               "cluster_configs/Dockerfile)")
    commands = [c for _, c in _launcher_command_items(doc)]
    docker = doc.get("docker") if isinstance(doc.get("docker"), dict) else {}
    image = str((docker or {}).get("image") or (docker or {}).get("head_image") or "")
    installs_ray = any(re.match(r"^ray(\[|=|>|<|~|$)", t) for c in commands for t in _pip_targets(c))
    if not installs_ray and not image:
        r.error("setup_commands", "no setup command installs Ray on the nodes and no docker.image is given; add "
                                  f"`pip install \"ray[default]=={ray.__version__}\"` (plus fedray's dependencies, "
                                  "e.g. `pip install ~/fedray` after file_mounts)")
    for v in _ray_pins(commands):
        if v != ray.__version__:
            r.error("setup_commands", f"installs Ray {v} on the nodes but this machine has Ray {ray.__version__}; "
                                      "the driver and the cluster must run the same Ray version")
    m = _RAY_IMAGE_TAG.search(image)
    if m and m.group("version") != ray.__version__:
        r.error("docker.image", f"{image!r} has Ray {m.group('version')} but this machine has Ray {ray.__version__}")


def _ray_checks(r: _Report, doc: dict) -> None:
    """Ray's own offline checks of a launcher file (what `ray up` runs before it starts anything)."""
    try:
        from ray.autoscaler._private.util import prepare_config, validate_config
    except ImportError:  # pragma: no cover - Ray moved them; the checks above still apply
        return
    import logging

    quiet = logging.getLogger("ray.autoscaler")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # prepare_config logs what it fills in
    try:
        validate_config(prepare_config(copy.deepcopy(doc)))
    except Exception as exc:  # noqa: BLE001 - Ray raises ValueError, jsonschema errors, KeyError, ...
        text = str(getattr(exc, "message", None) or exc).strip().splitlines()
        r.error("(file)", f"Ray's own check (prepare_config + validate_config) fails: "
                          f"{type(exc).__name__}: {text[0] if text else ''}")
    finally:
        quiet.setLevel(level)


def _check_workers_count(r: _Report, value: Any, where: str) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        r.error(where, f"must be a non-negative integer; got {value!r}")


def _check_node_types(r: _Report, doc: dict, resource: str) -> None:
    types = doc.get("available_node_types")
    head = doc.get("head_node_type")
    if not isinstance(types, dict) or not types:
        r.error("available_node_types", "missing or empty; declare a head node type and worker node types")
        return
    if head is None:
        r.error("head_node_type", "missing; it must name one of available_node_types")
    elif head not in types:
        r.error("head_node_type", f"{head!r} is not among available_node_types ({', '.join(map(str, types))})")
    total_min = 0
    slots_on_workers = False
    for name, nt in types.items():
        where = f"available_node_types.{name}"
        r.unknown_keys(where, nt, NODE_TYPE_KEYS)
        if not isinstance(nt, dict):
            continue
        for key in ("resources", "node_config"):
            if key not in nt:
                r.error(f"{where}.{key}", "required")
        lo, hi = nt.get("min_workers", 0), nt.get("max_workers")
        _check_workers_count(r, lo, f"{where}.min_workers")
        _check_workers_count(r, hi, f"{where}.max_workers")
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            r.error(f"{where}.min_workers", f"min_workers={lo} is more than max_workers={hi}")
        if name != head and isinstance(lo, int):
            total_min += lo
        res = nt.get("resources") or {}
        if not isinstance(res, dict):
            r.error(f"{where}.resources", "must be a mapping of resource names to amounts")
            continue
        for key, amount in res.items():
            if not isinstance(amount, int) or isinstance(amount, bool) or amount < 0:
                r.error(f"{where}.resources.{key}", f"must be a non-negative integer; got {amount!r}")
        amount = res.get(resource, 0)
        if name == head and isinstance(amount, int) and amount > 0:
            r.warn(f"{where}.resources.{resource}", f"the head node declares {amount} client slots, so client "
                                                    "actors may run on it; set 0 to keep clients off the head")
        if name != head and isinstance(amount, int) and amount > 0:
            slots_on_workers = True
    gmax = doc.get("max_workers")
    if isinstance(gmax, int) and total_min > gmax:
        r.error("max_workers", f"max_workers={gmax} is less than the sum of min_workers of the worker types ({total_min})")
    if not slots_on_workers:
        r.error("available_node_types", f"no worker node type declares the client-slot resource {resource!r} "
                                        f"(resources: {{{resource}: N}}); fedray's client actors ask for it "
                                        f"with runtime.client_resources.custom.{resource}")


def _check_local(r: _Report, doc: dict, provider: dict, resource: str) -> None:
    if doc.get("available_node_types") or doc.get("head_node_type"):
        types = doc.get("available_node_types") or {}
        if set(types) != {"local.cluster.node"}:
            r.error("available_node_types", "not supported by the on-premises (local) provider; declare resources "
                                            "with `ray start --resources` in head/worker_start_ray_commands")
    lo, hi = doc.get("min_workers"), doc.get("max_workers")
    _check_workers_count(r, lo, "min_workers")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        r.error("min_workers", f"min_workers={lo} is more than max_workers={hi}")
    n_ips = len(provider.get("worker_ips") or []) if isinstance(provider.get("worker_ips"), list) else None
    if n_ips is not None and isinstance(lo, int) and lo > n_ips and "coordinator_address" not in provider:
        r.error("min_workers", f"min_workers={lo} is more than the {n_ips} provider.worker_ips")
    worker = _declared(doc.get("worker_start_ray_commands"), resource, r, "worker_start_ray_commands")
    head = _declared(doc.get("head_start_ray_commands"), resource, r, "head_start_ray_commands")
    if not worker:
        r.error("worker_start_ray_commands", f"no `ray start --resources='{{\"{resource}\": N}}'` on the workers; "
                                             f"fedray's client actors ask for the {resource!r} resource")
    if head:
        r.warn("head_start_ray_commands", f"the head declares {head} {resource!r} slots; client actors may run on it")


def _declared(commands: Any, resource: str, r: _Report, where: str) -> float:
    total = 0.0
    for cmd in commands or []:
        for m in _RESOURCES_FLAG.finditer(str(cmd)):
            try:
                res = json.loads(m.group(2))
            except json.JSONDecodeError:
                r.error(where, f"--resources is not valid JSON: {m.group(2)}")
                continue
            total += float(res.get(resource, 0) or 0)
    return total


def _launcher_command_items(doc: dict) -> list[tuple[str, str]]:
    """(dotted key, command) for every setup and start command of a launcher file."""
    out: list[tuple[str, str]] = []
    for key in ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                "head_start_ray_commands", "worker_start_ray_commands"):
        cmds = doc.get(key) or []
        for i, c in enumerate(cmds if isinstance(cmds, list) else [cmds]):
            out.append((f"{key}[{i}]", str(c)))
    types = doc.get("available_node_types")
    for name, nt in (types.items() if isinstance(types, dict) else ()):
        if isinstance(nt, dict):
            for key in ("initialization_commands", "worker_setup_commands"):
                for i, c in enumerate(nt.get(key) or []):
                    out.append((f"available_node_types.{name}.{key}[{i}]", str(c)))
    return out


def _schema_check(r: _Report, doc: dict) -> None:
    """Ray's own launcher schema (type errors the checks above do not name)."""
    try:
        import jsonschema
        import ray.autoscaler

        schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    except Exception:  # noqa: BLE001 - no Ray or no jsonschema: the checks above still apply
        return
    validator = jsonschema.Draft7Validator(schema)
    seen = {i.where for i in r.issues}
    for err in validator.iter_errors(doc):
        where = ".".join(str(p) for p in err.absolute_path)
        if err.validator == "additionalProperties" or where in seen or any(s.startswith(where + ".") for s in seen if where):
            continue  # unknown keys are reported above with a suggestion
        r.error(where or "(file)", f"{err.message} (Ray's cluster schema)")


# --- KubeRay --------------------------------------------------------------------------
def _validate_raycluster(doc: dict, resource: str) -> list[Issue]:
    r = _Report()
    r.unknown_keys("", doc, RAYCLUSTER_TOP)
    if doc.get("kind") != "RayCluster":
        r.error("kind", f"must be 'RayCluster'; got {doc.get('kind')!r}")
    if doc.get("apiVersion") != "ray.io/v1":
        r.error("apiVersion", f"must be 'ray.io/v1' (KubeRay >= 1.0); got {doc.get('apiVersion')!r}")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        r.error("spec", "missing")
        return r.issues
    r.unknown_keys("spec", spec, RAYCLUSTER_SPEC)
    _check_ray_version_field(r, spec)
    head = spec.get("headGroupSpec")
    if not isinstance(head, dict):
        r.error("spec.headGroupSpec", "missing")
    else:
        r.unknown_keys("spec.headGroupSpec", head, HEAD_GROUP)
        _check_pods(r, "spec.headGroupSpec", head)
        _check_start_params(r, "spec.headGroupSpec", head)
        amount = _slots(r, "spec.headGroupSpec.rayStartParams", head.get("rayStartParams"), resource)
        if amount > 0:
            r.warn("spec.headGroupSpec.rayStartParams.resources",
                   f"the head declares {amount:g} {resource!r} slots, so client actors may run on it")
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list) or not groups:
        r.error("spec.workerGroupSpecs", "missing or empty; add a worker group for the client actors")
        groups = []
    names: set[str] = set()
    slots = 0.0
    for i, g in enumerate(groups):
        where = f"spec.workerGroupSpecs[{i}]"
        r.unknown_keys(where, g, WORKER_GROUP)
        if not isinstance(g, dict):
            continue
        name = g.get("groupName")
        if not name:
            r.error(f"{where}.groupName", "required")
        elif name in names:
            r.error(f"{where}.groupName", f"duplicate group name {name!r}")
        names.add(str(name))
        lo, hi, n = g.get("minReplicas", 0), g.get("maxReplicas"), g.get("replicas")
        for key, v in (("minReplicas", lo), ("maxReplicas", hi), ("replicas", n)):
            _check_workers_count(r, v, f"{where}.{key}")
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            r.error(f"{where}.minReplicas", f"minReplicas={lo} is more than maxReplicas={hi}")
        elif isinstance(n, int) and isinstance(lo, int) and isinstance(hi, int) and not lo <= n <= hi:
            r.error(f"{where}.replicas", f"replicas={n} is outside [minReplicas={lo}, maxReplicas={hi}]")
        _check_pods(r, where, g)
        _check_start_params(r, where, g)
        slots += _slots(r, f"{where}.rayStartParams", g.get("rayStartParams"), resource)
    if groups and slots <= 0:
        r.error("spec.workerGroupSpecs", f"no worker group declares the client-slot resource {resource!r} "
                                         f"(rayStartParams.resources: '\"{{\\\"{resource}\\\": N}}\"')")
    return r.issues


def _check_ray_version_field(r: _Report, spec: dict) -> None:
    import ray

    v = spec.get("rayVersion")
    if v is not None and str(v) != ray.__version__:
        r.error("spec.rayVersion", f"{v!r} differs from the Ray installed here ({ray.__version__}); the driver "
                                   "and the cluster must run the same Ray version")


def _check_start_params(r: _Report, where: str, group: dict) -> None:
    params = group.get("rayStartParams")
    if params is None:
        r.error(f"{where}.rayStartParams", "required by KubeRay (a mapping of `ray start` options; {} for none)")
        return
    if not isinstance(params, dict):
        return  # reported by _slots
    for key, value in params.items():
        if not isinstance(value, str):
            r.error(f"{where}.rayStartParams.{key}", f"must be a string (KubeRay's rayStartParams is a map of "
                                                     f"strings); got {value!r}, write '{value}' in quotes")


def _check_pods(r: _Report, where: str, group: dict) -> None:
    """Containers: an image of the installed Ray version, cpu and memory resources, no pip in hooks."""
    import ray

    pod = ((group.get("template") or {}).get("spec") or {}) if isinstance(group.get("template"), dict) else {}
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not containers or not isinstance(containers, list):
        r.error(f"{where}.template.spec.containers", "missing; a Ray pod needs a container")
        return
    for j, c in enumerate(containers):
        cw = f"{where}.template.spec.containers[{j}]"
        if not isinstance(c, dict):
            r.error(cw, "must be a mapping")
            continue
        image = c.get("image")
        if not image:
            r.error(f"{cw}.image", "required (e.g. rayproject/ray:" + ray.__version__ + "-py311)")
        if j == 0 and image:
            m = _RAY_IMAGE_TAG.search(str(image))
            if m and m.group("version") != ray.__version__:
                r.error(f"{cw}.image", f"{image!r} has Ray {m.group('version')} but this machine has Ray "
                                       f"{ray.__version__}; use rayproject/ray:{ray.__version__}-py"
                                       f"{sys.version_info[0]}{sys.version_info[1]}")
            elif m and m.group("rest") and m.group("rest").startswith("py"):
                py = m.group("rest").split("-")[0][2:]
                here = f"{sys.version_info[0]}{sys.version_info[1]}"
                if py != here:
                    r.warn(f"{cw}.image", f"the image has Python {py[0]}.{py[1:]} and this machine Python "
                                          f"{sys.version_info[0]}.{sys.version_info[1]}; a driver connecting "
                                          "with ray:// needs the same Python minor version")
            elif not m:
                r.warn(f"{cw}.image", f"cannot read a Ray version from {image!r}; it must hold Ray "
                                      f"{ray.__version__} (see cluster_configs/Dockerfile)")
        res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
        if j == 0:
            amounts = {**(res.get("requests") or {}), **(res.get("limits") or {})}
            missing = [k for k in ("cpu", "memory") if k not in amounts]
            if missing:
                r.error(f"{cw}.resources", f"no {' and '.join(missing)} in requests or limits; KubeRay sizes Ray's "
                                           "CPUs and memory from the container's resources")
        hooks = c.get("lifecycle") if isinstance(c.get("lifecycle"), dict) else {}
        for hook, body in hooks.items():
            command = " ".join(str(x) for x in (((body or {}).get("exec") or {}).get("command") or [])) \
                if isinstance(body, dict) else str(body)
            targets = [t for t in _pip_targets(command)]
            if targets or _PIP.search(json.dumps(body)):
                what = " ".join(targets)
                extra = " (fedray is on no package index: it ships itself to the pods)" if any(
                    _from_index(t) == "fedray" for t in targets) else ""
                r.error(f"{cw}.lifecycle.{hook}", f"runs `pip install {what}`{extra}; a failing hook gets the "
                                                  "container killed and it races `ray start`: bake packages into "
                                                  "the image (cluster_configs/Dockerfile) or list them in "
                                                  "runtime.runtime_env.pip")
        for key in ("command", "args"):
            for cmd in c.get(key) or []:
                for t in _pip_targets(str(cmd)):
                    if _from_index(t) == "fedray":
                        r.error(f"{cw}.{key}", f"`pip install {t}` installs fedray from a package index, which "
                                               "has no fedray; drop it: fedray ships itself to the pods "
                                               "(runtime.ship_code), or bake it in with cluster_configs/Dockerfile")


def _slots(r: _Report, where: str, params: Any, resource: str) -> float:
    if not params:
        return 0.0
    if not isinstance(params, dict):
        r.error(where, "must be a mapping of `ray start` options to strings")
        return 0.0
    raw = params.get("resources")
    if raw is None:
        return 0.0
    text = str(raw).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    try:
        res = json.loads(text.replace('\\"', '"'))
    except json.JSONDecodeError:
        r.error(f"{where}.resources", f"not valid JSON: {raw!r} (write it as '\"{{\\\"{resource}\\\": 4}}\"')")
        return 0.0
    return float(res.get(resource, 0) or 0) if isinstance(res, dict) else 0.0


# --- command line -------------------------------------------------------------------
def cmd_validate(args: argparse.Namespace) -> int:
    files: list[Path] = []
    for f in args.files:
        p = Path(f)
        files.extend(sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml")) if p.is_dir() else [p])
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
    from importlib.resources import files

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
    v.add_argument("files", nargs="+", help="files or folders (all *.yaml in them)")
    v.add_argument("--resource", default=CLIENT_RESOURCE, help=f"client-slot resource name (default {CLIENT_RESOURCE})")
    v.set_defaults(func=cmd_validate)
    i = csub.add_parser("init", help="copy the cluster files installed with fedray (AWS, GCP, on-premises, "
                                     "KubeRay, Dockerfile) to a folder")
    i.add_argument("dest", nargs="?", default="cluster_configs", help="folder (default ./cluster_configs)")
    i.add_argument("--force", action="store_true", help="overwrite files already there")
    i.set_defaults(func=cmd_init)
