"""Cost of the release rule (fedray.layers.privacy.span.System) at 10^4 and 10^6 clients: 30 rounds at
fraction 0.5 after a set-up sum over every client, with fixed blocks and with random cohorts.

Run: ``python benchmarks/release_rule_cost.py`` (docs/reliability.md quotes it with the load average).
"""
from __future__ import annotations

import os
import time

import numpy as np

from fedray.core.seeding import client_blocks, sample_blocks, sample_clients
from fedray.layers.privacy.span import System


def measure(n: int, mode: str, rounds: int = 30) -> str:
    system = System(3)
    blocks = client_blocks(5, n, 3)
    system.add(np.arange(n))  # the set-up sum over every client
    checks, adds = [], []
    for r in range(rounds):
        c = sample_blocks(5, r, blocks, 0.5) if mode == "blocks" else sample_clients(5, r, n, 0.5)
        t0 = time.perf_counter()
        system.exposure(c)
        checks.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        system.add(c)
        adds.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    iso = system.isolated()
    t_iso = time.perf_counter() - t0
    return (f"n={n} {mode}: check {np.median(checks) * 1e3:.1f} ms (max {max(checks) * 1e3:.1f}), add "
            f"{np.median(adds) * 1e3:.1f} ms, isolated() {t_iso * 1e3:.0f} ms ({iso.size} isolated), "
            f"small groups {system.exposure().small_groups}")


if __name__ == "__main__":
    print("load average before:", os.getloadavg())
    for n in (10**4, 10**6):
        for mode in ("blocks", "random"):
            print(measure(n, mode))
    print("load average after:", os.getloadavg())
