"""Seconds per client of generating ``blobs`` shards: one client at a time against the block generator.

Builds the shards of ``--clients`` clients (``--points`` points x ``--features`` features,
``--centers`` centres) with ``fedray.data.blobs.generate_client_blobs`` client by client (the
recipe a client host used to run per client) and with ``fedray.data.blobs.generate_block``
in one call, checks that both give the same bits, and prints microseconds per client for
each, with the machine's load (``os.getloadavg``) before and after::

    python benchmarks/blobs_block.py                          # 100 000 clients x 10 x 8
    python benchmarks/blobs_block.py --alpha 0.5              # Dirichlet weights per client
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from fedray.data.blobs import BLOBS_DEFAULTS, generate_block, generate_client_blobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--points", type=int, default=10)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--centers", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=None, help="Dirichlet alpha (data.partition dirichlet)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    source = {"kind": "blobs", "seed": args.seed, "alpha": args.alpha,
              **{**BLOBS_DEFAULTS, "points_per_client": args.points, "n_features": args.features,
                 "n_centers": args.centers}}
    ids = np.arange(args.clients)
    load_before = os.getloadavg()
    generate_client_blobs(source, 0)  # the centres are drawn once per process, outside both timings
    t0 = time.perf_counter()
    shards = [generate_client_blobs(source, int(c)) for c in ids]
    one_by_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    X, y, _ = generate_block(source, ids)
    block = time.perf_counter() - t0
    same = np.array_equal(X.view(np.uint64), np.concatenate([s[0] for s in shards]).view(np.uint64)) and \
        np.array_equal(y, np.concatenate([s[1] for s in shards]))
    per = 1e6 / args.clients
    print(f"clients {args.clients}, {args.points} points x {args.features} features, alpha {args.alpha}")
    print(f"one by one: {one_by_one * per:.2f} us/client   block: {block * per:.2f} us/client   "
          f"ratio {one_by_one / block:.1f}   same bits: {same}")
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
