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
        --max-literal 10 --actor-counts 10 --out benchmarks/results   # the full report
    python benchmarks/round_overhead.py --actors --ref-tree /tmp/fedray-ref   # one actor per client, 200 clients
    python benchmarks/round_overhead.py --scale --backends ray --rounds 5 \\
        --out benchmarks/results/scale                          # 10^4, 10^5, 10^6 clients
    python benchmarks/round_overhead.py --population --out benchmarks/results/population
    python benchmarks/round_overhead.py --population --populations 100000 --fractions 0.01 --backends local,ray

``--scale`` runs the large federations: 10 000 clients x 1000 points, 100 000 x 100
and 1 000 000 x 10 (10^7 rows of 8 features each); ``--sizes`` names others as
``clients:points`` pairs. ``points`` in the table is the points per client.

``--actors`` runs ``benchmarks/actor_overhead.py`` (one Ray actor per client: start-up, memory per
actor, peak memory and a k-means round, against another version with ``--ref-tree PATH``; its other
options, e.g. ``--n-clients 40``, pass through; see that file).

``--population`` (cross-device scale; ``--resident always,never`` also compares keeping the
shards with generating them again): 10^5, 10^6 and 10^7 clients (``--populations``) of
10 points x 8 features, a cohort of 0.01 or 0.001 of them a round (``--fractions``), k-means
(``--algorithms``), 5 rounds, ray runtime (``--backends``). Columns (``--out``:
``round_overhead_population.md`` / ``.csv``): algorithm, population, fraction, cohort (clients a round),
backend, actors, startup_s,
ray_init_s, round_s, first_round_s, eval_s (final evaluation over every client), peak_mem_mb,
bytes_per_client (estimate from PSS: (peak_mem_mb in bytes - rows x 9 x 8) / population),
error. What would not fit in the available memory less ``--min-free-mb`` is skipped (reason
in ``error``); a run is stopped when that memory runs out or past ``--timeout``.

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
import csv
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

COLUMNS = ["algorithm", "backend", "clients_per_actor", "n_clients", "points", "actors", "round_s", "first_round_s",
           "startup_s", "ray_init_s", "init_s", "peak_mem_mb", "peak_rss_mb", "processes", "rounds", "bytes_per_round",
           "pass_s", "x_pass", "read_frac", "error"]

#: ``--scale``: (clients, points per client), 10^7 rows at the largest.
SCALE = [(10_000, 1000), (100_000, 100), (1_000_000, 10)]

#: ``--population``: client counts, cohort fractions and points per client (x 8 features).
POPULATIONS = [100_000, 1_000_000, 10_000_000]
FRACTIONS = [0.01, 0.001]
POPULATION_POINTS = 10
POP_COLUMNS = [
    "algorithm",
    "population",
    "fraction",
    "cohort",
    "backend",
    "resident",
    "actors",
    "startup_s",
    "ray_init_s",
    "round_s",
    "first_round_s",
    "eval_s",
    "peak_mem_mb",
    "bytes_per_client",
    "error",
]
BYTES_NOTE = "bytes_per_client: an estimate from PSS, (peak_mem_mb in bytes - rows x 9 x 8) / population"
#: MiB the processes of a run need besides the clients: the driver, and Ray's node processes and workers.
BASE_MB = {"local": 400, "ray": 1500}


def workload(algorithm: str, backend: str, n_clients: int, clients_per_actor: str, rounds: int, num_cpus: int,
             init: str, seed: int = 0, points: int = 1000, fraction: float = 1.0,
             resident: str = "auto") -> dict[str, Any]:
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
        "federation": {"n_clients": n_clients, "fraction": fraction, "rounds": rounds + 5},
        "runtime": {"backend": backend, "num_cpus": num_cpus, "clients_per_actor": cpa, "progress": False,
                    "resident": resident},
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
    if "fraction" in spec:
        row.update(population_columns(spec, row["peak_mem_mb"]))
    return row


def population_columns(spec: dict[str, Any], peak_mem_mb: float | None) -> dict[str, Any]:
    """``population``, ``fraction``, ``cohort`` (clients a round, as the round loop samples them) and
    ``bytes_per_client``: peak PSS in bytes less the data's own bytes (rows x (features + label) x 8),
    over the population; an estimate of what hosting one client costs beyond its rows."""
    from fedray.core.seeding import n_sampled

    n, points, fraction = int(spec["n_clients"]), int(spec.get("points", 1000)), float(spec["fraction"])
    cols: dict[str, Any] = {"algorithm": spec.get("algorithm", "kmeans"), "population": n, "fraction": fraction,
                            "cohort": n_sampled(fraction, n),
                            "resident": spec.get("resident", "auto")}
    if peak_mem_mb is not None and peak_mem_mb == peak_mem_mb and peak_mem_mb > 0:
        cols["bytes_per_client"] = (peak_mem_mb * 2**20 - data_bytes(n, points)) / n
    return cols


def one_line(exc: BaseException) -> str:
    """An error's message on one line (a multi-line configuration error's items joined)."""
    return " ".join(str(exc).split())


def data_bytes(n_clients: int, points: int, features: int = 8) -> int:
    """Bytes of the federation's rows as float64: rows x (features + label) x 8."""
    return n_clients * points * (features + 1) * 8


def _one(spec: dict[str, Any]) -> dict[str, Any]:
    """``--one``: :func:`run_one`, or the spec with a one-line ``error`` when the run fails."""
    try:
        return run_one(spec)
    except Exception as exc:  # noqa: BLE001 - the table shows why a configuration failed
        extra = population_columns(spec, None) if "fraction" in spec else {}
        return {**spec, **extra, "error": f"{type(exc).__name__}: {one_line(exc)}"}


def _child(spec: dict[str, Any], timeout: float, niceness: int | None = None,
           min_free_mb: float = 1024) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", json.dumps(spec)]
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # always an embedded instance of its own
    if niceness is not None:
        env["RAY_worker_niceness"] = str(niceness)
    base = {"algorithm": spec["algorithm"], "backend": spec["backend"], "n_clients": spec["n_clients"],
            "points": spec.get("points", 1000), "clients_per_actor": spec["clients_per_actor"]}
    if "fraction" in spec:
        base.update(population_columns(spec, None))
    return run_child(cmd, env, base, timeout, min_free_mb)


def available_mb(total: bool = False) -> float:
    """Memory available to new processes on this machine (or its total) in MiB."""
    vm = psutil.virtual_memory()
    return (vm.total if total else vm.available) / 2**20


def _watch(proc: subprocess.Popen, timeout: float, min_free_mb: float) -> str:
    """Wait for the child; stop it and its descendants (the embedded Ray instance) when it runs past
    ``timeout`` seconds or the machine's available memory falls below ``min_free_mb``. Returns why it
    was stopped, or ``""`` when it ended by itself."""
    t0 = time.monotonic()
    while proc.poll() is None:
        if time.monotonic() - t0 > timeout:
            _stop(proc)
            return f"timed out after {timeout:.0f} s"
        free = available_mb()
        if free < min_free_mb:
            _stop(proc)
            return f"stopped: available memory fell to {free:,.0f} MiB (below --min-free-mb {min_free_mb:,.0f})"
        time.sleep(0.25)
    return ""


def _stop(proc: subprocess.Popen) -> None:
    """Kill the child's process group and every descendant it started (Ray's node processes and workers)."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:  # gone already: its process group alone then
        family = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in family:
        try:
            p.kill()
        except psutil.Error:  # gone already
            pass
    proc.wait()


def _fmt(v: Any, col: str) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if col in ("round_s", "first_round_s", "pass_s", "eval_s"):
        return f"{v:.4f}"
    if col in ("x_pass", "read_frac"):
        return f"{v:.2f}"
    if col in ("startup_s", "ray_init_s", "init_s"):
        return f"{v:.2f}"
    if col in ("peak_mem_mb", "peak_rss_mb", "bytes_per_round", "bytes_per_client", "population", "cohort"):
        return f"{v:,.0f}"
    if col == "fraction":
        return f"{v:g}"
    return str(v)


def write_report(out: Path, name: str, rows: list[dict[str, Any]], columns: list[str], argv: list[str] | None,
                 before: str, after: str, ref_line: str, extra: str = "") -> None:
    """``out/<name>.md`` (the command, the load before and after, the host reference, the table) and ``.csv``."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python benchmarks/round_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:])
    note = (f"Command: `{cmd}`\n\nLoad before: `{before}`\n\nLoad after: `{after}`\n\n{extra}"
            f"Host reference ({ref_line})\n\n"
            f"CPUs: {os.cpu_count()}, Python {sys.version.split()[0]}\n\n")
    keep = columns is POP_COLUMNS
    (out / f"{name}.md").write_text(note + markdown(rows, columns, keep_empty=keep))
    with open(out / f"{name}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[c for c in columns if c != "error"] + ["error"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print(f"written: {out / (name + '.md')}, {out / (name + '.csv')}")


def markdown(rows: list[dict[str, Any]], columns: list[str] = COLUMNS, keep_empty: bool = False) -> str:
    cols = [c for c in columns if keep_empty or any(str(r.get(c, "")) != "" for r in rows)]
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


def reference_line(algorithms: list[str]) -> tuple[dict[str, float], str]:
    """:func:`host_reference` and the line that reports it."""
    ref = host_reference(algorithms)
    line = ("host reference, one process, 10^6 rows x 8: plain read {:.1f} ms; ".format(ref["read"] * 1e3)
            + "; ".join(f"{a} fused pass {ref[a] * 1e3:.1f} ms" for a in algorithms if a in ref))
    return ref, line


def _numbers(text: str, kind: type, flag: str, p: argparse.ArgumentParser) -> list[Any]:
    """Comma-separated numbers; counts (``kind=int``) may be written ``1e6`` but must be whole."""
    try:
        vals = [float(item) for item in text.split(",") if item.strip()]
        if kind is int:
            if not all(v.is_integer() for v in vals):
                raise ValueError
            return [int(v) for v in vals]
        return vals
    except ValueError:
        what = "whole numbers (1e6 is allowed)" if kind is int else "numbers"
        p.error(f"{flag}: expected comma-separated {what}; got {text!r}")  # exits


def population_specs(args: argparse.Namespace, p: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """``--population``: one configuration per algorithm (``--algorithms``, default k-means), population,
    fraction and backend (10 x 8 points a client)."""
    algorithms = [a.strip() for a in (args.algorithms or "kmeans").split(",") if a.strip()]
    populations = _numbers(args.populations, int, "--populations", p)
    fractions = _numbers(args.fractions, float, "--fractions", p)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not algorithms or not populations or not fractions or not backends:
        p.error("--population needs at least one of each of --algorithms, --populations, --fractions and --backends")
    residents = [r.strip() for r in args.resident.split(",") if r.strip()]
    return [dict(algorithm=a, backend=b, n_clients=n, clients_per_actor="auto", rounds=args.rounds,
                 num_cpus=args.num_cpus, init=args.init, points=POPULATION_POINTS, fraction=f, resident=r)
            for a in algorithms for n in populations for f in fractions for b in backends for r in residents]


def precheck(spec: dict[str, Any], min_free_mb: float, done: list[dict[str, Any]] = ()) -> str:
    """Why a configuration is not run (one line), or ``""``: it is invalid or would not fit in the available
    memory less ``min_free_mb``, as ``check_memory`` or this benchmark estimates (base, clients, the
    rows; at least a smaller population's measured peak on the backend, scaled beyond the base)."""
    import fedray
    from fedray.core.errors import FedrayError
    from fedray.core.sizes import CLIENT_BYTES, RECIPE_BYTES
    from fedray.data.federation import check_memory

    try:
        check_memory(fedray.make_config(workload(**spec)))
    except FedrayError as exc:
        return "skipped: " + one_line(exc)
    free = available_mb()
    n, points, base = int(spec["n_clients"]), int(spec.get("points", 1000)), BASE_MB.get(spec["backend"], 1500)
    need = (n * (RECIPE_BYTES + CLIENT_BYTES) + data_bytes(n, points)) / 2**20 + base
    for r in done:
        if r.get("backend") == spec["backend"] and not r.get("error") and 0 < r.get("population", 0) < n:
            need = max(need, base + max(0.0, r["peak_mem_mb"] - base) * n / r["population"])
    if need + min_free_mb > free:
        return f"skipped: about {need:,.0f} MiB needed (estimate), {free:,.0f} MiB available less {min_free_mb:,.0f}"
    return ""


def population_main(p: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--population``: the cross-device table (see the module's doc); returns the exit status."""
    args.rounds = 5 if args.rounds is None else args.rounds
    args.backends = args.backends or "ray"
    specs = population_specs(args, p)
    before, t0, rows = load(), time.perf_counter(), []
    print(f"# round overhead, populations: {len(specs)} configurations; {before}", flush=True)
    _, ref_line = reference_line(sorted({spec["algorithm"] for spec in specs}))
    print(f"# {ref_line}", flush=True)
    for spec in specs:
        reason = precheck(spec, args.min_free_mb, rows)
        if reason:
            row = {"backend": spec["backend"], **population_columns(spec, None), "error": reason}
        else:
            row = _child(spec, args.timeout, args.ray_worker_niceness, args.min_free_mb)
        rows.append(row)
        print(markdown([row], POP_COLUMNS, keep_empty=True).splitlines()[-1], flush=True)
    after = load()
    print(f"\n{ref_line}\n")
    print(markdown(rows, POP_COLUMNS, keep_empty=True))
    print(BYTES_NOTE)
    print(f"load before: {before}\nload after:  {after}\ntotal {time.perf_counter() - t0:.0f} s")
    if args.out:
        write_report(Path(args.out), "round_overhead_population", rows, POP_COLUMNS, argv, before, after, ref_line,
                     BYTES_NOTE + "\n\n")
    return 0 if not any(r.get("error") for r in rows) else 1


def actors_main(argv: list[str]) -> int:
    """``--actors``: :mod:`actor_overhead` (next to this file) with the other arguments."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("actor_overhead", Path(__file__).with_name("actor_overhead.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--actors" in argv:
        return actors_main([a for a in argv if a != "--actors"])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", default="10,100,1000", help="client counts (comma-separated)")
    p.add_argument("--add-5000", action="store_true", help="also 5000 clients")
    p.add_argument("--points", type=int, default=1000, help="points per client of --clients")
    p.add_argument("--scale", action="store_true",
                   help="the large federations instead: " + ", ".join(f"{n} x {m}" for n, m in SCALE))
    p.add_argument("--sizes", default="", help="clients:points pairs instead of --clients, e.g. 20000:100,100000:100")
    p.add_argument("--fcm", action="store_true", help="also federated-fcm")
    p.add_argument("--algorithms", default=None,
                   help="algorithms (comma-separated; default kmeans[,federated-fcm]; --population: kmeans)")
    p.add_argument("--backends", default=None, help="runtimes (default local,ray; --population: ray)")
    p.add_argument("--clients-per-actor", default="auto", help="ray layouts, e.g. auto,1,50")
    p.add_argument("--actor-counts", dest="actors", default="", help="also ray layouts with this many actors, e.g. 10 "
                   "(clients_per_actor = ceil(clients / actors); skipped where it equals another layout)")
    p.add_argument("--max-literal", type=int, default=100,
                   help="largest client count run with clients_per_actor=1 (one process per client)")
    p.add_argument("--rounds", type=int, default=None, help="training rounds per run (10; --population: 5)")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of the embedded Ray instance")
    p.add_argument("--init", default="random-box", help="centre initialisation (random-box keeps runs short; or kfed)")
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per configuration")
    p.add_argument(
        "--ray-worker-niceness",
        type=int,
        default=None,
        help="niceness of Ray's worker processes (Ray's default is 15: on a machine shared with other "
        "work, workers then yield to everything else; 0 competes on equal terms with the local runtime)",
    )
    p.add_argument("--population", action="store_true",
                   help="cross-device scale: large populations sampled a small cohort a round (see the module's doc)")
    p.add_argument("--populations", default=",".join(str(n) for n in POPULATIONS),
                   help="--population: client counts (comma-separated)")
    p.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS),
                   help="--population: cohort fractions (comma-separated)")
    p.add_argument("--resident", default="auto",
                   help="--population: runtime.resident values (comma-separated: auto, always, never)")
    p.add_argument(
        "--min-free-mb",
        type=float,
        default=None,
        help="MiB of available memory to leave to the machine: a configuration whose estimate does not fit "
        "is skipped, and a running one is stopped when the available memory falls below it (default: 10%% of "
        "the machine's memory, at least 1024)",
    )
    p.add_argument("--out", help="folder for round_overhead.md / .csv (--population: round_overhead_population.*)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.one:
        print(json.dumps(_one(json.loads(args.one))), flush=True)
        return 0
    if args.min_free_mb is None:
        args.min_free_mb = max(1024.0, 0.1 * available_mb(total=True))
    if args.population:
        return population_main(p, args, argv)
    args.rounds, args.backends = (10 if args.rounds is None else args.rounds), args.backends or "local,ray"

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
    ref, ref_line = reference_line(algorithms)
    print(f"# {ref_line}", flush=True)
    rows = []
    t0 = time.perf_counter()
    for spec in specs:
        row = _child(spec, args.timeout, args.ray_worker_niceness, args.min_free_mb)
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
        nice = "Ray's default (15)" if args.ray_worker_niceness is None else str(args.ray_worker_niceness)
        write_report(Path(args.out), "round_overhead", rows, COLUMNS, argv, before, after, ref_line,
                     f"Ray worker niceness: {nice}\n\n")
    return 0 if not any(r.get("error") for r in rows) else 1


def run_child(cmd: list[str], env: dict[str, str], base: dict[str, Any], timeout: float, min_free_mb: float
              ) -> dict[str, Any]:
    """Run one measurement in a process of its own (watched for time and free memory); its last JSON line,
    or ``base`` with the reason it gave none."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, start_new_session=True)
        stopped = _watch(proc, timeout, min_free_mb)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if stopped:
        return {**base, "error": stopped}
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (stderr or stdout).strip().splitlines()[-1:] or [""]
    return {**base, "error": f"exit {proc.returncode}: {tail[0]}"}


if __name__ == "__main__":
    sys.exit(main())
