"""Fractional GPUs on a cluster that declares GPUs (this machine has none: a head node started with
``ray start --num-gpus 2`` in its own process group).

``client_resources.num_gpus: 0.25`` packs four client actors on each GPU; each actor sees the GPU
Ray gave it in ``CUDA_VISIBLE_DEVICES``. Training with ``device: auto`` falls back to the CPU
where CUDA is not usable (the same bits as the local runtime); ``device: cuda`` fails in one line.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests import raynodes

pytestmark = pytest.mark.slow

DRIVER = r'''
import json, sys
import fedray

address, device = sys.argv[1], sys.argv[2]
cfg = dict(algorithm={"name": "fedavg", "params": {"model": "mlp", "epochs": 1, "device": device}},
           data={"dataset": "sklearn:digits"}, federation={"n_clients": 8, "rounds": 1}, seed=3,
           runtime={"address": address, "clients_per_actor": 1, "progress": False,
                    "client_resources": {"num_cpus": 0.25, "num_gpus": 0.25}})
with fedray.Session(**cfg) as s:
    where = getattr(s.executor, "base", s.executor).whereabouts()
    res = s.run()
local = fedray.run(**{**cfg, "runtime": {"backend": "local", "progress": False}})
print("RESULT " + json.dumps({"where": where, "weights": res.model["weights"].tolist(),
                              "local": local.model["weights"].tolist()}))
'''


def _driver(tmp: Path, address: str, device: str, env: dict) -> subprocess.CompletedProcess:
    script = tmp / "driver.py"
    script.write_text(DRIVER)
    return subprocess.run([sys.executable, str(script), address, device], env=env, cwd=tmp, capture_output=True,
                          text=True, timeout=600)


def test_quarter_gpus_pack_four_actors_per_gpu_and_training_falls_back_to_the_cpu():
    tmp = raynodes.short_tmp("frgp")
    try:
        with raynodes.RayNodes(tmp) as nodes:
            address = nodes.start_head(num_cpus=2, num_gpus=2)
            env = dict(nodes.env, PYTHONPATH=str(Path(__file__).resolve().parents[2]) + os.pathsep
                       + nodes.env.get("PYTHONPATH", ""))
            out = _driver(tmp, address, "auto", env)
            assert out.returncode == 0, out.stderr[-3000:]
            got = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[7:])
            where = got["where"]
            assert len(where) == 8 and sorted(c for w in where for c in w["clients"]) == list(range(8))
            assert Counter(w["gpu_ids"][0] for w in where) == {"0": 4, "1": 4}, where  # 4 actors per GPU
            assert all(len(w["gpu_ids"]) == 1 and w["cuda_visible_devices"] == w["gpu_ids"][0] for w in where)
            assert sorted(w["bundle"] for w in where) == list(range(8))  # one placement group bundle each
            assert got["weights"] == got["local"], "device auto trains on the CPU: the local runtime's bits"

            cli = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "fedray.tools.cli",
                    "run",
                    "--set",
                    f"runtime.address={address}",
                    "--set",
                    "algorithm.name=fedavg",
                    "--set",
                    "algorithm.params.model=mlp",
                    "--set",
                    "algorithm.params.device=cuda",
                    "--set",
                    "data.dataset=sklearn:digits",
                    "--set",
                    "federation.n_clients=4",
                    "--set",
                    "federation.rounds=1",
                    "--set",
                    "runtime.client_resources.num_gpus=0.25",
                    "--out",
                    str(tmp / "cuda"),
                ],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=600,
            )
            errors = [ln for ln in cli.stderr.splitlines() if ln.startswith("fedray: error:")]
            assert cli.returncode == 2 and len(errors) == 1, cli.stderr[-3000:]
            assert "Traceback" not in cli.stderr and "algorithm.params.device: 'cuda'" in errors[0], errors
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
