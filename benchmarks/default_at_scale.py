"""The default configuration at scale: seconds and peak resident memory of each step of one run.

The run is the one a user types (``fedray run --set runtime.backend=local --set algorithm.name=kmeans
--set data.dataset=blobs --set federation.n_clients=N``: 200 points of 2 features a client, k-FED start,
k-means to convergence), with ``--central-baseline`` optionally, writing its output folder. A thread samples
this process's resident memory every 50 ms; the steps are told apart by wrapping the session's methods:
start-up, each round, the final evaluation, the result's tables, the central baseline, the plots' sums
over every client, and writing the outputs. Printed: seconds and peak GB of each step, the whole run's,
and the load before and after. The run stops itself (exit 3) when the process passes ``--max-rss-gb``.

Usage::

    python benchmarks/default_at_scale.py --clients 100000
    python benchmarks/default_at_scale.py --clients 20000 --central-baseline
"""
from __future__ import annotations

import argparse
import functools
import os
import tempfile
import threading
import time

import psutil

import fedray
from fedray.api import plotdata, results
from fedray.api import session as session_mod
from fedray.loop import server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--central-baseline", action="store_true")
    ap.add_argument("--max-rss-gb", type=float, default=6.0)
    ap.add_argument("--out", default=None, help="output folder (default: a temporary one)")
    args = ap.parse_args()
    proc, step, peaks, seconds = psutil.Process(), ["start"], {}, {}

    def sample() -> None:
        while True:
            gb = proc.memory_info().rss / 2**30
            peaks[step[0]] = max(peaks.get(step[0], 0.0), gb)
            if gb > args.max_rss_gb:
                print(f"stopped: {gb:.2f} GB resident in step {step[0]!r} (--max-rss-gb {args.max_rss_gb})", flush=True)
                os._exit(3)
            time.sleep(0.05)

    def timed(owner: object, name: str, label: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def wrapper(*a, **k):
            prev, step[0], t = step[0], label, time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - t
                step[0] = prev

        setattr(owner, name, wrapper)

    for owner, name, label in ((session_mod.Session, "__init__", "start-up"), (server.Server, "step", "rounds"),
                               (server.Server, "evaluate", "final evaluation"), (results.Result, "build", "tables"),
                               (results.Result, "add_central_baseline", "central baseline"),
                               (plotdata, "gather", "plots' sums"), (results.Result, "save", "writing outputs")):
        timed(owner, name, label)
    threading.Thread(target=sample, daemon=True).start()
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    out = args.out or tempfile.mkdtemp(prefix="fedray-scale-")
    res = fedray.run(overrides=["runtime.backend=local", "algorithm.name=kmeans", "data.dataset=blobs",
                                f"federation.n_clients={args.clients}", "output.overwrite=true"],
                     output=out, progress=False, central_baseline=args.central_baseline)
    total = time.perf_counter() - t0
    print(f"default k-means on blobs, {args.clients} clients x 200 points x 2 features "
          f"({args.clients * 200 * 2 * 8 / 2**30:.2f} GB of rows), {res.summary['rounds']} rounds, summary in {out}")
    for label in ("start-up", "rounds", "final evaluation", "tables", "central baseline", "plots' sums",
                  "writing outputs"):
        if label in seconds:
            print(f"  {label:<18} {seconds[label]:8.1f} s   peak {peaks.get(label, 0.0):.2f} GB")
    print(f"  {'whole run':<18} {total:8.1f} s   peak {max(peaks.values()):.2f} GB")
    print(f"load (1, 5, 15 min) before {tuple(round(x, 2) for x in load0)}, after "
          f"{tuple(round(x, 2) for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
