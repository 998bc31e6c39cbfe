"""Security checks of cluster files: who can reach Ray, and what reaches the nodes.

Ray's dashboard, job API and client server run arbitrary code for whoever reaches them,
so a cluster file is flagged (warnings) when:

* Ray's token authentication is off: launcher files whose ``ray start`` commands run
  without ``RAY_AUTH_MODE=token`` (or with no token reaching the nodes: a file mount of
  ``~/.ray/auth_token``, ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH``); RayCluster
  manifests without ``spec.authOptions.mode: token`` nor ``RAY_AUTH_MODE=token`` in every
  container;
* the dashboard listens on every interface (``--dashboard-host=0.0.0.0``; KubeRay's
  default when ``rayStartParams.dashboard-host`` is unset), or a KubeRay head service is
  exposed outside the Kubernetes cluster (``LoadBalancer``, ``NodePort``, ingress);
* ``file_mounts`` copy a whole folder (``.``, ``~``, ``/``) to every node, with whatever
  it holds (``.git``, ``.env``, credentials, outputs);
* a RayCluster's pods run without a restrictive ``securityContext``, or no NetworkPolicy in
  the same file limits who reaches them;
* a Dockerfile copies the whole build context without a ``.dockerignore`` that keeps
  ``.git``, ``.venv`` and ``.env`` out, or takes its base image by tag only (no
  ``@sha256:`` digest, or a placeholder one).

Entry points: :func:`check_launcher`, :func:`check_raycluster`, :func:`check_network_policies`,
:func:`validate_dockerfile`, called by :mod:`fedray.tools.cluster`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fedray.tools.cluster_issues import Issue, Report

_AUTH_ON = re.compile(r"\bRAY_AUTH_MODE\s*=\s*['\"]?token\b")
_TOKEN_SOURCE = re.compile(r"\bRAY_AUTH_TOKEN(_PATH)?\s*=")
_OPEN_HOSTS = {"0.0.0.0", "::", "[::]", "*", ""}
_DASHBOARD_HOST = re.compile(r"--dashboard-host(?:=|\s+)['\"]?([^\s'\";]*)")
_WHOLE = {".", "..", "~", "$HOME", "${HOME}", "/", ""}
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
#: What a .dockerignore must keep out of an image that copies the whole build context.
DOCKERIGNORE_MUST = (".git", ".venv", ".env")


def _items(value: Any) -> list[Any]:
    """A YAML value as a list: a list as it is, nothing for null, one item for anything else."""
    return value if isinstance(value, list) else [] if value is None or value == "" else [value]


def _launcher_commands(doc: dict, keys: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for key in keys:
        out.extend(str(c) for c in _items(doc.get(key)))
    docker = doc.get("docker") if isinstance(doc.get("docker"), dict) else {}
    for key in ("run_options", "head_run_options", "worker_run_options"):
        out.extend(str(o) for o in _items(docker.get(key)))
    return out


def check_launcher(r: Report, doc: dict) -> None:
    """Token authentication, the dashboard's interface and whole-folder mounts of a launcher file."""
    common = ("initialization_commands", "setup_commands")
    head = _launcher_commands(doc, (*common, "head_setup_commands", "head_start_ray_commands"))
    worker = _launcher_commands(doc, (*common, "worker_setup_commands", "worker_start_ray_commands"))
    for where, cmds in (("head_start_ray_commands", head), ("worker_start_ray_commands", worker)):
        if not any(_AUTH_ON.search(c) for c in cmds):
            r.warn(where, "Ray starts without token authentication: anyone who reaches the node's ports can run "
                          "code on the cluster; start Ray with `RAY_AUTH_MODE=token` (export it before `ray start`) "
                          "and mount the token (`~/.ray/auth_token: ~/.ray/auth_token` in file_mounts, made once "
                          "with `ray get-auth-token --generate`)")
    mounts = doc.get("file_mounts") if isinstance(doc.get("file_mounts"), dict) else {}
    has_token = any(str(k).rstrip("/").endswith(".ray/auth_token") for k in mounts) or any(
        _TOKEN_SOURCE.search(c) for c in head + worker)
    if any(_AUTH_ON.search(c) for c in head + worker) and not has_token:
        r.warn("file_mounts", "token authentication is on but no token reaches the nodes; mount it "
                              "(`~/.ray/auth_token: ~/.ray/auth_token`) or set RAY_AUTH_TOKEN_PATH")
    for i, cmd in enumerate(_launcher_commands(doc, ("head_start_ray_commands",))):
        for m in _DASHBOARD_HOST.finditer(cmd):
            if m.group(1) in _OPEN_HOSTS:
                r.warn(f"head_start_ray_commands[{i}]", f"--dashboard-host={m.group(1)} opens the dashboard and "
                                                        "its job API (which run arbitrary code) on every interface; "
                                                        "drop it (Ray binds 127.0.0.1) and reach the dashboard with "
                                                        "`ray dashboard CLUSTER.yaml` (an SSH tunnel)")
    for key in ("file_mounts", "cluster_synced_files"):
        _whole_mounts(r, key, doc.get(key))


def _whole_mounts(r: Report, key: str, value: Any) -> None:
    sources = (list(value.items()) if isinstance(value, dict) else
               [(str(v), v) for v in value] if isinstance(value, list) else [])
    for dest, src in sources:
        norm = str(src).strip().rstrip("/")
        if norm in _WHOLE or norm in ("./", "~/"):
            r.warn(f"{key}.{dest}", f"{src!r} copies the whole folder (with .git, any .env or credentials, "
                                    "outputs) to every node; mount only what the run needs (a folder with "
                                    "fedray's wheel and the experiment files, see docs/cluster.md)")


def _containers(group: Any) -> list[dict]:
    pod = ((group.get("template") or {}).get("spec") or {}) if isinstance(group, dict) else {}
    cs = pod.get("containers") if isinstance(pod, dict) else None
    return [c for c in cs if isinstance(c, dict)] if isinstance(cs, list) else []


def _env_auth(c: dict) -> bool:
    return any(isinstance(e, dict) and e.get("name") == "RAY_AUTH_MODE" and str(e.get("value")) == "token"
               for e in _items(c.get("env")))


def check_raycluster(r: Report, spec: dict) -> None:
    """Token authentication, the dashboard's interface and exposure, and pod hardening of a RayCluster."""
    head = spec.get("headGroupSpec") if isinstance(spec.get("headGroupSpec"), dict) else {}
    groups = [("spec.headGroupSpec", head)] + [
        (f"spec.workerGroupSpecs[{i}]", g) for i, g in enumerate(spec.get("workerGroupSpecs") or [])
        if isinstance(g, dict)]
    auth = spec.get("authOptions") if isinstance(spec.get("authOptions"), dict) else {}
    if auth.get("mode") != "token" and not all(_env_auth(c) for _, g in groups for c in _containers(g)[:1]):
        r.warn("spec.authOptions", "Ray runs without token authentication: any pod that reaches the head can run "
                                   "code on the cluster; set `authOptions: {mode: token}` (KubeRay >= 1.5.1) or "
                                   "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN from a Secret in every Ray container")
    params = head.get("rayStartParams") if isinstance(head.get("rayStartParams"), dict) else {}
    host = params.get("dashboard-host")
    if host is None or str(host).strip() in _OPEN_HOSTS:
        r.warn("spec.headGroupSpec.rayStartParams.dashboard-host",
               ("unset: KubeRay binds the dashboard to 0.0.0.0" if host is None else f"{host!r} opens the dashboard")
               + " and its job API (which run arbitrary code) to every pod; set '127.0.0.1' and reach it with "
                 "`kubectl port-forward`")
    if str(head.get("serviceType", "ClusterIP")) in ("LoadBalancer", "NodePort") or head.get("enableIngress"):
        r.warn("spec.headGroupSpec.serviceType", "the head's ports (dashboard, client, GCS) are exposed outside "
                                                 "the Kubernetes cluster; keep ClusterIP and use port forwarding")
    for where, g in groups:
        pod = ((g.get("template") or {}).get("spec") or {}) if isinstance(g.get("template"), dict) else {}
        psc = pod.get("securityContext") if isinstance(pod.get("securityContext"), dict) else {}
        for j, c in enumerate(_containers(g)):
            sc = c.get("securityContext") if isinstance(c.get("securityContext"), dict) else {}
            caps = (sc.get("capabilities") or {}).get("drop") or []
            if (sc.get("allowPrivilegeEscalation") is not False or not (sc.get("runAsNonRoot") or
                                                                       psc.get("runAsNonRoot"))
                    or "ALL" not in caps):
                r.warn(f"{where}.template.spec.containers[{j}].securityContext",
                       "not restricted: set runAsNonRoot: true, allowPrivilegeEscalation: false and "
                       "capabilities.drop: [ALL] (the Ray image runs as user 1000)")


def check_network_policies(r: Report, cluster: dict, others: list[dict]) -> None:
    """A NetworkPolicy in the same file selects the RayCluster's pods and limits their ingress."""
    name = str((cluster.get("metadata") or {}).get("name") or "")
    for pol in others:
        if not isinstance(pol, dict) or pol.get("kind") != "NetworkPolicy":
            continue
        spec = pol.get("spec") or {}
        labels = (spec.get("podSelector") or {}).get("matchLabels") or {}
        if labels and labels.get("ray.io/cluster") != name:  # empty: every pod of the namespace
            continue
        rules = spec.get("ingress")
        if "Ingress" not in (spec.get("policyTypes") or ["Ingress"]):
            continue
        if isinstance(rules, list) and any(not (rule or {}).get("from") for rule in rules):
            r.warn("NetworkPolicy.spec.ingress", "a rule without `from` lets every pod in; allow only the Ray "
                                                 "cluster's own pods")
        return
    r.warn("(file)", f"no NetworkPolicy selects the pods of RayCluster {name!r} (podSelector.matchLabels "
                     f"ray.io/cluster: {name}); any pod of the Kubernetes cluster reaches Ray's ports; add one "
                     "(see cluster_configs/kuberay.yaml)")


def validate_dockerfile(path: Path) -> list[Issue]:
    """A Dockerfile: no whole-context copy without a .dockerignore, a base image pinned by digest."""
    r = Report()
    text = path.read_text()
    args: dict[str, str] = {}
    lines = re.sub(r"\\\n", " ", text).splitlines()
    copies_all = False
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ARG" and "=" in rest:
            k, _, v = rest.strip().partition("=")
            args[k] = v.strip().strip("'\"")
        elif word == "FROM":
            names = [t for t in rest.split() if not t.startswith("--")]  # --platform=... is not the image
            if not names:
                r.error(f"line {n}", "FROM names no base image")
                continue
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), names[0])
            if "@" not in image:
                r.warn(f"line {n}", f"base image {image!r} is taken by tag only, which can change under you; pin "
                                    "it by digest (`image@sha256:...`, from `docker buildx imagetools inspect`)")
            elif not _DIGEST.search(image):
                r.warn(f"line {n}", f"base image digest of {image!r} is a placeholder; fill in the real one "
                                    "(`docker buildx imagetools inspect IMAGE`)")
        elif word in ("COPY", "ADD") and "--from=" not in rest:  # --from copies out of a stage, not the context
            srcs = [t for t in rest.split()[:-1] if not t.startswith("--")]
            copies_all = copies_all or any(s.rstrip("/") in (".", "") or s == "./" for s in srcs)
    if copies_all:
        _dockerignore(r, path)
    return r.issues


def _dockerignore(r: Report, path: Path) -> None:
    candidates = [path.with_name(path.name + ".dockerignore"), path.with_name(".dockerignore"),
                  path.parent.parent / ".dockerignore"]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        r.warn("COPY", "copies the whole build context and no .dockerignore keeps .git, .venv and any .env out "
                       "of the image; add one (see the repository's .dockerignore)")
        return
    rules = {ln.strip().lstrip("/").removeprefix("**/").rstrip("/") for ln in found.read_text().splitlines()}
    missing = [m for m in DOCKERIGNORE_MUST if m not in rules]
    if missing:
        r.warn("COPY", f"copies the whole build context but {found.name} does not exclude {', '.join(missing)}")
