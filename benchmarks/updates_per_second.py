"""Client updates per second: k-means, federated FCM and FedFuzzDB's K selection, 10^3 to 10^7 clients.

No peer simulator publishes this figure; it is the rate at which the server receives and folds
clients' updates, with the start-up (Ray, the client actors, every shard generated and checked)
and the peak memory beside it. Workloads, each at every population and participation:

* ``kmeans``, ``federated-fcm``: ``blobs`` of 10 points x 8 features a client (generated inside the
  hosts), K = 8, ``init: random-box``, ``--rounds`` rounds (5); ``updates_per_s`` is the round's
  cohort over ``round_s``, the mean round after the first (``benchmarks/round_overhead.py``'s
  measurement, ``fedray.analysis.sweep.measure_run``);
* ``select-k``: FedFuzzDB's choice of K (Stallmann & Wilbik 2022; ``fedray.select_k``) with
  federated FCM on the same data: one run per K in [2, ``--k-max``] (6), each followed by the
  federated fuzzy Davies-Bouldin index over every client; no central or local baseline.
  ``updates_per_s`` counts the replies of the runs' training rounds and of the index passes over
  the seconds of the whole procedure (the runs' final evaluation passes take part of that time but
  are not counted); ``round_s`` is that time over the training rounds of all runs.

Populations (``--populations``): 10^3, 10^5, 10^6 and 10^7 clients; participation
(``--fractions``): 1 (every client every round) and 0.01. Each configuration runs in a fresh
process with its own Ray instance (2 CPUs); one that would not fit in the available memory (less
``--min-free-mb``) is skipped with the reason, and a running one is stopped when the machine's
memory runs short or past ``--timeout`` (``round_overhead``'s checks). ``startup_s`` is Ray's
start plus the session's (clients built and checked); ``peak_mem_mb`` the peak summed PSS of the
driver and all of Ray's processes.

10^7 clients need about 17 GB: run the full table on a quiet machine with nothing else held::

    python benchmarks/updates_per_second.py --out benchmarks/results/updates
    python benchmarks/updates_per_second.py --populations 1000,100000   # a check that fits anywhere
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

sys.path.insert(0, str(HERE / "peers"))

from harness import markdown  # noqa: E402
from round_overhead import (  # noqa: E402  (the same configuration, checks and load line)
    POPULATION_POINTS,
    _numbers,
    available_mb,
    load,
    one_line,
    precheck,
    run_child,
    workload,
)

WORKLOADS = ("kmeans", "federated-fcm", "select-k")
POPULATIONS = (1_000, 100_000, 1_000_000, 10_000_000)
FRACTIONS = (1.0, 0.01)
COLUMNS = [("workload", ""), ("population", ","), ("fraction", "g"), ("cohort", ","), ("startup_s", ".2f"),
           ("round_s", ".4f"), ("updates_per_s", ",.0f"), ("updates", ","), ("k", ""), ("work_s", ".2f"),
           ("peak_mem_mb", ",.0f"), ("error", "")]


def config(spec: dict[str, Any]) -> dict[str, Any]:
    """The run's configuration (``round_overhead.workload``; FCM for ``select-k``)."""
    algorithm = "federated-fcm" if spec["workload"] == "select-k" else spec["workload"]
    return workload(algorithm, "ray", spec["population"], "auto", spec["rounds"], spec["num_cpus"], "random-box",
                    points=POPULATION_POINTS, fraction=spec["fraction"])


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One configuration, in this process (a fresh child)."""
    import ray

    import fedray
    from fedray.core.seeding import n_sampled

    cfg = fedray.make_config(config(spec))
    cohort = n_sampled(spec["fraction"], spec["population"])
    row = {k: spec[k] for k in ("workload", "population", "fraction")} | {"cohort": cohort}
    ours = not ray.is_initialized()  # a Ray instance this call starts is shut down here, another one is left
    try:
        row.update(_select_k(cfg, spec) if spec["workload"] == "select-k" else _rounds(cfg, cohort))
    finally:
        if ours and ray.is_initialized():
            ray.shutdown()
    return row


def _rounds(cfg: Any, cohort: int) -> dict[str, Any]:
    from fedray.analysis.sweep import measure_run

    m = measure_run(cfg, memory_interval=0.2)
    rounds = m["rounds"] - 1  # the mean is over the rounds after the first
    return {"startup_s": m["ray_init_s"] + m["startup_s"], "round_s": m["round_s"],
            "updates_per_s": cohort / m["round_s"], "updates": cohort * rounds, "work_s": m["round_s"] * rounds,
            "peak_mem_mb": m["peak_mem_mb"]}


def _select_k(cfg: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from fedray.analysis.kselect import select_k
    from fedray.analysis.sweep import PeakMemory
    from fedray.api.session import Session
    from fedray.api.settings import ship_settings
    from fedray.runtime.ray_executor import ensure_ray

    with PeakMemory(0.2, include_ray=True) as mem:
        t0 = time.perf_counter()
        ensure_ray(ship=ship_settings(cfg))
        with Session(cfg) as session:
            startup = time.perf_counter() - t0
            trained, index = count_replies(session)
            t1 = time.perf_counter()
            sel = select_k(session=session, k_min=2, k_max=spec["k_max"], central=False, local=False)
            work = time.perf_counter() - t1
    updates = trained[0] + index[0]
    rounds = int(sel.table["rounds"].sum())
    return {"startup_s": startup, "round_s": work / max(1, rounds), "updates_per_s": updates / work,
            "updates": updates, "work_s": work, "peak_mem_mb": mem.peak_pss_mb, "k": sel.k}


def count_replies(session: Any) -> tuple[list[int], list[int]]:
    """Counters of the replies ``session`` receives from now on: ``trained``, those of its runs' training
    rounds (their histories' ``clients_answered``), and ``index``, those of its calls outside runs
    (``Session.call``: the index passes of select-k). A run's final evaluation passes are not counted."""
    trained, index = [0], [0]
    run, execute = session.run, session.layers.execute

    def counted_run(*args: Any, **kwargs: Any) -> Any:
        res = run(*args, **kwargs)
        trained[0] += int(res.history["clients_answered"].sum())
        return res

    def counted_execute(call: Any, tasks: Any, *args: Any, **kwargs: Any) -> Any:
        res = execute(call, tasks, *args, **kwargs)
        index[0] += len(res.replies)
        return res

    session.run, session.layers.execute = counted_run, counted_execute
    return trained, index


def child(spec: dict[str, Any], timeout: float, min_free_mb: float) -> dict[str, Any]:
    """:func:`measure` in a fresh process with its own Ray; stopped past ``timeout`` or when memory runs short."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", json.dumps(spec)]
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    base = {k: spec[k] for k in ("workload", "population", "fraction")}
    return run_child(cmd, env, base, timeout, min_free_mb)


def _one(spec: dict[str, Any]) -> dict[str, Any]:
    try:
        return measure(spec)
    except Exception as exc:  # noqa: BLE001 - the table shows why a configuration failed
        return {k: spec[k] for k in ("workload", "population", "fraction")} | {
            "error": f"{type(exc).__name__}: {one_line(exc)}"}


def skip_reason(spec: dict[str, Any], min_free_mb: float, done: list[dict[str, Any]]) -> str:
    """``round_overhead.precheck`` on the run's configuration (its memory estimate, scaled from a smaller
    population's measured peak), or ``""``."""
    pre = dict(algorithm="federated-fcm" if spec["workload"] == "select-k" else spec["workload"], backend="ray",
               n_clients=spec["population"], clients_per_actor="auto", rounds=spec["rounds"],
               num_cpus=spec["num_cpus"], init="random-box", points=POPULATION_POINTS, fraction=spec["fraction"])
    measured = [{"backend": "ray", "population": r["population"], "peak_mem_mb": r["peak_mem_mb"]}
                for r in done if not r.get("error") and r.get("peak_mem_mb")]
    return precheck(pre, min_free_mb, measured)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="kmeans, federated-fcm, select-k (comma-separated)")
    p.add_argument("--populations", default=",".join(str(n) for n in POPULATIONS), help="client counts (1e6 allowed)")
    p.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS), help="participation per round")
    p.add_argument("--rounds", type=int, default=5, help="training rounds of each run")
    p.add_argument("--k-max", type=int, default=6, help="select-k: K from 2 to this")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of the embedded Ray instance")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per configuration")
    p.add_argument("--min-free-mb", type=float, default=None,
                   help="MiB of available memory to leave to the machine (default: 10%% of it, at least 1024)")
    p.add_argument("--out", help="folder for updates_per_second.md and .json")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(_one(json.loads(args.one))), flush=True)
        return 0
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    bad = sorted(set(workloads) - set(WORKLOADS))
    if bad or not workloads:
        p.error(f"--workloads: choose from {', '.join(WORKLOADS)}; got {args.workloads!r}")
    populations = _numbers(args.populations, int, "--populations", p)
    fractions = _numbers(args.fractions, float, "--fractions", p)
    if not populations or min(populations) < 1:
        p.error(f"--populations: positive client counts; got {args.populations!r}")
    if not fractions or not all(0 < f <= 1 for f in fractions):
        p.error(f"--fractions: numbers in (0, 1]; got {args.fractions!r}")
    for flag, v, lo in (("--rounds", args.rounds, 2), ("--k-max", args.k_max, 2), ("--num-cpus", args.num_cpus, 1)):
        if v < lo:
            p.error(f"{flag}: must be >= {lo}; got {v}")
    min_free = args.min_free_mb if args.min_free_mb is not None else max(1024.0, 0.1 * available_mb(total=True))
    before, t0, rows = load(), time.perf_counter(), []
    print(f"# updates per second: {workloads} x {populations} x {fractions}; {before}", flush=True)
    for w in workloads:
        for n in populations:
            for f in fractions:
                spec = dict(workload=w, population=n, fraction=f, rounds=args.rounds, k_max=args.k_max,
                            num_cpus=args.num_cpus)
                reason = skip_reason(spec, min_free, [r for r in rows if r.get("workload") == w])
                row = {k: spec[k] for k in ("workload", "population", "fraction")} | {"error": reason} if reason \
                    else child(spec, args.timeout, min_free)
                rows.append(row)
                print(markdown([row], COLUMNS).splitlines()[-1], flush=True)
    after = load()
    text = (markdown(rows, COLUMNS)
            + f"\nload before: {before}\nload after:  {after}\ntotal {time.perf_counter() - t0:.0f} s\n")
    print("\n" + text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        cmd = "python benchmarks/updates_per_second.py " + " ".join(sys.argv[1:] if argv is None else argv)
        (out / "updates_per_second.md").write_text(f"Command: `{cmd}`\n\n{text}")
        (out / "updates_per_second.json").write_text(json.dumps(rows, indent=1))
    return 1 if any(r.get("error") and not r["error"].startswith("skipped") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
