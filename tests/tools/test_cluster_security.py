"""The shipped cluster files are secure by default, and `fedray cluster validate` flags open ones.

Shipped: token authentication on, the dashboard on loopback, file mounts of what the run
needs only, restricted pods and a NetworkPolicy (KubeRay), a Dockerfile that copies the
package's folders only and takes its base image by digest (a placeholder that is flagged).
Open copies: each weakness gives its own warning, naming the key.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from fedray.tools.cli import main
from fedray.tools.cluster import validate, validate_file

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "cluster_configs"
YAMLS = sorted(FOLDER.glob("*.yaml"))
DIGEST = "sha256:" + "0123456789abcdef" * 4  # a well-formed digest for the parser, not a real image


def warnings(issues) -> list[str]:
    return [f"{i.where}: {i.message}" for i in issues if i.level == "warning"]


@pytest.mark.parametrize("path", YAMLS, ids=[f.name for f in YAMLS])
def test_shipped_cluster_files_validate_without_warnings(path):
    assert warnings(validate_file(path)) == []


def test_shipped_dockerfile_copies_the_package_only_and_flags_its_placeholder_digest():
    assert warnings(validate_file(FOLDER / "Dockerfile")) == [
        "line 21: base image digest of 'rayproject/ray:2.60.0-py311@sha256:REPLACE-WITH-THE-DIGEST-OF-THE-BASE-IMAGE'"
        " is a placeholder; fill in the real one (`docker buildx imagetools inspect IMAGE`)"]
    text = (FOLDER / "Dockerfile").read_text()
    copied = {m.group(1) for m in re.finditer(r"^COPY --chown=\S+ (\S+) /tmp/fedray-src/\S*$", text, re.M)}
    assert "." not in copied and not re.search(r"^(COPY|ADD)\s.*\s\.\s", text, re.M)
    # every folder the package is built from is copied (the image stays installable)
    tomllib = pytest.importorskip("tomllib")
    dirs = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    assert {d.split("/")[0] for d in dirs} <= copied
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert {".git", ".venv", ".env", "**/.env"} <= set(ignored)


def _launcher(name: str) -> dict:
    doc = yaml.safe_load((FOLDER / name).read_text())
    if name == "gcp.yaml":
        doc["provider"]["project_id"] = "fedray-test-1234"
    return doc


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml", "onprem.yaml"])
def test_open_launcher_files_get_each_warning(name):
    base = _launcher(name)
    assert warnings(validate(base)) == []
    open_dash = copy.deepcopy(base)
    open_dash["head_start_ray_commands"][-1] += " --dashboard-host=0.0.0.0"
    assert [w for w in warnings(validate(open_dash))] == [
        f"head_start_ray_commands[{len(base['head_start_ray_commands']) - 1}]: --dashboard-host=0.0.0.0 opens the "
        "dashboard and its job API (which run arbitrary code) on every interface; drop it (Ray binds 127.0.0.1) "
        "and reach the dashboard with `ray dashboard CLUSTER.yaml` (an SSH tunnel)"]
    no_auth = copy.deepcopy(base)
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        no_auth[key] = [c.replace("export RAY_AUTH_MODE=token; ", "") for c in no_auth[key]]
    got = warnings(validate(no_auth))
    assert [w.split(":")[0] for w in got] == ["head_start_ray_commands", "worker_start_ray_commands"], got
    assert all("without token authentication" in w for w in got)
    no_token = copy.deepcopy(base)
    del no_token["file_mounts"]["~/.ray/auth_token"]
    assert [w.split(":")[0] for w in warnings(validate(no_token))] == ["file_mounts"]
    whole = copy.deepcopy(base)
    whole["file_mounts"]["~/fedray"] = "."
    got = warnings(validate(whole))
    assert len(got) == 1 and got[0].startswith("file_mounts.~/fedray: '.' copies the whole folder"), got


def _kuberay() -> tuple[dict, list[dict]]:
    cluster, *others = yaml.safe_load_all((FOLDER / "kuberay.yaml").read_text())
    return cluster, others


@pytest.mark.parametrize("break_it, where, text", [
    (lambda d: d["spec"].pop("authOptions"), "spec.authOptions", "without token authentication"),
    (lambda d: d["spec"]["headGroupSpec"]["rayStartParams"].update({"dashboard-host": "0.0.0.0"}),
     "spec.headGroupSpec.rayStartParams.dashboard-host", "'0.0.0.0' opens the dashboard"),
    (lambda d: d["spec"]["headGroupSpec"]["rayStartParams"].pop("dashboard-host"),
     "spec.headGroupSpec.rayStartParams.dashboard-host", "unset: KubeRay binds the dashboard to 0.0.0.0"),
    (lambda d: d["spec"]["headGroupSpec"].update(serviceType="LoadBalancer"), "spec.headGroupSpec.serviceType",
     "exposed outside"),
    (lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].pop("securityContext"),
     "spec.workerGroupSpecs[0].template.spec.containers[0].securityContext", "not restricted"),
    (lambda d: d["spec"]["headGroupSpec"]["template"]["spec"].pop("securityContext"),
     "spec.headGroupSpec.template.spec.containers[0].securityContext", "not restricted"),
])
def test_open_raycluster_gets_each_warning(break_it, where, text):
    cluster, others = _kuberay()
    assert warnings(validate(cluster, others=others)) == []
    break_it(cluster)
    got = warnings(validate(cluster, others=others))
    assert len(got) == 1 and got[0].startswith(f"{where}: ") and text in got[0], got


def test_raycluster_env_auth_counts_and_network_policy_is_required():
    cluster, others = _kuberay()
    assert [w.split(":")[0] for w in warnings(validate(cluster))] == ["(file)"]  # no NetworkPolicy beside it
    open_policy = copy.deepcopy(others)
    open_policy[0]["spec"]["ingress"] = [{}]
    assert [w.split(":")[0] for w in warnings(validate(cluster, others=open_policy))] == ["NetworkPolicy.spec.ingress"]
    other_cluster = copy.deepcopy(others)
    other_cluster[0]["spec"]["podSelector"]["matchLabels"]["ray.io/cluster"] = "someone-else"
    assert "no NetworkPolicy selects" in " ".join(warnings(validate(cluster, others=other_cluster)))
    env = copy.deepcopy(cluster)
    del env["spec"]["authOptions"]
    for g in [env["spec"]["headGroupSpec"], *env["spec"]["workerGroupSpecs"]]:
        g["template"]["spec"]["containers"][0]["env"] = [{"name": "RAY_AUTH_MODE", "value": "token"}]
    assert warnings(validate(env, others=others)) == []


def test_open_dockerfiles_are_flagged(tmp_path, capsys):
    (tmp_path / "ctx").mkdir()
    df = tmp_path / "ctx" / "Dockerfile"
    df.write_text("FROM rayproject/ray:2.60.0-py311\nCOPY . /src\nRUN pip install /src\n")
    got = warnings(validate_file(df))
    assert len(got) == 2 and "taken by tag only" in got[0] and "no .dockerignore" in got[1], got
    (tmp_path / "ctx" / ".dockerignore").write_text(".git\n.venv\n")
    got = warnings(validate_file(df))
    assert got[-1] == "COPY: copies the whole build context but .dockerignore does not exclude .env", got
    (tmp_path / "ctx" / ".dockerignore").write_text(".git\n.venv\n**/.env\n")
    df.write_text(f"ARG BASE=rayproject/ray:2.60.0-py311@{DIGEST}\nFROM ${{BASE}}\nCOPY ./ /src\n")
    assert warnings(validate_file(df)) == []
    assert main(["cluster", "validate", str(tmp_path / "ctx")]) == 0  # folders include their Dockerfiles
    assert "Dockerfile: ok" in capsys.readouterr().out


def test_malformed_files_are_reported_not_a_traceback(tmp_path, capsys):
    """A bare FROM is an error on its line; FROM --platform=... names the image after the flag (its digest
    counts); COPY --from=STAGE . copies out of a stage, not the build context; a launcher file whose
    docker.run_options or start commands are a scalar, or a RayCluster whose env is not a list, get the
    schema's errors, not an IndexError or TypeError."""
    (tmp_path / "ctx").mkdir()
    df = tmp_path / "ctx" / "Dockerfile"
    df.write_text("FROM\nRUN true\n")
    assert [(i.level, i.where, i.message) for i in validate_file(df)] == [
        ("error", "line 1", "FROM names no base image")]
    df.write_text(f"FROM --platform=linux/amd64 rayproject/ray:2.60.0-py311@{DIGEST} AS build\n"
                  "FROM --platform=$BUILDPLATFORM rayproject/ray:2.60.0-py311\nCOPY --from=build . /src\n")
    got = warnings(validate_file(df))
    assert len(got) == 1 and got[0].startswith("line 2: base image 'rayproject/ray:2.60.0-py311' is taken by tag"), got
    launcher = yaml.safe_load((FOLDER / "aws.yaml").read_text())
    launcher["docker"] = {"image": "rayproject/ray:2.60.0", "run_options": 5}
    launcher["head_start_ray_commands"] = "ray start --head"
    (tmp_path / "l.yaml").write_text(yaml.safe_dump(launcher))
    assert main(["cluster", "validate", str(tmp_path / "l.yaml")]) == 1
    assert "docker.run_options: 5 is not of type 'array'" in capsys.readouterr().out
    rc = [d for d in yaml.safe_load_all((FOLDER / "kuberay.yaml").read_text()) if d.get("kind") == "RayCluster"][0]
    rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = 5
    (tmp_path / "rc.yaml").write_text(yaml.safe_dump(rc))
    assert main(["cluster", "validate", str(tmp_path / "rc.yaml")]) == 0  # authOptions still turn tokens on
    assert "rc.yaml: ok" in capsys.readouterr().out
