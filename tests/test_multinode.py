"""Placement on a simulated three-node cluster (``ray.cluster_utils.Cluster``).

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
import subprocess
import sys
import tempfile

import numpy as np

import fedray

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


if __name__ == "__main__":
    print(json.dumps(_three_node_run()), flush=True)
