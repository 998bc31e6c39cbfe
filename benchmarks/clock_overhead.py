"""What the simulated clock adds to a round (docs/clock.md): seconds per round with and without it.

Workload: ``blobs``, 10^5 clients (``--clients``) of 20 points x 2 features (``--points``), k-means
with 3 clusters from a random start (no k-FED round), on the local runtime. One session holds the
clients; round loops then run ``--rounds`` rounds each, taking their rounds in turn (round r of every
variant, then round r + 1), ``--repeats`` times, so that all variants see the same load. Each clocked
variant is compared with an unclocked one over a cohort of the same size:

- every client every round, against ``no clock``: ``devices`` (drawn from a log-normal spread; times the
  clients only); ``devices + deadline`` (about a quarter of the clients late, each a row of the
  failures table as any straggler); and ``+ diurnal, always online`` (``online: 1.0``: every
  availability check runs, the cohorts stay whole);
- ``+ diurnal, 99.9 % online``: a diurnal availability with ``online: 0.999``, so that about a tenth of
  a percent of the clients are offline at a round's start (not sampled) or go offline during it (late),
  against ``no clock, 99.9 % sampled`` (``federation.fraction = 0.999``): a cohort that is not the whole
  federation costs the runtime more than the clock does, whatever picks it, so the clock is compared with
  a cohort of the same size.

Printed: the median seconds of a round of each variant (the first round of each run left out), the
overhead in percent against its baseline, and the machine's load (``os.getloadavg``) before and after.

Usage::

    python benchmarks/clock_overhead.py                     # 10^5 clients
    python benchmarks/clock_overhead.py --clients 20000 --rounds 4 --repeats 2
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from fedray.api.config import make_config
from fedray.api.federation_config import build_clock
from fedray.api.session import Session
from fedray.loop.server import Server
from fedray.loop.settings import ServerSettings

DEVICES = {"speed": 1e6, "up": 1e5, "down": 1e5, "spread": 1.0}
DEADLINE = 0.004  # simulated seconds: about a quarter of the clients are late


def _server(session: Session, variant: tuple, rounds: int) -> Server:
    """A round loop over the session's clients with ``variant`` = (clock or None, sampled fraction)."""
    clock, fraction = variant
    alg = session.make_algorithm("kmeans", {"n_clusters": 3, "init": "random-box", "max_rounds": rounds,
                                            "tol": 1e-300})
    return Server(alg, session.layers, ServerSettings(seed=0, max_rounds=rounds, clock=clock, fraction=fraction))


def _interleaved(session: Session, variants: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds of each round of every variant, their rounds taken in turn (round r of each variant, then
    round r + 1), so that a change of the machine's load falls on all of them; the first round of each
    left out."""
    servers = {name: _server(session, c, rounds) for name, c in variants.items()}
    out: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):
        for name, server in servers.items():
            row = server.step()
            if row is not None and r > 0:
                out[name].append(row["wall_s"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    fed = {"n_clients": args.clients, "devices": DEVICES, "deadline": DEADLINE}
    session = Session(algorithm={"name": "kmeans", "params": {"n_clusters": 3}}, seed=0,
                      data={"dataset": "blobs", "options": {"points_per_client": args.points}},
                      federation=fed, runtime={"backend": "local", "progress": False})
    startup = time.perf_counter() - t0
    alg = session.make_algorithm()

    def clock(*overrides: str):
        return build_clock(make_config(session.config, overrides=list(overrides)), session.info, alg)

    diurnal = "federation.availability.generator=diurnal"
    variants = {"no clock": (None, 1.0), "devices": (clock("federation.deadline=null"), 1.0),
                "devices + deadline": (clock(), 1.0),
                "+ diurnal, always online": (clock(diurnal, "federation.availability.online=1.0"), 1.0),
                "no clock, 99.9 % sampled": (None, 0.999),
                "+ diurnal, 99.9 % online": (clock(diurnal, "federation.availability.online=0.999"), 1.0)}
    baseline = {name: "no clock, 99.9 % sampled" if "99.9" in name else "no clock" for name in variants}
    _interleaved(session, {"warm-up": (None, 1.0)}, 2)  # compiles the kernels
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, values in _interleaved(session, variants, args.rounds).items():
            times[name] += values
    med = {name: float(np.median(values)) for name, values in times.items()}
    print(f"clock overhead: {args.clients} clients x {args.points} points, k-means, local runtime, "
          f"{args.rounds - 1} rounds x {args.repeats} repeats a variant (start-up {startup:.1f} s)")
    for name, values in times.items():
        base = baseline[name]
        against = "" if base == name else f"  against {base!r}"
        print(f"  {name:<26} {med[name]:8.4f} s a round (median of {len(values)})  "
              f"{100 * (med[name] / med[base] - 1):+6.1f} %{against}")
    print(f"load (1, 5, 15 min) before {tuple(round(x, 2) for x in load0)}, after "
          f"{tuple(round(x, 2) for x in os.getloadavg())}")
    session.close()


if __name__ == "__main__":
    main()
