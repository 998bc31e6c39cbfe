"""Multi-node runs: a real two-node cluster whose worker lacks fedray, and placement on a simulated one.

**Real cluster** (:func:`test_worker_without_fedray_runs_kmeans_and_a_plugin_bit_for_bit`):
a head node started with ``ray start`` from the test's environment and a worker
node started with ``ray start --address`` from a second virtual environment that
has Ray and fedray's dependencies but neither fedray nor the test's plug-in
(:mod:`raynodes`). The driver connects with ``runtime.address``; fedray ships
itself and the plug-in package through ``runtime_env``. Client actors ask for
the worker's custom resource, so they run on the worker (which could not
import fedray otherwise), and ``kmeans`` and a ``module:Class`` plug-in give the
``local`` backend's centres and history bit for bit.

**Simulated cluster** (``ray.cluster_utils.Cluster``), placement only:

A head node without the client-slot resource and two worker nodes declaring
``fedray_client``: client actors asking for ``fedray_client`` with placement
``spread`` must land on both worker nodes and never on the head, the ``auto``
layout must count only the slots of the worker nodes, and the run must give
the same centres and history, bit for bit, as the single-process run of the
same seed.

The cluster runs in a child process with its own ``RAY_TMPDIR``, so it never
touches the session-wide Ray instance of the test suite (or any other Ray
instance on this machine, which a simulated cluster would otherwise advertise
as the "current" one).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import fedray

REPO = Path(__file__).resolve().parents[2]

CONFIG = {
    "seed": 7,
    "algorithm": {"name": "kmeans", "params": {"n_clusters": 3}},
    "data": {"dataset": "blobs", "options": {"points_per_client": 150, "n_features": 2, "n_centers": 3}},
    "federation": {"n_clients": 8, "rounds": 8},
    "runtime": {"backend": "ray", "placement": "spread", "clients_per_actor": "auto",
                "client_resources": {"custom": {"fedray_client": 1}}, "progress": False},
}


def _three_node_run() -> dict:
    """Start head + two workers, run CONFIG on them, report placement and the result."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=2, resources={"fedray_client": 2})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", configure_logging=False)
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        head = [nid for nid, r in nodes.items() if "fedray_client" not in r]
        workers = [nid for nid, r in nodes.items() if "fedray_client" in r]
        with fedray.Session(CONFIG) as session:
            placed = ray.get([a.node_id.remote() for a in session.executor.actors])
            result = session.run(output=False, progress=False)
        return {"head": head, "workers": workers, "placed": placed,
                "centers": result.centers.tolist(), "objective": result.history["objective"].tolist()}
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow  # a simulated three-node Ray cluster in a process of its own
def test_clients_spread_over_worker_nodes_and_result_equals_single_node():
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory(prefix="frmn", dir="/tmp") as tmp:
        env["RAY_TMPDIR"] = tmp
        proc = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, capture_output=True,
                              text=True, timeout=170)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1])

    assert len(out["head"]) == 1 and len(out["workers"]) == 2
    # auto layout: 2 workers x 2 slots -> 4 actors (not one per CPU of the 5-CPU cluster)
    assert len(out["placed"]) == 4
    assert set(out["placed"]) == set(out["workers"]), "clients must use both worker nodes"
    assert out["head"][0] not in out["placed"], "no client actor may run on the head node"

    single = fedray.run(CONFIG, overrides={"runtime.backend": "local"}, progress=False)
    np.testing.assert_array_equal(np.asarray(out["centers"]), single.centers)
    np.testing.assert_array_equal(np.asarray(out["objective"]), single.history["objective"].to_numpy())


# --- a real cluster: head from this environment, worker from one without fedray ---------------
REAL = {
    "seed": 11,
    "data": {"dataset": "blobs", "options": {"points_per_client": 120, "n_features": 3, "n_centers": 3}},
    "federation": {"n_clients": 6, "rounds": 6},
    "runtime": {"backend": "ray", "client_resources": {"custom": {"fedray_client": 1}}, "progress": False,
                "startup_timeout": 240},
}
PLUGIN = "fr_test_plugin.kmedians:FederatedKMedians"
ALGORITHMS = {"kmeans": {"name": "kmeans", "params": {"n_clusters": 3}},
              "plugin": {"name": PLUGIN, "params": {"n_clusters": 3}}}
# (run, algorithm, how the driver connects): the GCS address, and Ray Client (ray://) for both
RUNS = [("kmeans", "kmeans", "gcs"), ("plugin", "plugin", "gcs"), ("kmeans-client", "kmeans", "client"),
        ("plugin-client", "plugin", "client")]

DRIVER = """
import json, sys
import ray
import fedray
import fedray.runtime.shipping

addresses, config, algorithms, runs = (json.loads(a) for a in sys.argv[1:5])
out = {}
for key, name, via in runs:
    cfg = dict(config, algorithm=algorithms[name])
    cfg["runtime"] = dict(cfg["runtime"], address=addresses[via])
    with fedray.Session(cfg) as session:
        placed = ray.get([a.node_id.remote() for a in session.executor.actors])
        result = session.run(output=False, progress=False)
        nodes = {n["NodeID"]: sorted(n["Resources"]) for n in ray.nodes() if n["Alive"]}
        out[key] = {"placed": placed, "nodes": nodes, "centers": result.centers.tolist(),
                    "history": result.history.drop(columns=["wall_s"]).select_dtypes("number").to_dict("list"),
                    # per actor, or (Ray Client) in the job's runtime_env given when fedray connected
                    "shipped": (session.runtime_env or fedray.runtime.shipping._client_job_env or {}).get(
                        "py_modules", [])}
print("RESULT " + json.dumps(out), flush=True)
"""


def _write_plugin(folder: Path) -> None:
    """The k-medians example as a package of its own, outside anything the worker node has."""
    pkg = folder / "fr_test_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copyfile(REPO / "examples" / "plugins" / "kmedians.py", pkg / "kmedians.py")


def _local_run(cfg: dict, plugin_folder: Path):
    """The same configuration on the ``local`` backend, in this process."""
    sys.path.insert(0, str(plugin_folder))
    try:
        return fedray.run(cfg, overrides={"runtime.backend": "local"}, progress=False)
    finally:
        sys.path.remove(str(plugin_folder))
        for name in [m for m in sys.modules if m.startswith("fr_test_plugin")]:
            del sys.modules[name]


@pytest.mark.slow
def test_worker_without_fedray_runs_kmeans_and_a_plugin_bit_for_bit():
    from tests import raynodes

    t0 = time.monotonic()
    python2 = raynodes.worker_venv()
    venv_s = time.monotonic() - t0
    tmp = raynodes.short_tmp("frmn")
    # the property under test needs a worker that cannot import fedray nor the plug-in by itself
    for mod in ("fedray", "fr_test_plugin"):
        assert subprocess.run([str(python2), "-c", f"import {mod}"], cwd=tmp, capture_output=True).returncode, mod
    work = tmp / "work"
    work.mkdir()
    _write_plugin(work)
    try:
        with raynodes.RayNodes(tmp) as nodes:
            nodes.start_head(num_cpus=1, resources={"fedray_client": 0})
            nodes.start_worker(python2, num_cpus=2, resources={"fedray_client": 2})
            env = dict(nodes.env, PYTHONPATH=str(work), FEDRAY_CACHE_DIR=str(tmp / "cache"))
            addresses = {"gcs": nodes.address, "client": nodes.client_address}
            proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(addresses), json.dumps(REAL),
                                   json.dumps(ALGORITHMS), json.dumps(RUNS)], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=500)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            assert proc.returncode == 0 and lines, proc.stderr[-4000:] + nodes.logs()
        out = json.loads(lines[-1][len("RESULT "):])
        local = {key: _local_run(dict(REAL, algorithm=algorithm), work) for key, algorithm in ALGORITHMS.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"worker venv ready in {venv_s:.0f} s; whole test {time.monotonic() - t0:.0f} s")

    for key, name, _ in RUNS:
        got = out[key]
        workers = {nid for nid, res in got["nodes"].items() if "fedray_client" in res}
        head = set(got["nodes"]) - workers
        assert len(got["nodes"]) == 2 and len(workers) == 1, got["nodes"]
        assert got["placed"] and set(got["placed"]) == workers and not head & set(got["placed"]), \
            "client actors must run on the worker node (the one without fedray)"
        assert len(got["shipped"]) == (2 if name == "plugin" else 1), got["shipped"]  # fedray (+ the plug-in)
        np.testing.assert_array_equal(np.asarray(got["centers"]), local[name].centers)
        expected = local[name].history.drop(columns=["wall_s"]).select_dtypes("number")
        assert sorted(got["history"]) == sorted(expected.columns)
        for column, values in got["history"].items():
            np.testing.assert_array_equal(np.asarray(values, dtype=float), expected[column].to_numpy(dtype=float),
                                          err_msg=f"{key}: history column {column}")


if __name__ == "__main__":
    print(json.dumps(_three_node_run()), flush=True)
