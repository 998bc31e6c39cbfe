"""One Ray actor per client: start-up, memory per actor and a k-means round, this version against another.

``python benchmarks/round_overhead.py --actors`` runs this (or run it directly). Workload: ``blobs``
with 1000 points x 8 features per client, k-means with 8 clusters (``random-box`` starts), fraction
1.0, ``clients_per_actor: 1`` (one client actor per client) on the ``ray`` runtime, 200 clients by
default (``--n-clients``). Each version runs in a fresh Python process with an embedded Ray instance
of its own, one after the other, and the table gives per version:

* ``startup_s``     seconds to build the session: every client actor started, its shard built and
  checked (``ray_init_s``: starting the embedded Ray instance, before that);
* ``actor_rss_mb``  median resident set size of a client actor right after start-up
  (``actor_pss_mb``: proportional set size, shared pages split between the processes);
* ``peak_mem_mb``   peak of the summed PSS of every process of the run (driver, Ray's node
  processes, the actors), sampled every 0.2 s (less often where one sample takes longer: see
  ``fedray.analysis.sweep.PeakMemory``);
* ``round_s``       mean seconds of a k-means round after the first (``first_round_s``: the first);
* ``heavy``         which of pandas, pyarrow, scipy, cryptography, matplotlib, numba the first
  client actor had loaded after start-up (read from the libraries its process maps).

The targets for 200 actors on 2 cores and 24 GB: ``startup_s`` <= 120, ``peak_mem_mb`` <= 16 000,
``round_s`` <= 1. Measure on a quiet machine; the load average is printed before and after.

Comparing with another version (``--ref-tree PATH``): PATH is a checkout of that version, e.g.::

    git worktree add --detach /tmp/fedray-ref <commit>     # or: git archive <commit> | tar -x -C /tmp/fedray-ref
    python benchmarks/round_overhead.py --actors --ref-tree /tmp/fedray-ref --out fedray-output/actors

The reference runs with this interpreter and its packages, with PATH first on ``PYTHONPATH`` (Ray's
workers inherit it). Because fedray maps ``actors/`` and ``algorithms/`` into the package
(pyproject's ``package-dir``), the benchmark links them into PATH/fedray/ (``fedray/actors`` ->
``../actors`` and so on) when they are missing there, and each row names the folder its ``fedray``
and ``fedray.actors`` were imported from (``tree``), so a row that ran the wrong code shows it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COLUMNS = ["version", "n_clients", "actors", "ray_init_s", "startup_s", "actor_rss_mb", "actor_pss_mb", "peak_mem_mb",
           "round_s", "first_round_s", "rounds", "heavy", "tree", "error"]
HEAVY = ("pandas", "pyarrow", "scipy", "cryptography", "matplotlib", "numba")
#: pyproject.toml's package-dir: sub-packages of fedray that live outside fedray/.
MAPPED = {"actors": "actors", "algorithms": "algorithms", "cluster_configs": "cluster_configs", "examples": "examples"}


def config(n_clients: int, rounds: int, num_cpus: int) -> dict[str, Any]:
    """The benchmark's run as a mapping for ``fedray.make_config`` (the same keys in every version)."""
    return {"seed": 0,
            "algorithm": {"name": "kmeans", "params": {"n_clusters": 8, "init": "random-box", "max_rounds": rounds,
                                                       "tol": 1e-300}},
            "data": {"dataset": "blobs", "options": {"points_per_client": 1000, "n_features": 8, "n_centers": 8}},
            "federation": {"n_clients": n_clients, "fraction": 1.0, "rounds": rounds + 5},
            "runtime": {"backend": "ray", "num_cpus": num_cpus, "clients_per_actor": 1, "progress": False,
                        "startup_timeout": 3600},
            "output": {"directory": None, "plots": False}}


def _memory(pids: list[int]) -> tuple[float, float]:
    """Median RSS and PSS (MiB) of processes ``pids``."""
    import psutil

    rss, pss = [], []
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except psutil.Error:
            continue
        rss.append(info.rss / 2**20)
        pss.append(getattr(info, "pss", info.rss) / 2**20)
    return (statistics.median(rss) if rss else float("nan")), (statistics.median(pss) if pss else float("nan"))


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One version's row, measured in this process (a fresh child of :func:`main`)."""
    import ray

    import fedray
    import fedray.actors
    from fedray.analysis.sweep import PeakMemory

    row: dict[str, Any] = {"n_clients": spec["n_clients"],
                           "tree": f"{Path(fedray.__file__).parent.parent} ({Path(fedray.actors.__file__).parent})"}
    cfg = fedray.make_config(config(spec["n_clients"], spec["rounds"], spec["num_cpus"]))
    with PeakMemory(0.2, include_ray=True) as mem:
        t0 = time.perf_counter()
        ray.init(num_cpus=spec["num_cpus"], include_dashboard=False, logging_level="ERROR")
        row["ray_init_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        with fedray.Session(cfg) as session:
            row["startup_s"] = time.perf_counter() - t1
            where = session.executor.whereabouts()
            row["actors"] = len(where)
            row["actor_rss_mb"], row["actor_pss_mb"] = _memory([w["pid"] for w in where])
            result = session.run(output=False, progress=False)
            row["heavy"] = ",".join(mapped_packages(where[0]["pid"], HEAVY)) or "none"
    ray.shutdown()
    h = result.history
    train = h[h["phase"] != "init"] if "phase" in h else h
    row.update({"peak_mem_mb": mem.peak_pss_mb, "rounds": int(len(train)),
                "round_s": float(train["wall_s"].iloc[1:].mean()) if len(train) > 1 else float("nan"),
                "first_round_s": float(train["wall_s"].iloc[0]) if len(train) else float("nan"), "error": ""})
    return row


def mapped_packages(pid: int, packages: tuple[str, ...]) -> list[str]:
    """Which of ``packages`` process ``pid`` has loaded, read from the shared libraries it maps (each of
    HEAVY has compiled extensions that its import loads); works for any version of fedray."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
    except OSError:
        return ["?"]
    return [p for p in packages if f"/site-packages/{p}/" in maps or f"/site-packages/{p}.libs/" in maps]


def link_mapped(tree: Path) -> None:
    """Make PATH/fedray/<sub> point at PATH/<folder> for pyproject's package-dir entries, so that
    ``import fedray.actors`` finds the tree's own actors with PATH on ``PYTHONPATH``."""
    for sub, folder in MAPPED.items():
        link, target = tree / "fedray" / sub, tree / folder
        if target.is_dir() and not link.exists():
            link.symlink_to(Path("..") / folder, target_is_directory=True)


def child(version: str, spec: dict[str, Any], tree: Path | None, timeout: float) -> dict[str, Any]:
    """Run :func:`measure` in a fresh process (with ``tree`` first on PYTHONPATH when given)."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    cwd = None
    if tree is not None:
        link_mapped(tree)
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        cwd = str(tree)
    cmd = [sys.executable, os.path.abspath(__file__), "--one", json.dumps(spec)]
    with tempfile.TemporaryFile("w+") as out:
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                                  timeout=timeout, start_new_session=True)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        out.seek(0)
        text = out.read()
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return {"version": version, **json.loads(line)}
    tail = text.strip().splitlines()[-1:] or [""]
    return {"version": version, "n_clients": spec["n_clients"], "error": f"exit {code}: {tail[0][:200]}"}


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if v != v else (f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}")
    return "" if v is None else str(v)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-clients", type=int, default=200, help="clients, each its own actor (default 200)")
    p.add_argument("--rounds", type=int, default=5, help="k-means rounds (default 5)")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of the embedded Ray instance")
    p.add_argument("--ref-tree", type=Path, help="a checkout of the version to compare with (see the docstring)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per version")
    p.add_argument("--out", type=Path, help="folder for actor_overhead.md / .json")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(json.loads(args.one))), flush=True)
        return 0
    if args.ref_tree is not None and not (args.ref_tree / "fedray" / "__init__.py").is_file():
        p.error(f"--ref-tree {str(args.ref_tree)!r}: no fedray/__init__.py there; give a checkout of fedray")
    spec = {"n_clients": args.n_clients, "rounds": args.rounds, "num_cpus": args.num_cpus}
    before = load()
    rows = [child("this", spec, None, args.timeout)]
    if args.ref_tree is not None:
        rows.append(child("ref", spec, args.ref_tree.resolve(), args.timeout))
    text = (f"{markdown(rows)}\n\n{before} before, {load()} after; {time.strftime('%Y-%m-%d %H:%M:%S')}; "
            f"{' '.join(sys.argv[1:] if argv is None else argv)}\n")
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "actor_overhead.md").write_text(text)
        (args.out / "actor_overhead.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(not r.get("error") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
