"""Offline checks of Ray cluster launcher YAML files (``ray up``; providers ``local``, ``aws``, ``gcp``, ...).

Unknown keys (at the top level, in ``provider`` where the provider is known, in each node
type), the provider's required fields, ``head_node_type`` among ``available_node_types``,
worker counts and resource amounts; for the on-premises ``local`` provider the ``ray start
--resources`` of the start commands; setup commands that install Ray at the driver's version
and no fedray from a package index; then Ray's launcher schema and Ray's own offline checks
(``prepare_config`` + ``validate_config``). Entry point: ``validate_launcher``, called by
:func:`fedray.tools.cluster.validate`.
"""
from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path
from typing import Any

from fedray.tools.cluster_issues import RAY_IMAGE_TAG, Issue, Report, check_workers_count, from_index, pip_targets
from fedray.tools.cluster_security import check_launcher

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

_RESOURCES_FLAG = re.compile(r"--resources[= ]\s*(['\"])(\{.*?\})\1")


def validate_launcher(doc: dict, resource: str) -> list[Issue]:
    r = Report()
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
    check_workers_count(r, doc.get("max_workers"), "max_workers")
    if ptype == "local":
        _check_local(r, doc, provider if isinstance(provider, dict) else {}, resource)
    else:
        _check_node_types(r, doc, resource)
    _check_launcher_installs(r, doc)
    check_launcher(r, doc)
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


def _ray_pins(commands: list[str]) -> list[str]:
    pins = []
    for c in commands:
        for t in pip_targets(c):
            m = re.match(r"^ray(?:\[[^\]]*\])?==([\w.]+)$", t)
            if m:
                pins.append(m.group(1))
    return pins


def _check_launcher_installs(r: Report, doc: dict) -> None:
    """Ray on the nodes (at the driver's version when pinned), and no fedray from a package index."""
    import ray

    for where, cmd in _launcher_command_items(doc):
        for t in pip_targets(cmd):
            if from_index(t) == "fedray":
                r.error(where, f"`pip install {t}` installs fedray from a package index, which has no fedray; "
                               "drop it (fedray ships itself to the nodes, runtime.ship_code) or install a copy "
                               "(`pip install ~/fedray` after file_mounts, or an image built from "
                               "cluster_configs/Dockerfile)")
    commands = [c for _, c in _launcher_command_items(doc)]
    docker = doc.get("docker") if isinstance(doc.get("docker"), dict) else {}
    image = str((docker or {}).get("image") or (docker or {}).get("head_image") or "")
    installs_ray = any(re.match(r"^ray(\[|=|>|<|~|$)", t) for c in commands for t in pip_targets(c))
    if not installs_ray and not image:
        r.error("setup_commands", "no setup command installs Ray on the nodes and no docker.image is given; add "
                                  f"`pip install \"ray[default]=={ray.__version__}\"` (plus fedray's dependencies, "
                                  "e.g. `pip install ~/fedray` after file_mounts)")
    for v in _ray_pins(commands):
        if v != ray.__version__:
            r.error("setup_commands", f"installs Ray {v} on the nodes but this machine has Ray {ray.__version__}; "
                                      "the driver and the cluster must run the same Ray version")
    m = RAY_IMAGE_TAG.search(image)
    if m and m.group("version") != ray.__version__:
        r.error("docker.image", f"{image!r} has Ray {m.group('version')} but this machine has Ray {ray.__version__}")


def _ray_checks(r: Report, doc: dict) -> None:
    """Ray's own offline checks of a launcher file (what `ray up` runs before it starts anything)."""
    try:
        from ray.autoscaler._private.util import prepare_config, validate_config
    except ImportError:  # pragma: no cover - Ray moved them; the checks above still apply
        return

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


def _check_node_types(r: Report, doc: dict, resource: str) -> None:
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
        check_workers_count(r, lo, f"{where}.min_workers")
        check_workers_count(r, hi, f"{where}.max_workers")
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
        r.error(
            "max_workers", f"max_workers={gmax} is less than the sum of min_workers of the worker types ({total_min})"
        )
    if not slots_on_workers:
        r.error("available_node_types", f"no worker node type declares the client-slot resource {resource!r} "
                                        f"(resources: {{{resource}: N}}); fedray's client actors ask for it "
                                        f"with runtime.client_resources.custom.{resource}")


def _check_local(r: Report, doc: dict, provider: dict, resource: str) -> None:
    if doc.get("available_node_types") or doc.get("head_node_type"):
        types = doc.get("available_node_types") or {}
        if set(types) != {"local.cluster.node"}:
            r.error("available_node_types", "not supported by the on-premises (local) provider; declare resources "
                                            "with `ray start --resources` in head/worker_start_ray_commands")
    lo, hi = doc.get("min_workers"), doc.get("max_workers")
    check_workers_count(r, lo, "min_workers")
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


def _declared(commands: Any, resource: str, r: Report, where: str) -> float:
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


def _schema_check(r: Report, doc: dict) -> None:
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
        if (
            err.validator == "additionalProperties"
            or where in seen
            or any(s.startswith(where + ".") for s in seen if where)
        ):
            continue  # unknown keys are reported above with a suggestion
        r.error(where or "(file)", f"{err.message} (Ray's cluster schema)")
