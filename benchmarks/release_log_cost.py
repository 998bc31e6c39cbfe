"""Cost of the persistent release log (fedray.layers.privacy.journal) in a secure-aggregation round.

``--clients`` clients (blobs, 5 rows each, local runtime) in fixed blocks of 3; a round is one
secure-aggregation call of k-means' Lloyd statistics over the whole blocks a round samples at
fraction 0.5 (about ``--clients / 2`` clients, ``mask_neighbors`` 4), through a
:class:`~fedray.layers.privacy.PrivacyLayer`: SecAgg key sharing, masking, unmasking and the release
rule, as in a run. Two layers over the same clients take turns, round by round, in this process:

* **without** the journal (the release log in the process only);
* **with** it (every release appended and flushed to disk before it is unmasked, the journal
  re-read under its lock before each decision).

Rounds alternate between the two, so a change of load hits both alike. Inside the layer with the
journal, the seconds spent in the journal itself (open, lock, re-read, append, fsync) are timed too,
so its share of a round is measured in the very rounds it is part of.

Run: ``python benchmarks/release_log_cost.py [--clients 10000] [--rounds 3]``; quote it with the load
average it prints. The acceptance threshold is under 5 % of a round.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from fedray.algorithms.kmeans import lloyd_stats
from fedray.api.config import make_config
from fedray.api.session import Session
from fedray.api.settings import privacy_settings
from fedray.core.calls import train
from fedray.core.contract import Task
from fedray.core.seeding import client_blocks, sample_blocks
from fedray.layers.privacy import PrivacyLayer, journal

SPENT: list[float] = []  # seconds in the journal, one entry per operation


def _timed(fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT.append(time.perf_counter() - t0)
    return wrapper


def _instrument() -> None:
    """Time every journal operation (open, lock, re-read, append + fsync) in this process."""
    J = journal.Journal
    J._open = _timed(J._open)
    J.read_new = _timed(J.read_new)
    J.append = _timed(J.append)
    journal.fcntl.flock = _timed(journal.fcntl.flock)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.clients
    logging.getLogger("fedray").setLevel(logging.ERROR)
    _instrument()
    print(f"load average before: {os.getloadavg()}  (n={n}, {args.rounds} rounds each, alternating)")
    privacy = privacy_settings(make_config(privacy={"secure_aggregation": True, "mask_neighbors": 4}))
    blocks = client_blocks(0, n, privacy.min_cohort)
    C = np.array([[-5.0, 0.0], [0.0, 5.0], [5.0, 0.0]])
    times: dict[str, list[float]] = {"without": [], "with": []}
    journal_s: list[float] = []
    with Session(algorithm={"name": "kmeans", "params": {"n_clusters": 3}}, seed=1,
                 data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 5}},
                 federation={"n_clients": n}, runtime={"backend": "local", "progress": False}) as s, \
            tempfile.TemporaryDirectory() as tmp:
        layers = {mode: PrivacyLayer(s.executor, privacy, 1) for mode in times}
        for mode, layer in layers.items():
            layer.blocks = blocks
            layer.fingerprint = f"benchmark-{mode}"
            layer.begin_run(f"run-{mode}", f"benchmark {mode}", Path(tmp) if mode == "with" else None)
        for r in range(args.rounds):
            cohort = sample_blocks(1, r, blocks, 0.5).tolist()
            tasks = {c: Task(lloyd_stats, None, C) for c in cohort}
            for mode in (("without", "with") if r % 2 == 0 else ("with", "without")):
                SPENT.clear()
                t0 = time.perf_counter()
                res = layers[mode].execute(train(r), tasks)
                times[mode].append(time.perf_counter() - t0)
                assert len(res.replies) == len(cohort) and not res.failed
                if mode == "with":
                    journal_s.append(sum(SPENT))
            print(f"round {r}: {len(cohort)} clients, without {times['without'][-1]:.2f} s, with "
                  f"{times['with'][-1]:.2f} s (journal {journal_s[-1] * 1e3:.1f} ms)", flush=True)
        size = sum(p.stat().st_size for p in Path(tmp).glob("*.jsonl"))
    without, with_ = statistics.median(times["without"]), statistics.median(times["with"])
    share = statistics.median(j / t for j, t in zip(journal_s, times["with"]))
    print(f"{'':24}{'round (median s)':>18}{'journal (median ms)':>22}")
    print(f"{'without the journal':24}{without:>18.3f}{'-':>22}")
    print(f"{'with the journal':24}{with_:>18.3f}{statistics.median(journal_s) * 1e3:>22.1f}")
    print(f"journal share of a round (same rounds, median): {100 * share:.3f} %  (threshold 5 %: "
          f"{'met' if share < 0.05 else 'NOT met'})")
    print(f"median round with vs without: {100 * (with_ / without - 1):+.1f} % (alternating rounds; load moves it)")
    print(f"journal size after {args.rounds} rounds: {size / 1e6:.3f} MB")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
