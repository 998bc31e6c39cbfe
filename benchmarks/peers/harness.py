"""What the peer benchmarks share: each system in a fresh process with its own Ray, Flower's
simulation settings, the load line and the table.

``benchmarks/peer_flower.py`` (k-means) and ``benchmarks/peers/run.py`` (the peers' published
workloads) both run every system through :func:`child`: a new Python process (optionally another
interpreter, e.g. an environment that holds Flower and the Ray version it pins) that prints one JSON
line with its measurements. A child that runs past its time is stopped with every process it started
(its embedded Ray instance included).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from round_overhead import _stop, load  # noqa: E402  (the same load line and child stop as round_overhead)

__all__ = ["child", "flower_backend", "flower_missing", "load", "markdown", "steady", "version", "wait_for_nodes"]


def child(script: str | Path, which: str, spec: dict[str, Any], timeout: float,
          python: str | None = None) -> dict[str, Any]:
    """Run ``script --one WHICH SPEC`` in a fresh process (``python``, default this interpreter) and
    return the JSON object it prints last, or ``{"system": which, "error": one line}``."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # each system starts a Ray instance of its own
    cmd = [python or sys.executable, str(Path(script).resolve()), "--one", which, json.dumps(spec)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, start_new_session=True)
        t0 = time.monotonic()
        while proc.poll() is None:
            if time.monotonic() - t0 > timeout:
                _stop(proc)
                return {"system": which, "error": f"timed out after {timeout:.0f} s"}
            time.sleep(0.2)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (stderr or stdout).strip().splitlines()[-3:]
    return {"system": which, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}


def flower_missing(python: str | None = None) -> str:
    """``""`` when ``python`` (default this interpreter) imports Flower's simulation engine, else why not."""
    cmd = [python or sys.executable, "-c", "import flwr, flwr.simulation; from flwr.simulation import run_simulation"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cmd[0]}: {exc}"
    if proc.returncode:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return f"{cmd[0]} cannot import Flower's simulation engine ({tail[0]})"
    return ""


def version(dist: str) -> str:
    """The installed version of a distribution, or ``?``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    try:
        return _version(dist)
    except PackageNotFoundError:
        return "?"


def steady(times: list[float]) -> float:
    """Mean of the rounds after the first (the first pays one-off costs in fresh workers)."""
    rest = times[1:] if len(times) > 1 else times
    return sum(rest) / len(rest) if rest else float("nan")


def flower_backend(num_cpus: int, client_cpus: float, client_gpus: float = 0.0) -> dict[str, Any]:
    """``backend_config`` of ``flwr.simulation.run_simulation``: its own Ray instance of ``num_cpus``
    CPUs, ``client_cpus`` (and ``client_gpus``) per client worker, no dashboard, Ray's errors only."""
    import logging

    resources: dict[str, float] = {"num_cpus": float(client_cpus)}
    if client_gpus:
        resources["num_gpus"] = float(client_gpus)
    return {"client_resources": resources,
            "init_args": {"num_cpus": int(num_cpus), "include_dashboard": False, "logging_level": logging.ERROR}}


def wait_for_nodes(grid: Any, n: int) -> list[int]:
    """The node ids of the simulation once all ``n`` SuperNodes are up (as Flower's strategies wait)."""
    while len(nodes := list(grid.get_node_ids())) < n:
        time.sleep(0.5)
    return nodes


def markdown(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """A Markdown table of ``rows``; ``columns`` are (key, format) pairs, format e.g. ``.3f`` or ``""``."""
    def cell(v: Any, fmt: str) -> str:
        if v is None or (isinstance(v, float) and v != v):
            return ""
        return format(v, fmt) if fmt and isinstance(v, (int, float)) else str(v)

    head = "| " + " | ".join(k for k, _ in columns) + " |\n|" + "|".join("---" for _ in columns) + "|\n"
    return head + "".join("| " + " | ".join(cell(r.get(k), f) for k, f in columns) + " |\n" for r in rows)
