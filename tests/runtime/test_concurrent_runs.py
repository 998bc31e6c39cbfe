"""Runs that share one small Ray cluster queue for it instead of deadlocking.

Three ``fedray run`` processes start together against one 2-CPU head node (started
here with ``ray start --head --block`` in its own process group and stopped by its
id), 50 clients each, ten client actors each. Each run reserves its actors at once
(one placement group), so the runs take the cluster in turn: all three finish, with
the results they give when run one after another. Before placement groups each run
held part of its actors and waited for the rest, and two of the three failed after
``runtime.startup_timeout``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import fedray
from tests import raynodes

pytestmark = pytest.mark.slow

EXPERIMENT = {
    "algorithm": {"name": "kmeans", "params": {"n_clusters": 3}},
    "data": {"dataset": "sklearn:wine", "scale": "standard"},
    "federation": {"n_clients": 50},
    # ten actors of 0.2 CPU, created two at a time: without a placement group, runs interleave
    # their actors on the 2 CPUs and each waits for the rest of its own
    "runtime": {"clients_per_actor": 5, "actor_batch": 2, "startup_timeout": 60, "progress": False},
    "output": {"plots": False},
}


def _start(cfg: Path, seed: int, out: Path, address: str, env: dict, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fedray.tools.cli", "run", str(cfg), "--out", str(out),
                             "--set", f"seed={seed}", "--set", f"runtime.address={address}"],
                            env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(out: Path) -> tuple[list, np.ndarray]:
    final = json.loads((out / "summary.json").read_text())["final"]
    with np.load(out / "model.npz") as model:
        centers = model["centers"]
    return sorted((k, v) for k, v in final.items() if not k.endswith("_s")), centers


def test_three_runs_at_once_on_a_two_cpu_cluster_all_finish_as_if_run_in_turn():
    tmp = raynodes.short_tmp("frcc")
    try:
        with raynodes.RayNodes(tmp) as nodes:
            address = nodes.start_head(num_cpus=2)
            work = tmp / "work"
            work.mkdir()
            cfg = work / "experiment.yaml"
            cfg.write_text(yaml.safe_dump(EXPERIMENT))
            env = dict(nodes.env, PYTHONPATH=str(Path(__file__).resolve().parents[2]) + os.pathsep
                       + nodes.env.get("PYTHONPATH", ""))
            seeds = (1, 2, 3)
            procs = [_start(cfg, s, work / f"together{s}", address, env, work) for s in seeds]
            outs = [p.communicate(timeout=600) for p in procs]
            for p, (_, err) in zip(procs, outs):
                assert p.returncode == 0, err[-3000:]
            for s in seeds:  # one after another, in this process (the local runtime gives the Ray runtime's bits)
                fedray.run(EXPERIMENT, overrides={"seed": s, "runtime.backend": "local"},
                                     output=work / f"alone{s}")
                together, alone = _result(work / f"together{s}"), _result(work / f"alone{s}")
                assert together[0] == alone[0]
                np.testing.assert_array_equal(together[1], alone[1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
