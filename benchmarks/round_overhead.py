"""Round overhead of the local and ray runtimes: seconds per round, start-up and peak memory.

Workload (the foundation's benchmark): ``blobs`` with 1000 points x 8 features
per client, 8 clusters, k-means with 8 clusters, fraction 1.0, for 10, 100 and
1000 clients, on the ``local`` and the ``ray`` runtime. Each configuration runs
in a fresh Python process, so its memory and start-up are its own:

* ``round_s``     mean seconds of a training round after the first, as the round
  loop measures it (``first_round_s``: the first, which pays one-off costs);
* ``startup_s``   seconds to build the clients (actors, shards, data checks);
* ``ray_init_s``  seconds to start the embedded Ray instance (ray runtime);
* ``peak_mem_mb`` peak of the summed proportional set size (PSS) of all
  processes: the driver, Ray's node processes and its workers (``peak_rss_mb``:
  the same with resident set sizes, which count shared pages once per process).

Usage::

    python benchmarks/round_overhead.py                       # the foundation table
    python benchmarks/round_overhead.py --add-5000 --fcm --clients-per-actor auto,1 \\
        --max-literal 10 --actors 10 --out benchmarks/results   # the full report
    python benchmarks/round_overhead.py --scale --backends ray --rounds 5 \\
        --out benchmarks/results/scale                          # 10^4, 10^5, 10^6 clients

``--scale`` runs the large federations: 10 000 clients x 1000 points, 100 000 x 100
and 1 000 000 x 10 (10^7 rows of 8 features each); ``--sizes`` names others as
``clients:points`` pairs. ``points`` in the table is the points per client.

``--clients-per-actor`` variants other than ``auto`` run on the ray runtime
only, and ``1`` (one actor per client) only up to ``--max-literal`` clients.
The table is printed and, with ``--out``, written as ``round_overhead.md`` and
``round_overhead.csv`` together with the machine's load before and after.

Host reference, measured in the same run before the configurations (so that
figures from machines of different speed can be compared): in this process, 10^6
rows x 8 features (64 MB), the best of 5 plain reads (``numpy.sum``) and of 5
fused statistics passes (``fedray.core.kernels``, one segment per 1000 rows, K = 8).
Each row of the table then gets

* ``pass_s``     that one-process fused pass scaled to the configuration's rows
  (what one core needs for the arithmetic alone);
* ``x_pass``     ``round_s / pass_s`` (below 1 when the actors split the rows over
  several cores and add little);
* ``read_frac``  the plain read of the configuration's rows over ``round_s``: the
  fraction of the memory-read limit that a round reaches.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

COLUMNS = ["algorithm", "backend", "clients_per_actor", "n_clients", "points", "actors", "round_s", "first_round_s",
           "startup_s", "ray_init_s",
           "init_s", "peak_mem_mb", "peak_rss_mb", "processes", "rounds", "bytes_per_round", "pass_s", "x_pass",
           "read_frac", "error"]


#: ``--scale``: (clients, points per client), 10^7 rows at the largest.
SCALE = [(10_000, 1000), (100_000, 100), (1_000_000, 10)]


def workload(algorithm: str, backend: str, n_clients: int, clients_per_actor: str, rounds: int, num_cpus: int,
             init: str, seed: int = 0, points: int = 1000) -> dict[str, Any]:
    """The benchmark's configuration as a mapping for :func:`fedray.make_config`."""
    params: dict[str, Any] = {"n_clusters": 8, "init": init, "max_rounds": rounds}
    if algorithm == "kmeans":
        params["tol"] = 1e-300  # never stop early: every run does ``rounds`` rounds
    else:
        params["tol"] = 1e-300
    cpa: Any = clients_per_actor if clients_per_actor == "auto" else int(clients_per_actor)
    return {
        "seed": seed,
        "algorithm": {"name": algorithm, "params": params},
        "data": {"dataset": "blobs", "options": {"points_per_client": points, "n_features": 8, "n_centers": 8}},
        "federation": {"n_clients": n_clients, "fraction": 1.0, "rounds": rounds + 5},
        "runtime": {"backend": backend, "num_cpus": num_cpus, "clients_per_actor": cpa, "progress": False},
        "output": {"directory": None, "plots": False},
    }


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one configuration in this process (called in a fresh child process)."""
    import fedray
    from fedray.analysis.sweep import measure_run

    cfg = fedray.make_config(workload(**spec))
    try:
        row = measure_run(cfg, memory_interval=0.2)
    finally:
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        except ImportError:  # pragma: no cover
            pass
    row["bytes_per_round"] = (row["bytes_down"] + row["bytes_up"]) / max(1, row["rounds"])
    row["points"] = spec.get("points", 1000)
    return row


def _child(spec: dict[str, Any], timeout: float, niceness: int | None = None) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", json.dumps(spec)]
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # always an embedded instance of its own
    if niceness is not None:
        env["RAY_worker_niceness"] = str(niceness)
    base = {"algorithm": spec["algorithm"], "backend": spec["backend"], "n_clients": spec["n_clients"],
            "points": spec.get("points", 1000), "clients_per_actor": spec["clients_per_actor"]}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {**base, "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {**base, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}


def _fmt(v: Any, col: str) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if col in ("round_s", "first_round_s", "pass_s"):
        return f"{v:.4f}"
    if col in ("x_pass", "read_frac"):
        return f"{v:.2f}"
    if col in ("startup_s", "ray_init_s", "init_s"):
        return f"{v:.2f}"
    if col in ("peak_mem_mb", "peak_rss_mb", "bytes_per_round"):
        return f"{v:,.0f}"
    return str(v)


def markdown(rows: list[dict[str, Any]], columns: list[str] = COLUMNS) -> str:
    cols = [c for c in columns if any(str(r.get(c, "")) != "" for r in rows)]
    head = "| " + " | ".join(cols) + " |\n|" + "|".join("---" for _ in cols) + "|\n"
    return head + "".join("| " + " | ".join(_fmt(r.get(c), c) for c in cols) + " |\n" for r in rows)


def load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        la = os.getloadavg()
        return f"load average: {la[0]:.2f}, {la[1]:.2f}, {la[2]:.2f}"


REF_ROWS = 1_000_000


def host_reference(algorithms: list[str], repeat: int = 5) -> dict[str, float]:
    """Seconds, best of ``repeat``, for 10^6 rows x 8 features in this process: a plain
    read (``read``) and one fused statistics pass per algorithm (K = 8, 1000 rows a segment)."""
    import numpy as np

    from fedray.core import kernels

    rng = np.random.default_rng(0)
    X = rng.standard_normal((REF_ROWS, 8))
    C = rng.standard_normal((8, 8))
    offsets = np.arange(0, REF_ROWS + 1, 1000)
    calls = {"read": lambda: X.sum(),
             "kmeans": lambda: kernels.lloyd_stats(X, C, offsets),
             "federated-fcm": lambda: kernels.fcm_stats(X, C, 2.0, offsets)}
    ref = {}
    for name in ["read"] + [a for a in algorithms if a in calls]:
        calls[name]()  # compile / warm up
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            calls[name]()
            best = min(best, time.perf_counter() - t)
        ref[name] = best
    return ref


def against_reference(row: dict[str, Any], ref: dict[str, float]) -> None:
    """Adds ``pass_s``, ``x_pass`` and ``read_frac`` to a measured row (see the module's doc)."""
    rows = row.get("n_clients", 0) * row.get("points", 0)
    r = row.get("round_s")
    if not rows or r is None or r != r or row.get("algorithm") not in ref:
        return
    scale = rows / REF_ROWS
    row["pass_s"] = ref[row["algorithm"]] * scale
    row["x_pass"] = r / row["pass_s"]
    row["read_frac"] = ref["read"] * scale / r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", default="10,100,1000", help="client counts (comma-separated)")
    p.add_argument("--add-5000", action="store_true", help="also 5000 clients")
    p.add_argument("--points", type=int, default=1000, help="points per client of --clients")
    p.add_argument("--scale", action="store_true",
                   help="the large federations instead: " + ", ".join(f"{n} x {m}" for n, m in SCALE))
    p.add_argument("--sizes", default="", help="clients:points pairs instead of --clients, e.g. 20000:100,100000:100")
    p.add_argument("--fcm", action="store_true", help="also federated-fcm")
    p.add_argument("--algorithms", default=None, help="algorithms (comma-separated; default kmeans[,federated-fcm])")
    p.add_argument("--backends", default="local,ray")
    p.add_argument("--clients-per-actor", default="auto", help="ray layouts, e.g. auto,1,50")
    p.add_argument("--actors", default="", help="also ray layouts with this many actors, e.g. 10 "
                   "(clients_per_actor = ceil(clients / actors); skipped where it equals another layout)")
    p.add_argument("--max-literal", type=int, default=100,
                   help="largest client count run with clients_per_actor=1 (one process per client)")
    p.add_argument("--rounds", type=int, default=10, help="training rounds per run")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of the embedded Ray instance")
    p.add_argument("--init", default="random-box", help="centre initialisation (random-box keeps runs short; or kfed)")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per configuration")
    p.add_argument("--ray-worker-niceness", type=int, default=None,
                   help="niceness of Ray's worker processes (Ray's default is 15: on a machine shared with other "
                        "work, workers then yield to everything else; 0 competes on equal terms with the local runtime)")
    p.add_argument("--out", help="folder for round_overhead.md / .csv")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.one:
        print(json.dumps(run_one(json.loads(args.one))), flush=True)
        return 0

    sizes = [(int(c), args.points) for c in args.clients.split(",") if c]
    if args.add_5000 and 5000 not in [n for n, _ in sizes]:
        sizes.append((5000, args.points))
    if args.scale:
        sizes = list(SCALE)
    if args.sizes:
        try:
            sizes = [(int(a), int(b)) for a, b in (item.split(":") for item in args.sizes.split(",") if item)]
        except ValueError:
            p.error(f"--sizes: expected clients:points pairs such as 100000:100; got {args.sizes!r}")
    algorithms = args.algorithms.split(",") if args.algorithms else ["kmeans"] + (["federated-fcm"] if args.fcm else [])
    layouts = [c.strip() for c in args.clients_per_actor.split(",") if c.strip()]
    specs = []
    for alg in algorithms:
        for n, points in sizes:
            for backend in args.backends.split(","):
                cpas = layouts if backend == "ray" else ["auto"]
                if backend == "ray":
                    cpas = cpas + [str(math.ceil(n / int(a))) for a in args.actors.split(",") if a.strip()]
                seen = set()
                for cpa in cpas:
                    if (cpa == "1" and n > args.max_literal) or cpa in seen:
                        continue
                    if cpa != "auto" and backend == "ray" and math.ceil(n / int(cpa)) <= args.num_cpus \
                            and "auto" in cpas and cpa not in layouts:
                        continue  # as many actors as CPU slots: the auto layout already
                    seen.add(cpa)
                    specs.append(dict(algorithm=alg, backend=backend, n_clients=n, clients_per_actor=cpa,
                                      rounds=args.rounds, num_cpus=args.num_cpus, init=args.init, points=points))
    before = load()
    print(f"# round overhead: {len(specs)} configurations; {before}", flush=True)
    ref = host_reference(algorithms)
    ref_line = ("host reference, one process, 10^6 rows x 8: plain read {:.1f} ms; ".format(ref["read"] * 1e3)
                + "; ".join(f"{a} fused pass {ref[a] * 1e3:.1f} ms" for a in algorithms if a in ref))
    print(f"# {ref_line}", flush=True)
    rows = []
    t0 = time.perf_counter()
    for spec in specs:
        row = _child(spec, args.timeout, args.ray_worker_niceness)
        against_reference(row, ref)
        rows.append(row)
        print(markdown([row]).splitlines()[-1] if not row.get("error") else f"{spec}: {row['error']}", flush=True)
    after = load()
    table = markdown(rows)
    print()
    print(table)
    print(ref_line)
    print(f"load before: {before}\nload after:  {after}\ntotal {time.perf_counter() - t0:.0f} s")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        cmd = "python benchmarks/round_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:])
        nice = "Ray's default (15)" if args.ray_worker_niceness is None else str(args.ray_worker_niceness)
        note = (f"Command: `{cmd}`\n\nLoad before: `{before}`\n\nLoad after: `{after}`\n\n"
                f"Ray worker niceness: {nice}\n\n"
                f"Host reference ({ref_line})\n\n"
                f"CPUs: {os.cpu_count()}, Python {sys.version.split()[0]}\n\n")
        (out / "round_overhead.md").write_text(note + table)
        import csv

        with open(out / "round_overhead.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=[c for c in COLUMNS if c != "error"] + ["error"], extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        print(f"written: {out / 'round_overhead.md'}, {out / 'round_overhead.csv'}")
    return 0 if not any(r.get("error") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
