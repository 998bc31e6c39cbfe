"""Cost of the persistent release log (fedray.layers.privacy.journal) in a secure-aggregation round.

Two runs of the same federation (k-means, ``--clients`` clients, fraction 0.5, whole blocks, secure
aggregation with ``mask_neighbors`` 4, local runtime), one after the other in this process:

* **without** the journal (``output=False``: the log is kept in the process only);
* **with** it (an output folder: every release is appended and flushed to disk before it is unmasked,
  the journal re-read under its lock before each decision).

Each run's rounds are timed from its history (``wall_s``), and, inside the run with the journal, the
seconds spent in the journal itself (locking, re-reading, appending, fsync) are timed per round, so
the share of a round it takes is measured in the same rounds it is part of, whatever the load.

Run: ``python benchmarks/release_log_cost.py [--clients 10000] [--rounds 3]``; quote it with the load
average it prints. The acceptance threshold is a journal share under 5 % of a round.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

from fedray.api.session import Session
from fedray.layers.privacy import journal
from fedray.layers.privacy.release import forget_releases

SPENT: list[float] = []  # seconds in the journal, one entry per call


def _timed(fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT.append(time.perf_counter() - t0)
    return wrapper


def _instrument() -> None:
    """Time every journal operation (open, lock, re-read, append + fsync)."""
    J = journal.Journal
    J._open = _timed(J._open)
    journal.fcntl.flock = _timed(journal.fcntl.flock)  # (this process only: the benchmark's)
    J.read_new = _timed(J.read_new)
    J.append = _timed(J.append)


def one_run(n: int, rounds: int, out: Path | None) -> dict[str, float]:
    forget_releases()
    cfg = dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3, "max_rounds": rounds, "tol": 1e-300,
                                                       "settle_window": 0}},
               data={"dataset": "blobs", "options": {"n_centers": 3, "points_per_client": 5}},
               federation={"n_clients": n, "fraction": 0.5, "rounds": rounds + 1}, seed=1,
               runtime={"backend": "local", "progress": False},
               privacy={"secure_aggregation": True, "mask_neighbors": 4})
    with Session(**cfg) as s:
        SPENT.clear()
        res = s.run(output=out if out is not None else False)
        spent = sum(SPENT)
    train = res.history[res.history["phase"] == "train"]
    walls = train["wall_s"].tolist()
    return {"rounds": len(walls), "round_s": statistics.median(walls) if walls else float("nan"),
            "journal_s_per_round": spent / max(1, len(walls) + 1),  # + the final evaluation's release
            "clients_per_round": float(train["clients_answered"].median()) if walls else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    logging.getLogger("fedray").setLevel(logging.ERROR)
    _instrument()
    print(f"load average before: {os.getloadavg()}  (n={args.clients}, {args.rounds} training rounds each)")
    without = one_run(args.clients, args.rounds, None)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        with_log = one_run(args.clients, args.rounds, out)
        size = sum(p.stat().st_size for p in (out / "release_log").glob("*.jsonl"))
    share = with_log["journal_s_per_round"] / with_log["round_s"]
    print(f"{'':28}{'round (median s)':>18}{'journal s/round':>18}{'clients/round':>15}")
    print(f"{'without the journal':28}{without['round_s']:>18.3f}{'-':>18}{without['clients_per_round']:>15.0f}")
    print(f"{'with the journal':28}{with_log['round_s']:>18.3f}{with_log['journal_s_per_round']:>18.4f}"
          f"{with_log['clients_per_round']:>15.0f}")
    diff = with_log["round_s"] / without["round_s"] - 1
    print(f"journal share of a round (same rounds): {100 * share:.2f} %   (threshold 5 %: "
          f"{'met' if share < 0.05 else 'NOT met'})")
    print(f"median round, with vs without (two runs, load may differ): {100 * diff:+.1f} %")
    print(f"journal size: {size / 1e6:.2f} MB")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
