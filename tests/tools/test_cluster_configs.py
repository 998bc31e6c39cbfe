"""Every file in cluster_configs/ validates offline (gcp.yaml once its project id is set); broken copies
fail with messages naming the key: Ray's own launcher checks, null required provider fields, what
KubeRay requires of a RayCluster, the Ray version of images and pins, and installs of fedray from a
package index (it ships itself) or pip in a pod's lifecycle hook."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from fedray.core.errors import ConfigError
from fedray.tools.cli import main
from fedray.tools.cluster import validate, validate_file

FOLDER = Path(__file__).resolve().parents[2] / "cluster_configs"
FILES = sorted(FOLDER.glob("*.yaml"))
LAUNCHER = [f for f in FILES if "provider" in next(yaml.safe_load_all(f.read_text()))]


def load(name: str) -> dict:
    """The file's cluster definition (a RayCluster file also holds its NetworkPolicy)."""
    doc = next(yaml.safe_load_all((FOLDER / name).read_text()))
    if name == "gcp.yaml":  # the template leaves the project id to the user (tested below)
        doc["provider"]["project_id"] = "fedray-test-1234"
    return doc


def errors(doc: dict) -> list[str]:
    return [str(i) for i in validate(doc) if i.level == "error"]


def test_folder_has_the_four_kinds():
    docs = [load(f.name) for f in FILES]
    providers = {d["provider"]["type"] for d in docs if "provider" in d}
    assert {"local", "aws", "gcp"} <= providers
    assert any(d.get("kind") == "RayCluster" for d in docs)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_cluster_file_validates(path):
    assert errors(load(path.name)) == []


def test_null_required_provider_fields_are_errors():
    # the shipped GCP template: Ray's own checks accept project_id: null, fedray does not
    msgs = [str(i) for i in validate_file(FOLDER / "gcp.yaml") if i.level == "error"]
    assert msgs == ["error: provider.project_id: is null; set it (your GCP project id, e.g. from "
                    "`gcloud config get-value project`)"]
    doc = load("gcp.yaml")
    doc["provider"]["project_id"] = "My Project"
    assert any("provider.project_id: 'My Project' is not a GCP project id" in m for m in errors(doc))
    aws = load("aws.yaml")
    aws["provider"]["region"] = None
    assert any(m.startswith("error: provider.region: is null") for m in errors(aws)), errors(aws)


def test_rays_own_checks_run():
    doc = load("aws.yaml")
    doc["docker"] = {"image": f"rayproject/ray:{ray_version()}"}  # no container_name: Ray's check rejects it
    assert any("Ray's own check (prepare_config + validate_config) fails" in m and "container" in m
               for m in errors(doc)), errors(doc)


def ray_version() -> str:
    import ray

    return ray.__version__


@pytest.mark.parametrize("path", LAUNCHER, ids=[f.name for f in LAUNCHER])
def test_launcher_files_pass_rays_own_offline_checks(path):
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(load(path.name)))


def test_unknown_key_is_named_with_a_suggestion():
    doc = load("aws.yaml")
    doc["max_worker"] = doc.pop("max_workers")
    msgs = errors(doc)
    assert any("max_worker: unknown key 'max_worker'; did you mean 'max_workers'?" in m for m in msgs), msgs
    doc = load("aws.yaml")
    doc["available_node_types"]["ray.worker.cpu"]["min_worker"] = 1
    assert any("available_node_types.ray.worker.cpu.min_worker: unknown key" in m for m in errors(doc))


def test_head_type_not_among_node_types():
    doc = load("gcp.yaml")
    doc["head_node_type"] = "ray_head_gpu"
    msgs = errors(doc)
    assert any("head_node_type: 'ray_head_gpu' is not among available_node_types "
               "(ray_head_default, ray_worker_cpu)" in m for m in msgs), msgs


def test_more_min_workers_than_max():
    doc = load("aws.yaml")
    doc["available_node_types"]["ray.worker.cpu"].update(min_workers=9, max_workers=4)
    msgs = errors(doc)
    assert any("ray.worker.cpu.min_workers: min_workers=9 is more than max_workers=4" in m for m in msgs), msgs
    doc = load("onprem.yaml")
    doc["min_workers"] = 3
    assert any("min_workers=3 is more than max_workers=2" in m for m in errors(doc))
    kr = load("kuberay.yaml")
    kr["spec"]["workerGroupSpecs"][0].update(minReplicas=5, maxReplicas=2)
    assert any("workerGroupSpecs[0].minReplicas: minReplicas=5 is more than maxReplicas=2" in m for m in errors(kr))


def test_installs_ray_but_not_fedray_from_an_index():
    doc = load("aws.yaml")
    doc["setup_commands"] = ["sudo apt-get update", "python3 -m pip install -q ray[default] fedray"]
    msgs = errors(doc)
    assert any(m.startswith("error: setup_commands[1]: `pip install fedray` installs fedray from a package index")
               for m in msgs), msgs
    doc["setup_commands"] = ["python3 -m pip install -q scikit-learn"]
    assert any("setup_commands: no setup command installs Ray on the nodes" in m for m in errors(doc))
    doc["setup_commands"] = ['pip install "ray[default]==2.9.3" ~/fedray']
    assert any("installs Ray 2.9.3 on the nodes but this machine has Ray" in m for m in errors(doc))
    doc["setup_commands"] = [f'pip install "ray[default]=={ray_version()}" ~/fedray', "pip install -e /opt/fedray"]
    assert errors(doc) == []  # copies of the checkout are fine


def test_missing_client_slots_are_errors():
    doc = load("aws.yaml")
    doc["available_node_types"]["ray.worker.cpu"]["resources"] = {"CPU": 8}
    assert any("client-slot resource 'fedray_client'" in m for m in errors(doc))
    onprem = load("onprem.yaml")
    onprem["worker_start_ray_commands"] = ["ray stop", "ray start --address=$RAY_HEAD_IP:6379"]
    assert any("worker_start_ray_commands" in m and "fedray_client" in m for m in errors(onprem))
    kr = load("kuberay.yaml")
    kr["spec"]["workerGroupSpecs"][0]["rayStartParams"] = {}
    kr["spec"]["unknownField"] = 1
    msgs = " | ".join(errors(kr))
    assert "no worker group declares the client-slot resource" in msgs and "spec.unknownField: unknown key" in msgs


WORKER = "spec.workerGroupSpecs[0]"
CONTAINER = WORKER + ".template.spec.containers[0]"
HEAD_CONTAINER = "spec.headGroupSpec.template.spec.containers[0]"


def test_kuberay_manifest_uses_the_official_image_of_the_installed_ray_and_ships_fedray():
    kr = load("kuberay.yaml")
    for c in [kr["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0],
              kr["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]]:
        assert c["image"].startswith(f"rayproject/ray:{ray_version()}-py")
        assert "lifecycle" not in c and "command" not in c  # nothing installed when a pod starts
    assert kr["spec"]["rayVersion"] == ray_version()
    assert (FOLDER / "Dockerfile").read_text().count(f"RAY_VERSION={ray_version()}") == 1


def test_kuberay_pip_install_in_a_hook_is_rejected_with_the_key():
    kr = load("kuberay.yaml")
    c = kr["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    c["lifecycle"] = {"postStart": {"exec": {"command": ["/bin/sh", "-c", "pip install -q fedray"]}}}
    msgs = errors(kr)
    assert any(m.startswith(f"error: {CONTAINER}.lifecycle.postStart: runs `pip install fedray` (fedray is on no "
                            "package index") for m in msgs), msgs
    c["lifecycle"] = {"postStart": {"exec": {"command": ["/bin/sh", "-c", "pip install some-unknown-pkg"]}}}
    assert any(f"{CONTAINER}.lifecycle.postStart: runs `pip install some-unknown-pkg`" in m for m in errors(kr))
    del c["lifecycle"]
    c["command"] = ["/bin/bash", "-lc", "pip install fedray && ray start --block"]
    assert any(m.startswith(f"error: {CONTAINER}.command: `pip install fedray` installs fedray from a package index")
               for m in errors(kr)), errors(kr)


@pytest.mark.parametrize("break_it, key, text", [
    (lambda d: d.update(apiVersion="ray.io/v1alpha1"), "apiVersion", "must be 'ray.io/v1'"),
    (lambda d: d.update(kind="RayService"), "kind", "must be 'RayCluster'"),
    (lambda d: d["spec"].pop("headGroupSpec"), "spec.headGroupSpec", "missing"),
    (lambda d: d["spec"].pop("workerGroupSpecs"), "spec.workerGroupSpecs", "missing or empty"),
    (lambda d: d["spec"]["headGroupSpec"].pop("rayStartParams"), "spec.headGroupSpec.rayStartParams",
     "required by KubeRay"),
    (lambda d: d["spec"]["workerGroupSpecs"][0]["rayStartParams"].update({"num-cpus": 4}),
     WORKER + ".rayStartParams.num-cpus", "must be a string"),
    (lambda d: d["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].pop("image"),
     HEAD_CONTAINER + ".image", "required"),
    (lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].pop("resources"),
     CONTAINER + ".resources", "no cpu and memory"),
    (lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].update(
        image="rayproject/ray:2.9.3-py310"), CONTAINER + ".image", "has Ray 2.9.3 but this machine has Ray"),
    (lambda d: d["spec"].update(rayVersion="2.9.3"), "spec.rayVersion", "differs from the Ray installed here"),
    (lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"].pop("containers"),
     WORKER + ".template.spec.containers", "missing"),
])
def test_broken_kuberay_copies_fail_with_the_key_named(break_it, key, text):
    kr = load("kuberay.yaml")
    break_it(kr)
    msgs = errors(kr)
    assert any(m.startswith(f"error: {key}: ") and text in m for m in msgs), msgs


def test_head_with_client_slots_is_a_warning():
    doc = copy.deepcopy(load("aws.yaml"))
    doc["available_node_types"]["ray.head.default"]["resources"] = {"fedray_client": 4}
    issues = validate(doc)
    assert not [i for i in issues if i.level == "error"]
    assert any(i.level == "warning" and "client actors may run on it" in i.message for i in issues)


def test_cli_validate_exit_status_and_messages(tmp_path, capsys):
    good = tmp_path / "good"
    good.mkdir()
    for f in FILES:
        (good / f.name).write_text(yaml.safe_dump(load(f.name)))
    assert main(["cluster", "validate", str(good)]) == 0
    assert capsys.readouterr().out.count(": ok") == len(FILES)
    assert main(["cluster", "validate", str(FOLDER / "Dockerfile")]) == 0  # warnings only (the digest)
    assert main(["cluster", "validate", str(FOLDER)]) == 1  # the GCP template until its project id is set
    assert "gcp.yaml: FAILED (1 error(s))" in capsys.readouterr().out
    doc = load("gcp.yaml")
    doc["head_node_type"] = "nope"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert main(["cluster", "validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "bad.yaml: FAILED" in out and "'nope' is not among available_node_types" in out
    with pytest.raises(ConfigError, match="does not exist"):
        validate_file(tmp_path / "missing.yaml")
    assert main(["cluster", "validate", str(tmp_path / "missing.yaml")]) == 2


def test_cluster_init_copies_the_installed_files(tmp_path, capsys):
    dest = tmp_path / "mine"
    assert main(["cluster", "init", str(dest)]) == 0
    for f in [*FILES, FOLDER / "Dockerfile"]:
        assert (dest / f.name).read_bytes() == f.read_bytes(), f.name
    assert main(["cluster", "init", str(dest)]) == 2  # no silent overwrite
    assert "already has" in capsys.readouterr().err
    assert main(["cluster", "init", str(dest), "--force"]) == 0
