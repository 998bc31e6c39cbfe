"""FedCRef (Pisa / IIT-CNR 2025): the main result and the sweeps of Section 6 (Tables 4-11).

Tables (``--tables``):

* ``main``      — the default setting: FedCRef, the no-federation ablation
  (``association="none"``: each client only re-assigns samples with its own cluster
  models), the perfect-association upper bound (``association="oracle"``:
  communities from the true classes), and central k-means / DEC with the true K;
* ``dirtiness`` — initial dirtiness 0 / 0.3 / 0.5 (Tables 5-6);
* ``overlap``   — overlap fraction 0 / 0.3 / 0.5 at dirtiness 0.3 (Tables 8-9);
* ``clients``   — 20 / 30 / 40 clients at dirtiness 0.3 (Tables 10-11, the paper's sweep).

Writes to ``--out``: ``runs.parquet`` (one row a run), ``tables.md`` (mean and
standard deviation over seeds), ``plots/*.png`` (curves over iterations, the final
community graph of the first seed).

    python -m reproductions.fedcref2025.tables --data-dir ../shared/datasets --tables main --seeds 0 1 2
    python -m reproductions.fedcref2025.tables --quick --out /tmp/fedcref-quick

The runs use ``preset: paper`` (the paper's association test and rules) unless
``--preset authors`` (the authors' code as it runs), ``--preset tuned`` or ``--params '{"preset": "tuned"}'`` asks for fedcref's defaults;
parameters in ``--params`` override the preset's values.

Why clusters do or do not associate (true- and false-pair distributions of the
association statistic, evaluation only): ``reproductions/fedcref2025/association_diagnostic.py``.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from fedray import Session, SharedSamplesWarning
from fedray.algorithms.fedcref_report import central_baseline, plot_community_graph, plot_curves

log = logging.getLogger("fedcref_tables")

VARIANTS = {"fedcref": {}, "no-federation": {"association": "none"}, "perfect-association": {"association": "oracle"}}
SWEEPS = {"dirtiness": ("dirtiness", [0.0, 0.3, 0.5]), "overlap": ("overlap", [0.0, 0.3, 0.5]),
          "clients": ("n_clients", [20, 30, 40])}
KEYS = ("acc_start", "acc_end", "communities_start", "communities_end", "wrong_associations_start",
        "wrong_associations_end", "isolated_clusters_start", "isolated_clusters_end", "classes_covered_start",
        "classes_covered_end", "pure_communities_end", "iterations")
QUICK = {"hidden": [32, 16], "local_epochs": 10, "batch_size": 8, "fed_rounds": 2, "max_iterations": 2}


def make_session(dataset: str, data_dir: str | None, n_clients: int, S: int, classes: list[int], overlap: float,
                 seed: int, params: dict[str, Any], options: dict[str, Any] | None = None) -> Session:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SharedSamplesWarning)
        session = Session(**session_config(dataset, data_dir, n_clients, S, classes, overlap, seed, params, options))
    for note in sorted({str(w.message) for w in caught if issubclass(w.category, SharedSamplesWarning)}):
        log.warning("seed %d: %s", seed, note)  # once a session, in the run's log
    return session


def session_config(dataset: str, data_dir: str | None, n_clients: int, S: int, classes: list[int], overlap: float,
                   seed: int, params: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The configuration (sections as keyword arguments) of one setting's session."""
    data_options = {"options": options} if options else {}
    return dict(algorithm={"name": "fedcref", "params": params},
                data={"dataset": dataset, "data_dir": data_dir, **data_options,
                      "partition": {"name": "class-subsets", "classes": classes, "samples_per_class": S,
                                    "overlap": overlap}},
                federation={"n_clients": n_clients, "rounds": 100_000}, runtime={"backend": "local"}, seed=seed)


def setting_values(args: argparse.Namespace, table: str, setting: Any, base: dict[str, Any]
                   ) -> tuple[int, float, dict[str, Any]]:
    """(clients, overlap, FedCRef parameters) of one setting of ``table``."""
    n_clients, overlap, params = args.clients, 0.0, dict(base)
    if table == "dirtiness":
        params["dirtiness"] = setting
    elif table == "overlap":
        overlap = setting
    elif table == "clients":
        n_clients = setting
    return n_clients, overlap, params


def run_setting(args: argparse.Namespace, table: str, setting: Any, seed: int, variants: list[str],
                base: dict[str, Any], central: bool, plots: Path | None) -> list[dict[str, Any]]:
    n_clients, overlap, params = setting_values(args, table, setting, base)
    rows, finals = [], {}
    with make_session(args.dataset, args.data_dir, n_clients, args.samples_per_class, args.classes, overlap, seed,
                      params, json.loads(args.data_options)) as s:
        for v in variants:
            t0 = time.perf_counter()
            res = s.run("fedcref", {**params, **VARIANTS[v]}, output=False)
            fin = res.final
            finals[v] = fin
            rows.append({"table": table, "setting": str(setting), "seed": seed, "variant": v,
                         **{k: fin.get(k) for k in KEYS}, "true_categories": fin["true_categories"],
                         "stop_reason": fin["stop_reason"], "wall_s": time.perf_counter() - t0})
            log.info("%s=%s seed %d %s: ACC %.3f -> %.3f, communities %s, wrong %.1f%%, %.0f s", table, setting, seed,
                     v, fin["acc_start"], fin["acc_end"], fin["communities_end"], fin["wrong_associations_end"] or 0,
                     rows[-1]["wall_s"])
            if plots is not None and v == "fedcref" and seed == args.seeds[0]:
                plot_community_graph(res.model, plots / f"graph_{table}_{setting}.png",
                                     title=f"FedCRef, {table} = {setting}, seed {seed}")
        if central:
            for m, r in central_baseline(s, seed=seed).items():
                rows.append({"table": table, "setting": str(setting), "seed": seed, "variant": f"central-{m}",
                             "acc_end": r["client_acc_mean"], "acc_global": r["acc"],
                             "true_categories": r["k"]})
    if plots is not None and seed == args.seeds[0]:
        plot_curves(finals, plots / f"curves_{table}_{setting}.png", true_k=finals[variants[0]]["true_categories"],
                    title=f"FedCRef, {table} = {setting}, seed {seed}")
    return rows


def summarize(df: pd.DataFrame) -> str:
    lines = []
    for table, d in df.groupby("table", sort=False):
        lines += [
            f"### {table}",
            "",
            "| setting | variant | seeds | ACC start | ACC end | communities start → end | "
            "wrong assoc. % start → end | isolated start → end | classes covered start → end | "
            "pure communities (end) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for (setting, variant), g in d.groupby(["setting", "variant"], sort=False):
            def ms(col: str, fmt: str = "{:.3f}", g: pd.DataFrame = g) -> str:
                v = pd.to_numeric(g[col], errors="coerce").dropna() if col in g else pd.Series(dtype=float)
                if v.empty:
                    return "—"
                return fmt.format(v.mean()) + (f" ± {fmt.format(v.std(ddof=0))}" if len(v) > 1 else "")

            def arrow(a: str) -> str:
                return f"{ms(a + '_start', '{:.1f}')} → {ms(a + '_end', '{:.1f}')}"

            lines.append(f"| {setting} | {variant} | {len(g)} | {ms('acc_start')} | {ms('acc_end')} | "
                         f"{arrow('communities')} | {arrow('wrong_associations')} | {arrow('isolated_clusters')} | "
                         f"{arrow('classes_covered')} | {ms('pure_communities_end', '{:.1f}')} |")
        lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (also checked against docs/reproductions.md's commands by the tests)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--data-options", default="{}", help="JSON of data.options, e.g. '{\"classes\": \"digits\"}' "
                    "for femnist")
    ap.add_argument("--tables", nargs="+", default=["main", "dirtiness", "overlap", "clients"],
                    choices=["main", *SWEEPS])
    ap.add_argument("--settings", nargs="+", type=float, default=None, help="only these values of a sweep")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--samples-per-class", type=int, default=300)
    ap.add_argument("--classes", nargs=2, type=int, default=[2, 4])
    ap.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS))
    ap.add_argument("--params", default="{}", help="JSON of FedCRef parameters, e.g. '{\"link\": \"mutual-best\"}'")
    ap.add_argument("--preset", default="paper", choices=["paper", "authors", "tuned"],
                    help="FedCRef preset under --params (paper: the paper's test and rules; authors: the authors' "
                         "code as it runs; tuned: fedcref's defaults)")
    ap.add_argument("--no-central", action="store_true")
    ap.add_argument("--out", default="results/fedcref")
    ap.add_argument("--quick", action="store_true", help="tiny settings on sklearn:digits (for tests)")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out/runs.parquet and skip "
                    "their (table, setting, seed); the same command then finishes an interrupted run")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    base = {"preset": args.preset, **json.loads(args.params)}
    if args.quick:
        args.dataset, args.clients, args.samples_per_class, args.seeds = "sklearn:digits", 4, 30, args.seeds[:1]
        base = {**QUICK, **base}
    out = Path(args.out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    if args.resume and (out / "runs.parquet").exists():
        rows = pd.read_parquet(out / "runs.parquet").to_dict("records")
    done = {(r["table"], r["setting"], r["seed"]) for r in rows}
    for table in args.tables:
        if table == "main":
            settings, variants = ["default"], args.variants or list(VARIANTS)
        else:
            settings = args.settings or SWEEPS[table][1]
            if args.quick:
                settings = settings[1:2] if table != "clients" else [4]
            variants = args.variants or ["fedcref", "no-federation"]
        for setting in settings:
            if table == "clients":
                setting = int(setting)
            for seed in args.seeds:
                if (table, str(setting), seed) in done:
                    log.info("%s=%s seed %d: in %s already", table, setting, seed, out / "runs.parquet")
                    continue
                rows += run_setting(args, table, setting, seed, variants, base,
                                    central=table == "main" and not args.no_central and not args.quick,
                                    plots=out / "plots")
                pd.DataFrame(rows).to_parquet(out / "runs.parquet", index=False)
    df = pd.DataFrame(rows)
    header = (f"FedCRef on {args.dataset}: {args.clients} clients, {args.classes[0]}-{args.classes[1]} classes each, "
              f"{args.samples_per_class} samples per class, seeds {args.seeds}, parameters {base}\n\n")
    (out / "tables.md").write_text(header + summarize(df))
    log.info("wrote %s", out)
    return df


if __name__ == "__main__":
    main()
