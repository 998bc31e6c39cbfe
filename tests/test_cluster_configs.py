"""Every file in cluster_configs/ validates offline; broken copies fail with messages naming the problem."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from fedray.cli import main
from fedray.cluster import validate, validate_file
from fedray.errors import ConfigError

FOLDER = Path(__file__).resolve().parents[1] / "cluster_configs"
FILES = sorted(FOLDER.glob("*.yaml"))
LAUNCHER = [f for f in FILES if "provider" in yaml.safe_load(f.read_text())]


def load(name: str) -> dict:
    return yaml.safe_load((FOLDER / name).read_text())


def errors(doc: dict) -> list[str]:
    return [str(i) for i in validate(doc) if i.level == "error"]


def test_folder_has_the_four_kinds():
    docs = [yaml.safe_load(f.read_text()) for f in FILES]
    providers = {d["provider"]["type"] for d in docs if "provider" in d}
    assert {"local", "aws", "gcp"} <= providers
    assert any(d.get("kind") == "RayCluster" for d in docs)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_cluster_file_validates(path):
    assert [str(i) for i in validate_file(path) if i.level == "error"] == []


@pytest.mark.parametrize("path", LAUNCHER, ids=[f.name for f in LAUNCHER])
def test_launcher_files_pass_rays_own_offline_checks(path):
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(yaml.safe_load(path.read_text())))


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


def test_missing_install_and_client_slots_are_errors():
    doc = load("aws.yaml")
    doc["setup_commands"] = ["pip install ray"]
    doc["available_node_types"]["ray.worker.cpu"]["resources"] = {"CPU": 8}
    msgs = " | ".join(errors(doc))
    assert "no setup command installs fedray" in msgs and "client-slot resource 'fedray_client'" in msgs
    onprem = load("onprem.yaml")
    onprem["worker_start_ray_commands"] = ["ray stop", "ray start --address=$RAY_HEAD_IP:6379"]
    assert any("worker_start_ray_commands" in m and "fedray_client" in m for m in errors(onprem))
    kr = load("kuberay.yaml")
    kr["spec"]["workerGroupSpecs"][0]["rayStartParams"] = {}
    kr["spec"]["unknownField"] = 1
    msgs = " | ".join(errors(kr))
    assert "no worker group declares the client-slot resource" in msgs and "spec.unknownField: unknown key" in msgs


def test_head_with_client_slots_is_a_warning():
    doc = copy.deepcopy(load("aws.yaml"))
    doc["available_node_types"]["ray.head.default"]["resources"] = {"fedray_client": 4}
    issues = validate(doc)
    assert not [i for i in issues if i.level == "error"]
    assert any(i.level == "warning" and "client actors may run on it" in i.message for i in issues)


def test_cli_validate_exit_status_and_messages(tmp_path, capsys):
    assert main(["cluster", "validate", str(FOLDER)]) == 0
    assert capsys.readouterr().out.count(": ok") == len(FILES)
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
