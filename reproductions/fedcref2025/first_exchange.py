"""FedCRef's first exchange over the samples a class S, the dirtiness and τ (Table 5's "start" columns).

The paper's client setting (Table 1: 25 clients, 2–5 classes each, no overlap, a dirty start) on three
sets, S = 150, 300 and 500 samples a class, dirtiness 0.3 and 0.5: each client's clusters get Phase 1's
autoencoders (20 epochs), and the association graph of the first exchange is scored against the
clusters' majority classes (evaluation only). One build (the costly part: data, dirty start, training,
error matrices) serves every rule, so each build is scored with

* ``authors τ=0.2`` / ``authors τ=0.25``: the authors' test (``preset: authors``): min-max over the
  cluster, P = 75, strict ``<``, no link where every difference is equal, the one-sided first-link scan;
* ``tail τ=0.2`` / ``tail τ=0.25``: the same with the size-aware ``tail`` normalisation (an option);
* ``authors P=85 τ=0.2``, ``authors P=90 τ=0.2``, ``authors τ=0.1``, ``authors τ=0.3``: Table 7's cells;
* ``authors τ=0.15``: the lower τ the paper takes for Fashion-MNIST;
* ``defaults``: fedray's default test (relative, P = 95, τ = 0.1, best links, ratio 0.5).

Each (set, S, dirtiness, seed, rule) is one record of ``results/first-exchange.csv`` (S = 500 at scale
``paper``, the others ``reduced``), recorded as each build is scored; builds are cached under
``runs/fedcref2025-builds`` keyed on every build parameter, so a rerun only scores. ``--plot`` draws the
curve over S from the records (``first_exchange.png``) and writes ``first_exchange.md``.

    python -m reproductions.fedcref2025.first_exchange --data-dir ../shared/datasets --seeds 0 1 2
    python -m reproductions run fedcref2025/table5-start-mnist-train --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedray.algorithms.fedcref_rules import association_quality, communities, link_clusters
from fedray.algorithms.fedcref_tools import one_thread
from reproductions.common import REPO, record_run, recorded, scratch_results
from reproductions.common import data_dir as default_data_dir
from reproductions.fedcref2025 import association_diagnostic as diag

log = logging.getLogger("fedcref_first_exchange")

PAPER, RECORDS = "fedcref2025", "first-exchange"
SETS = {"mnist-train": ("mnist", {"part": "train"}), "emnist-mnist": ("emnist:mnist", {}),
        "fashion-mnist": ("fashion-mnist", {"part": "train"})}
S_VALUES, DIRTINESS = (500, 150, 300), (0.3, 0.5)
NAN = float("nan")
#: rule name -> (normalisation, P, τ, link, strict, equal, ratio)
RULES: dict[str, tuple[str, float, float, str, bool, float, float]] = {
    "authors τ=0.2": ("cluster", 75, 0.2, "first-scan", True, NAN, 0.0),
    "authors τ=0.25": ("cluster", 75, 0.25, "first-scan", True, NAN, 0.0),
    "tail τ=0.2": ("tail", 75, 0.2, "first-scan", True, NAN, 0.0),
    "tail τ=0.25": ("tail", 75, 0.25, "first-scan", True, NAN, 0.0),
    "authors P=85 τ=0.2": ("cluster", 85, 0.2, "first-scan", True, NAN, 0.0),
    "authors P=90 τ=0.2": ("cluster", 90, 0.2, "first-scan", True, NAN, 0.0),
    "authors τ=0.1": ("cluster", 75, 0.1, "first-scan", True, NAN, 0.0),
    "authors τ=0.3": ("cluster", 75, 0.3, "first-scan", True, NAN, 0.0),
    "authors τ=0.15": ("cluster", 75, 0.15, "first-scan", True, NAN, 0.0),
    "defaults": ("relative", 95, 0.1, "best", False, 0.0, 0.5),
}
CACHE = REPO / "runs" / "fedcref2025-builds"


def variant(S: int, dirtiness: float, rule: str) -> str:
    return f"S={S} d={dirtiness:g} {rule}"


def scale_of(S: int) -> str:
    return "paper" if S == 500 else "reduced"


def build_args(dataset: str, options: dict, S: int, dirtiness: float, data_dir: str | None,
               quick: bool = False) -> argparse.Namespace:
    """The diagnostic's arguments of one build (so its cache key is the diagnostic's)."""
    argv = ["--dataset", dataset, "--data-options", json.dumps(options), "--clients", "25", "--classes", "2", "5",
            "--samples-per-class", str(S), "--dirtiness", str(dirtiness)]
    if quick:
        argv = ["--dataset", "sklearn:digits", "--clients", "4", "--classes", "2", "3", "--samples-per-class", "20",
                "--dirtiness", str(dirtiness), "--epochs", "2", "--hidden", "8", "4"]
    a = diag.parser().parse_args(argv + (["--data-dir", data_dir] if data_dir else []))
    a.epochs = a.epochs[0]
    return a


def score(b: dict[str, Any], rule: str) -> dict[str, float]:
    """The first exchange's graph under ``rule``, scored against the clusters' majority classes."""
    norm, P, tau, link, strict, equal, ratio = RULES[rule]
    S = diag.statistics(b, P, norm, equal=equal)
    edges = link_clusters(S, b["owner"], tau, link, ratio, strict)
    groups, _ = communities(len(b["owner"]), edges)
    q = association_quality(edges, groups, b["node_class"], len(b["owner"]))
    both = np.fmax(S, S.T)
    same = b["node_class"][:, None] == b["node_class"][None, :]
    other = b["owner"][:, None] != b["owner"][None, :]
    ok = (both < tau) if strict else (both <= tau)
    return {**q, "clusters": float(len(b["owner"])), "true_pass": float(np.mean(ok[same & other])),
            "false_pass": float(np.mean(ok[~same & other])), "shared_draws": float(b.get("repeats", 0))}


def run_grid(sets: list[str], sizes: list[int], dirt: list[float], seeds: list[int], data_dir: str | None,
             quick: bool = False, cache: Path = CACHE) -> int:
    """Build (or read) and score every cell, most informative first: by seed, then S, then dirtiness, then set.

    Returns the number of records written."""
    cache.mkdir(parents=True, exist_ok=True)
    have = recorded(PAPER, RECORDS)
    done = {(r.method, r.variant, int(r.seed)) for r in have.itertuples()}
    written = 0
    with one_thread():
        for seed in seeds:
            for S in sizes:
                for d in dirt:
                    for name in sets:
                        todo = [r for r in RULES if (name, variant(S, d, r), seed) not in done]
                        if not todo:
                            continue
                        dataset, options = SETS[name]
                        a = build_args(dataset, options, S, d, data_dir, quick)
                        b = diag.cached_build(a, seed, cache)
                        for rule in todo:
                            record_run(PAPER, RECORDS, method=name, variant=variant(S, d, rule), seed=seed,
                                       scale=scale_of(S), sizes=f"25 clients, 2–5 classes, S = {S}, first exchange",
                                       metrics=score(b, rule), config={**b["key"], "rule": rule},
                                       wall_s=b["wall_s"], load=b["load"][1])
                            written += 1
    return written


def run_claim(claim, scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    """The lab's runner: the claim's set at the claim's scale (S = 500, or 150 and 300), both dirtiness levels."""
    sizes = [20] if quick else ([500] if scale == "paper" else [150, 300])
    sets = [claim.select["method"]] if "method" in claim.select else list(SETS)
    run_grid(sets, sizes, list(DIRTINESS), seeds, data_dir, quick=quick)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds of each (set, S, dirtiness, rule): communities (pure), classes, wrong %, isolated."""
    parts = df["variant"].str.extract(r"S=(?P<S>\d+) d=(?P<d>[\d.]+) (?P<rule>.+)")
    df = pd.concat([df[["method", "seed"]], parts, df.filter(like="m:")], axis=1)
    df["S"] = df["S"].astype(int)
    cols = ["m:communities", "m:pure_communities", "m:classes_covered", "m:wrong_associations",
            "m:isolated_clusters", "m:clusters"]
    g = df.groupby(["method", "d", "rule", "S"])
    out = g[cols].mean().round(2)
    out["seeds"] = g["seed"].apply(lambda s: ",".join(map(str, sorted(s))))
    return out.reset_index()


def plot(df: pd.DataFrame, path: Path, rules: tuple[str, ...] = ("authors τ=0.2", "authors τ=0.25", "tail τ=0.2",
                                                                  "tail τ=0.25", "defaults")) -> None:
    """Communities (pure), classes covered and wrong associations of the first exchange against S."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary(df)
    sets = list(dict.fromkeys(s["method"]))
    fig, axes = plt.subplots(3, len(sets), figsize=(4.2 * len(sets), 9), squeeze=False)
    for j, name in enumerate(sets):
        for rule in rules:
            for d, style in (("0.3", "-"), ("0.5", "--")):
                r = s[(s["method"] == name) & (s["rule"] == rule) & (s["d"] == d)].sort_values("S")
                if r.empty:
                    continue
                for i, col in enumerate(("m:pure_communities", "m:classes_covered", "m:wrong_associations")):
                    axes[i, j].plot(r["S"], r[col], style, marker="o", label=f"{rule}, d={d}")
        axes[0, j].set_title(name)
        for i, lab in enumerate(("pure communities", "classes covered (of 10)", "wrong associations %")):
            axes[i, j].set_ylabel(lab)
            axes[i, j].set_xlabel("samples a class S")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("FedCRef's first exchange (25 clients, 2–5 classes), means over the recorded seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def markdown(df: pd.DataFrame) -> str:
    s = summary(df)
    lines = ["| set | dirtiness | rule | S | communities (pure) | classes covered | wrong % | isolated / clusters "
             "| seeds |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in s.sort_values(["method", "d", "rule", "S"]).itertuples():
        lines.append(f"| {r.method} | {r.d} | {r.rule} | {r.S} | {r[5]:g} ({r[6]:g}) | {r[7]:g} | {r[8]:.2f} | "
                     f"{r[9]:g} / {r[10]:g} | {r.seeds} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    ap.add_argument("--samples-per-class", type=int, nargs="+", default=list(S_VALUES))
    ap.add_argument("--dirtiness", type=float, nargs="+", default=list(DIRTINESS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--quick", action="store_true", help="sklearn digits, 4 clients; records to a scratch folder")
    ap.add_argument("--plot", action="store_true", help="only draw first_exchange.png and first_exchange.md")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    here = Path(__file__).resolve().parent
    if args.plot:
        df = recorded(PAPER, RECORDS)
        plot(df, here / "first_exchange.png")
        (here / "first_exchange.md").write_text(markdown(df))
        return 0
    if args.quick:
        with scratch_results() as root:
            run_grid(args.sets[:1], [20], [0.3], [0], None, quick=True, cache=root / "builds")
        return 0
    run_grid(args.sets, args.samples_per_class, args.dirtiness, args.seeds, default_data_dir(args.data_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
