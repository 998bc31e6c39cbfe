"""The round-overhead workload on Flower's Ray simulation beside fedray, in one run.

Exact federated Lloyd k-means: every client assigns its points to the nearest of
K centres and sends per-cluster sums and counts; the server sets each centre to
sum(sums) / sum(counts). The same workload runs on

* fedray's ``ray`` runtime (``benchmarks/round_overhead.py``'s measurement, one
  fresh process with its own embedded Ray instance), and
* Flower's simulation engine (``flwr.simulation.run_simulation``, Ray backend,
  one ``ClientApp`` per client, a ``ServerApp`` that drives the rounds with
  ``grid.send_and_receive``), also in a fresh process with its own Ray instance.

Both generate the same shards (fedray's ``blobs`` recipe, built inside the
clients), start from the same centres and use the same numpy arithmetic; the
script checks that the final centres agree. It prints one table with both
per-round times (steady state: rounds after the first), their ratio, and the
machine's load before and after.

Needs Flower's simulation extra (``pip install -e ".[peer]"``), best in an
environment of its own, since Flower pins its own Ray version: ``--flower-python PATH`` runs the
Flower side with that environment's interpreter (benchmarks/README.md, "The peers' own workloads",
shows how to make one). The child processes and the load line are ``benchmarks/peers/harness.py``'s::

    python benchmarks/peer_flower.py                         # 1000 clients x 1000 x 8, K = 8, 5 rounds
    python benchmarks/peer_flower.py --clients 100 --points 100 --rounds 3   # a quick check
    python benchmarks/peer_flower.py --flower-python /tmp/flwr-env/bin/python
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

from harness import child, flower_backend, flower_missing, load, steady, version, wait_for_nodes  # noqa: E402


def _source(points: int, features: int, k: int, seed: int) -> dict[str, Any]:
    from fedray.data.federation import BLOBS_DEFAULTS

    return {"kind": "blobs", "seed": seed, "alpha": None,
            **{**BLOBS_DEFAULTS, "points_per_client": points, "n_features": features, "n_centers": k}}


# --- Flower ------------------------------------------------------------------------------------
def run_flower(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the workload on Flower's simulation engine in this process; per-round seconds and centres."""
    import numpy as np
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from fedray.core.ops import assign, cluster_sums
    from fedray.data.federation import ClientSpec, materialize

    n_clients, rounds, k = int(spec["clients"]), int(spec["rounds"]), int(spec["k"])
    source = _source(int(spec["points"]), int(spec["features"]), k, int(spec["seed"]))
    centers0 = np.asarray(spec["centers"], dtype=np.float64)

    shards: dict[int, Any] = {}  # travels (empty) with the client app to each worker

    def shard(cid: int) -> Any:  # built inside the client's worker, once, like fedray's shards
        if cid not in shards:
            shards[cid] = materialize(ClientSpec(cid, source))[0]
        return shards[cid]

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        X = shard(int(context.node_config["partition-id"]))
        centers = msg.content["centers"]["c"].numpy()
        labels, d2 = assign(X, centers)
        stats = {"sums": cluster_sums(X, labels, k), "counts": np.bincount(labels, minlength=k).astype(float),
                 "sse": np.array([d2.sum()])}
        return Message(RecordDict({"stats": ArrayRecord({n: _array(v) for n, v in stats.items()})}), reply_to=msg)

    times: list[float] = []
    final: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = wait_for_nodes(grid, n_clients)
        C = centers0.copy()
        for rnd in range(rounds):
            t0 = time.perf_counter()
            content = RecordDict({"centers": ArrayRecord({"c": _array(C)}), "config": ConfigRecord({"round": rnd})})
            msgs = [Message(content, dst_node_id=nid, message_type="train") for nid in nodes]
            replies = list(grid.send_and_receive(msgs))
            ok = [r for r in replies if r.has_content()]
            if not ok:
                errors = [r.error.reason for r in replies if r.has_error()]
                raise RuntimeError(f"round {rnd}: no client answered ({len(replies)} replies; first error: "
                                   f"{errors[0] if errors else 'none'})")
            sums = sum(r.content["stats"]["sums"].numpy() for r in ok)
            counts = sum(r.content["stats"]["counts"].numpy() for r in ok)
            nz = counts >= 0.5
            C = C.copy()
            C[nz] = sums[nz] / counts[nz, None]
            times.append(time.perf_counter() - t0)
            final["answered"] = len(ok)
        final["centers"] = C.tolist()

    t0 = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=n_clients,
                   backend_config=flower_backend(int(spec["num_cpus"]), float(spec["client_cpus"])),
                   verbose_logging=False)
    return {"system": f"flower {version('flwr')}", "round_times": times, "wall_s": time.perf_counter() - t0,
            **final}


def _array(v: Any) -> Any:
    from flwr.app import Array

    return Array(v)


# --- fedray --------------------------------------------------------------------------------------
def run_fedray(spec: dict[str, Any]) -> dict[str, Any]:
    """The same workload on fedray's ray runtime in this process."""
    import fedray
    from fedray.api.session import Session

    cfg = fedray.make_config({
        "seed": int(spec["seed"]),
        "algorithm": {"name": "kmeans", "params": {"n_clusters": int(spec["k"]), "init": spec["centers"],
                                                    "max_rounds": int(spec["rounds"]), "tol": 1e-300}},
        "data": {"dataset": "blobs", "options": {"points_per_client": int(spec["points"]),
                                                  "n_features": int(spec["features"]), "n_centers": int(spec["k"])}},
        "federation": {"n_clients": int(spec["clients"]), "fraction": 1.0, "rounds": int(spec["rounds"]) + 1},
        "runtime": {"backend": "ray", "num_cpus": int(spec["num_cpus"]), "progress": False},
    })
    t0 = time.perf_counter()
    with Session(cfg) as session:
        result = session.run(output=False, progress=False)
    h = result.history
    return {"system": f"fedray {version('fedray')}", "round_times": h["wall_s"].tolist(),
            "wall_s": time.perf_counter() - t0, "centers": result.centers.tolist(),
            "answered": int(h["clients_answered"].iloc[-1])}


# --- driver ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--points", type=int, default=1000, help="points per client")
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--k", type=int, default=8, help="clusters (and blob centres)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of each embedded Ray instance")
    p.add_argument("--client-cpus", type=float, default=0.5,
                   help="CPUs per Flower client (sets how many client workers Flower runs at once)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per system")
    p.add_argument("--flower-python", default=None,
                   help="Python interpreter of an environment with Flower (default: this one)")
    p.add_argument("--out", help="folder for peer_flower.md")
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.one:
        which, spec = args.one[0], json.loads(args.one[1])
        print(json.dumps(run_flower(spec) if which == "flower" else run_fedray(spec)), flush=True)
        return 0

    for name, v in (("--clients", args.clients), ("--points", args.points), ("--features", args.features),
                    ("--k", args.k), ("--rounds", args.rounds), ("--num-cpus", args.num_cpus)):
        if v < 1:
            p.error(f"{name}: must be >= 1; got {v}")
    missing = flower_missing(args.flower_python)
    if missing:
        print(f"peer_flower: {missing}; install Flower with pip install -e \".[peer]\" (best in an environment "
              "of its own, given with --flower-python)", file=sys.stderr)
        return 2
    import numpy as np

    # fedray's random-box start needs the federation's bounding box; any common start will do: the
    # same uniform draw in [-10, 10] for both systems.
    rng = np.random.default_rng(np.random.SeedSequence([args.seed, 7]))
    centers = rng.uniform(-10, 10, size=(args.k, args.features)).tolist()
    spec = {"clients": args.clients, "points": args.points, "features": args.features, "k": args.k,
            "rounds": args.rounds, "num_cpus": args.num_cpus, "client_cpus": args.client_cpus, "seed": args.seed,
            "centers": centers}
    before = load()
    print(f"# peer_flower: {args.clients} clients x {args.points} x {args.features}, K = {args.k}, "
          f"{args.rounds} rounds; {before}", flush=True)
    rows = [child(__file__, "fedray", spec, args.timeout),
            child(__file__, "flower", spec, args.timeout, python=args.flower_python)]
    after = load()
    ok = [r for r in rows if not r.get("error")]
    same = (len(ok) == 2 and np.allclose(ok[0]["centers"], ok[1]["centers"], rtol=1e-9, atol=1e-9))
    lines = ["| system | round_s (mean after the first) | first_round_s | wall_s | clients answered | error |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        t = r.get("round_times") or []
        lines.append(f"| {r['system']} | {steady(t):.4f} | {t[0] if t else float('nan'):.4f} | "
                     f"{r.get('wall_s', float('nan')):.1f} | {r.get('answered', '')} | {r.get('error', '')} |")
    text = "\n".join(lines)
    if len(ok) == 2:
        ratio = steady(ok[1]["round_times"]) / steady(ok[0]["round_times"])
        text += (f"\n\nFlower / fedray per round: {ratio:.1f}x; final centres "
                 f"{'agree' if same else 'DIFFER'} (1e-9)")
    text += f"\n\nload before: {before}\nload after:  {after}"
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        cmd = "python benchmarks/peer_flower.py " + " ".join(argv if argv is not None else sys.argv[1:])
        (out / "peer_flower.md").write_text(f"Command: `{cmd}`\n\n{text}\n")
    return 0 if len(ok) == 2 and same else 1


if __name__ == "__main__":
    sys.exit(main())
