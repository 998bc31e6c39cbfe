"""``python -m reproductions list | run PAPER/CLAIM | tables [--check]``: the lab's one command per claim."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time

from reproductions import common


def _list(args: argparse.Namespace) -> int:
    papers = [args.paper] if args.paper else common.PAPERS
    rows = [common.summarise(p, c) for p in papers for c in common.load_claims(p)]
    for r in rows:
        print(f"{r.paper}/{r.claim.id:<40} {r.verdict:<14} {common._ours(r)}")
    counts = common.verdict_counts(rows)
    print(f"{len(rows)} claims: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n))
    return 0


def _run(args: argparse.Namespace) -> int:
    paper, claim = common.find_claim(args.claim)
    if not claim.runner:
        why = claim.reason or "it has no runner"
        raise common.LabError(f"{paper}/{claim.id} cannot be run with one command: {why}")
    module, _, fn = claim.runner.partition(":")
    runner = getattr(importlib.import_module(module), fn)
    scale = args.scale or claim.scale
    seeds = args.seeds if args.seeds is not None else [0]
    data_dir = common.data_dir(args.data_dir)
    start = time.perf_counter()
    if args.quick:
        with common.scratch_results() as scratch:
            logging.getLogger("reproductions").info("--quick: records go to %s and are discarded", scratch)
            runner(claim=claim, scale=scale, seeds=seeds, quick=True, data_dir=data_dir)
    else:
        runner(claim=claim, scale=scale, seeds=seeds, quick=False, data_dir=data_dir)
        print(common.paper_table(paper).split("\n", 1)[0])
    logging.getLogger("reproductions").info("%s/%s done in %.0f s", paper, claim.id, time.perf_counter() - start)
    return 0


def _tables(args: argparse.Namespace) -> int:
    bad = common.problems()
    changed = [p for p, text in common.generated().items() if p.read_text() != text]
    if args.check:
        for line in bad:
            print(f"claim: {line}", file=sys.stderr)
        for p in changed:
            print(f"stale: {p.relative_to(common.REPO)} differs from its records; run `python -m reproductions "
                  "tables`", file=sys.stderr)
        return 1 if bad or changed else 0
    for p, text in common.generated().items():
        if p.read_text() != text:
            p.write_text(text)
            print(f"wrote {p.relative_to(common.REPO)}")
    for line in bad:
        print(f"claim: {line}", file=sys.stderr)
    return 1 if bad else 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m reproductions", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="every claim with its verdict and ours")
    p.add_argument("paper", nargs="?", choices=common.PAPERS)
    p = sub.add_parser("run", help="rerun one claim and record its runs (resumable: recorded runs are skipped)")
    p.add_argument("claim", help="PAPER/CLAIM, as `list` shows it")
    p.add_argument("--scale", choices=("reduced", "paper"), help="default: the claim's own")
    p.add_argument("--seeds", type=int, nargs="+", help="default: 0")
    p.add_argument("--quick", action="store_true", help="a small, fast form; records go to a scratch folder")
    p.add_argument("--data-dir", help="benchmark data (default: $FEDRAY_DATA_DIR, else ../shared/datasets)")
    p = sub.add_parser("tables", help="regenerate the claim tables from the records")
    p.add_argument("--check", action="store_true", help="change nothing; fail if a table differs from its records")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return {"list": _list, "run": _run, "tables": _tables}[args.cmd](args)
    except common.LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a fedray error is one line too
        from fedray import FedrayError

        if isinstance(exc, FedrayError):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
