"""Offline checks of KubeRay ``RayCluster`` manifests.

What the KubeRay operator requires (``apiVersion: ray.io/v1``, ``kind: RayCluster``,
``headGroupSpec`` and ``workerGroupSpecs`` with ``rayStartParams`` whose values are strings,
a container with an ``image`` and cpu and memory ``resources``), the Ray version of the images
and ``rayVersion`` equal to the installed Ray, unknown keys, replica counts, duplicate group
names, the client-slot resource in ``rayStartParams``, and no ``pip install`` in lifecycle
hooks nor of fedray from an index. Entry point: ``validate_raycluster``, called by
:func:`fedray.tools.cluster.validate`.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from fedray.tools.cluster_issues import (
    PIP_INSTALL,
    RAY_IMAGE_TAG,
    Issue,
    Report,
    check_workers_count,
    from_index,
    pip_targets,
)
from fedray.tools.cluster_security import check_network_policies, check_raycluster

RAYCLUSTER_TOP = {"apiVersion", "kind", "metadata", "spec"}
RAYCLUSTER_SPEC = {"rayVersion", "enableInTreeAutoscaling", "autoscalerOptions", "headGroupSpec", "workerGroupSpecs",
                   "headServiceAnnotations", "suspend", "managedBy", "gcsFaultToleranceOptions", "upgradeStrategy",
                   "authOptions"}
HEAD_GROUP = {"serviceType", "headService", "enableIngress", "rayStartParams", "template"}
WORKER_GROUP = {"groupName", "replicas", "minReplicas", "maxReplicas", "idleTimeoutSeconds", "suspend",
                "rayStartParams", "template", "scaleStrategy", "numOfHosts"}


def validate_raycluster(doc: dict, resource: str, others: list[dict] | tuple = ()) -> list[Issue]:
    r = Report()
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
            check_workers_count(r, v, f"{where}.{key}")
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
    check_raycluster(r, spec)
    check_network_policies(r, doc, others)
    return r.issues


def _check_ray_version_field(r: Report, spec: dict) -> None:
    import ray

    v = spec.get("rayVersion")
    if v is not None and str(v) != ray.__version__:
        r.error("spec.rayVersion", f"{v!r} differs from the Ray installed here ({ray.__version__}); the driver "
                                   "and the cluster must run the same Ray version")


def _check_start_params(r: Report, where: str, group: dict) -> None:
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


def _check_pods(r: Report, where: str, group: dict) -> None:
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
            m = RAY_IMAGE_TAG.search(str(image))
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
            targets = [t for t in pip_targets(command)]
            if targets or PIP_INSTALL.search(json.dumps(body)):
                what = " ".join(targets)
                extra = " (fedray is on no package index: it ships itself to the pods)" if any(
                    from_index(t) == "fedray" for t in targets) else ""
                r.error(f"{cw}.lifecycle.{hook}", f"runs `pip install {what}`{extra}; a failing hook gets the "
                                                  "container killed and it races `ray start`: bake packages into "
                                                  "the image (cluster_configs/Dockerfile) or list them in "
                                                  "runtime.runtime_env.pip")
        for key in ("command", "args"):
            for cmd in c.get(key) or []:
                for t in pip_targets(str(cmd)):
                    if from_index(t) == "fedray":
                        r.error(f"{cw}.{key}", f"`pip install {t}` installs fedray from a package index, which "
                                               "has no fedray; drop it: fedray ships itself to the pods "
                                               "(runtime.ship_code), or bake it in with cluster_configs/Dockerfile")


def _slots(r: Report, where: str, params: Any, resource: str) -> float:
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
