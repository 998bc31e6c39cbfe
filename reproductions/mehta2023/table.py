"""Table I of Mehta & Shao 2023: FLACC against FedAvg, no federation and clustered FL methods.

Every method runs on the four federations with hidden groups (rotated, grouped,
label-swapped, grouped+rotated) for several seeds; the table gives the mean
client test accuracy (mean ± std over seeds) in the paper's layout (methods as
rows, federations as columns; IFCA with k = s-1, s, s+1 models and FL+HC with
three cut-off distances, s = the number of true groups). pFedMe and Per-FedAvg
are not built in; a plug-in joins the table by reference (``--methods ...
examples.plugins.perfedavg:PerFedAvg``), with ``--plugin-params KEY=V1,V2`` giving
one row per value (as the paper tunes Per-FedAvg's alpha). CFL needs every client
in every round, so it runs with fraction 1.0 (as in the paper).

Outputs (``--out``): ``results.parquet`` (one row a run), ``rounds.parquet``
(one row a round of every run), ``table.md`` (the table, the clusters FLACC
found, the settings), ``accuracy.png`` (FLACC, FedAvg and local over rounds,
first seed) and ``clusters.png`` (the clusters FLACC found, first seed, as in
the paper's Fig. 4).

Examples::

    python -m reproductions.mehta2023.table --out runs/flacc_digits            # sklearn:digits, 3 seeds
    python -m reproductions.mehta2023.table --federations rotated --methods local fedavg flacc \\
        --seeds 0 1 2 3 4 --samples 80 240 --rounds 100 --n-merge 1     # docs/reproductions.md
    python -m reproductions.mehta2023.table --dataset mnist --data-dir ../shared/datasets \\
        --federations rotated --out runs/flacc_mnist
    python -m reproductions.mehta2023.table --federations rotated --methods fedavg flacc \
        examples.plugins.perfedavg:PerFedAvg --plugin-params alpha=0.01,0.03 \
        --seeds 0 1 2 --samples 80 240 --rounds 100 --n-merge 1                # a plug-in in the table
    python -m reproductions.mehta2023.table --quick --out /tmp/flacc_quick      # seconds, for tests
"""
from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import fedray
from fedray.algorithms.flacc import plot_accuracy, plot_clusters

log = logging.getLogger("flacc_table")

FEDERATIONS = ["rotated", "grouped", "label-swapped", "grouped+rotated"]
N_GROUPS = {"rotated": 4, "grouped": 5, "label-swapped": 5, "grouped+rotated": 4}
METHODS = ["local", "fedavg", "cfl", "ifca", "flhc", "flacc"]
LABELS = {"local": "NoFed", "fedavg": "FedAvg", "cfl": "CFL", "ifca": "IFCA (k)", "flhc": "FL+HC (d)",
          "flacc": "FLACC", "flacc-control": "FLACC control (random groups)"}
#: FLACC with ``control: random-groups``: the same run up to separation, then random groups of the
#: sizes of the clusters found (not in the default method list: it doubles FLACC's cost)
CONTROL = "flacc-control"
#: FL+HC cut-off distances d: on raw updates (the default, as Briggs et al.) the Ward
#: heights scale with the update norm (about 1 for cnn8 on digits, E = 5, lr 0.1: the
#: top merges of 40 clients lie at 1.4-4.2); on unit-length updates (--flhc-normalize)
#: they lie in [0, 2]
FLHC_D = (2.0, 3.0, 4.0)
FLHC_D_NORMALIZED = (0.5, 0.75, 1.0)


def is_plugin(method: str) -> bool:
    """A method given as ``package.module:ClassName`` (loaded by fedray like any plug-in)."""
    return ":" in method


def method_label(method: str) -> str:
    """The row name: the paper's for built-ins, the class name for a plug-in."""
    return LABELS.get(method, method.rpartition(":")[2])


def parse_plugin_params(items: list[str]) -> dict[str, list[Any]]:
    """``["alpha=0.01,0.03", "personal_steps=1"]`` -> ``{"alpha": [0.01, 0.03], "personal_steps": [1]}``."""
    import yaml

    out: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise SystemExit(f"--plugin-params: expected KEY=VALUE[,VALUE...]; got {item!r}")
        out[key] = [yaml.safe_load(v) for v in values.split(",")]
    return out


def variants(method: str, federation: str, quick: bool, n_merge: int = 2,
             plugin_params: dict[str, list[Any]] | None = None, flhc_d: tuple[float, ...] | None = None,
             flhc_normalize: bool = False, ifca_k: tuple[int, ...] | None = None,
             baseline_weighted: bool = False, flacc_params: dict[str, Any] | None = None
             ) -> list[tuple[str, dict[str, Any]]]:
    """(label, extra params) of each run of ``method`` on ``federation``.

    ``flhc_d`` / ``ifca_k`` replace FL+HC's cut-offs and IFCA's k (default: the paper's
    three values around the optimum); ``flhc_normalize`` clusters unit-length updates;
    ``baseline_weighted`` makes IFCA and CFL average n-weighted (FedAvg) instead of the
    originals' plain mean; ``flacc_params`` are further parameters of FLACC and its control arm
    (e.g. ``{"alpha_0": 0.1}``)."""
    if is_plugin(method):
        import itertools

        grid = plugin_params or {}
        out = []
        for combo in itertools.product(*grid.values()):
            extra = dict(zip(grid, combo))
            label = " ".join(f"{k}={v}" for k, v in extra.items() if len(grid[k]) > 1)
            out.append((label, extra))
        return out
    s = N_GROUPS[federation]
    w = {"weighted": True} if baseline_weighted else {}
    if method == "ifca":
        ks = list(ifca_k) if ifca_k else ([s] if quick else [max(2, s - 1), s, s + 1])
        return [(f"k={k}", {"n_clusters": k, **w}) for k in ks]
    if method == "flhc":
        grid = FLHC_D_NORMALIZED if flhc_normalize else FLHC_D
        ds = list(flhc_d) if flhc_d else (grid[1:2] if quick else grid)
        return [(f"d={d:g}", {"distance_threshold": d, **({"normalize": True} if flhc_normalize else {}),
                              **({"n_pre": 2} if quick else {})}) for d in ds]
    if method in ("flacc", CONTROL):
        control = {"control": "random-groups"} if method == CONTROL else {}
        return [("", {"n_merge": n_merge, **control, **({"n_sep": 2} if quick else {}), **(flacc_params or {})})]
    if method == "cfl":
        return [("", {**({"warmup": 1} if quick else {}), **w})]
    return [("", {})]


def train_params(args: argparse.Namespace) -> dict[str, Any]:
    """The training parameters every method of the table shares."""
    train = {"epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size, "eval_every": args.eval_every,
             "model": args.model}
    if args.stack_clients != "gpu":
        train["stack_clients"] = args.stack_clients
    return train


def session_config(args: argparse.Namespace, fed: str, seed: int) -> dict[str, Any]:
    """The configuration of the session that runs every method on federation ``fed`` with ``seed``."""
    return {"seed": seed, "algorithm": {"name": "fedavg", "params": train_params(args)},
            "data": {"dataset": args.dataset, "data_dir": args.data_dir, "options": args.data_options,
                     "partition": {"name": fed, "samples": list(args.samples), **args.partition_options}},
            "federation": {"n_clients": args.n_clients, "fraction": args.fraction, "rounds": args.rounds},
            "runtime": {"backend": args.backend, "progress": False, "num_cpus": args.num_cpus,
                        "batched": not args.per_client, "clients_per_actor": args.clients_per_actor}}


def run_table(args: argparse.Namespace) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Run every (federation, seed, method, variant); returns runs, rounds and FLACC details."""
    train = train_params(args)
    runs, rounds, details = [], [], {}
    for fed in args.federations:
        for seed in args.seeds:
            cfg = session_config(args, fed, seed)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", fedray.SharedSamplesWarning)
                session = fedray.Session(cfg)
            notes = sorted({str(w.message) for w in caught if issubclass(w.category, fedray.SharedSamplesWarning)})
            with session:
                for method in args.methods:
                    for label, extra in variants(method, fed, args.quick, args.n_merge, args.plugin_params,
                                                 args.flhc_d, args.flhc_normalize, args.ifca_k,
                                                 args.baseline_weighted, args.flacc_params):
                        base = session.config
                        if method == "cfl":  # CFL needs every client every round (paper: all 100)
                            session.config = base.model_copy(deep=True)
                            session.config.federation.fraction = 1.0
                        t0 = time.perf_counter()
                        log.info("%s seed %d %s %s: starting", fed, seed, method, label)
                        try:
                            algo = "flacc" if method == CONTROL else method
                            res = session.run(algo, {**train, **extra}, output=False, progress=True)
                        finally:
                            session.config = base
                        wall = time.perf_counter() - t0
                        fin = res.final
                        row = {"dataset": args.dataset, "federation": fed, "seed": seed, "method": method,
                               "variant": label, "accuracy": 100 * float(fin["accuracy"]),
                               "n_clusters": float(fin.get("n_clusters", np.nan)), "ari": float(fin.get("ari", np.nan)),
                               "rounds": int(res.summary["rounds"]), "bytes_down": res.summary["bytes"]["down"],
                               "bytes_up": res.summary["bytes"]["up"], "wall_s": wall,
                               "separation_round": fin.get("separation_round"),
                               "found_ari": float(fin.get("found_ari", np.nan)),
                               "shared_samples": bool(notes)}
                        runs.append(row)
                        log.info("%s seed %d %s %s: acc %.2f clusters %s ari %.3f (%.1f s)", fed, seed, method, label,
                                 row["accuracy"], row["n_clusters"], row["ari"], wall)
                        h = res.history
                        keep = [c for c in ("round", "phase", "accuracy", "n_clusters", "ari", "merges") if c in h]
                        hh = h[keep].copy()
                        hh[["federation", "seed", "method", "variant"]] = [fed, seed, method, label]
                        rounds.append(hh)
                        if method == "flacc":
                            details[(fed, seed)] = {"assignment": np.asarray(fin["assignment"]),
                                                    "true_groups": np.asarray(res.model["true_groups"]),
                                                    "n_samples": res.clients["n_samples"].to_numpy(),
                                                    "group_names": session.info.extras.get("group_names"),
                                                    "merges": fin["merges"], "notes": notes,
                                                    "client_accuracy": fin.get("client_accuracy"),
                                                    "separation_round": fin.get("separation_round"),
                                                    "similarity_mean": res.model.get("similarity_mean")}
    return pd.DataFrame(runs), pd.concat(rounds, ignore_index=True), details


def markdown(runs: pd.DataFrame, args: argparse.Namespace, details: dict[str, Any]) -> str:
    """The table in the paper's layout, then FLACC's clusters and the settings."""
    # a method without variants has the label "", which a CSV read back (a resumed run) gives as NaN
    runs = runs.assign(variant=runs["variant"].fillna("").astype(str))
    feds = [f for f in args.federations if f in set(runs["federation"])]
    lines = ["| method | " + " | ".join(f"{f} {args.dataset}" for f in feds) + " |",
             "| --- |" + " --- |" * len(feds)]
    for method in args.methods:
        sub = runs[runs["method"] == method]
        for label in dict.fromkeys(sub["variant"]):
            cells = []
            for f in feds:
                a = sub[(sub["variant"] == label) & (sub["federation"] == f)]["accuracy"]
                cells.append(f"{a.mean():.2f} ± {a.std(ddof=0):.2f}" if len(a) else "—")
            name = method_label(method) + (f" {label}" if label else "")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    fl = runs[runs["method"] == "flacc"]
    if len(fl):
        lines += ["", "Clusters found by FLACC (true number of groups s; exact = ARI 1):", "",
                  "| federation | s | clusters (mean ± std) | ARI (mean) | exact | separation round (mean) |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for f in feds:
            a = fl[fl["federation"] == f]
            sep = pd.to_numeric(a["separation_round"], errors="coerce")
            lines.append(f"| {f} | {N_GROUPS[f]} | {a['n_clusters'].mean():.1f} ± {a['n_clusters'].std(ddof=0):.1f} | "
                         f"{a['ari'].mean():.3f} | {int((a['ari'] > 0.999).sum())}/{len(a)} | "
                         f"{sep.mean():.1f} |")
    shared = sorted({n for d in details.values() for n in d["notes"]})
    lines += [
        "",
        f"Settings: {args.dataset}, {args.n_clients} clients, fraction {args.fraction} "
        f"(CFL: 1.0), samples per client {args.samples[0]}-{args.samples[1]} (85/15 train/test), "
        f"{args.rounds} rounds, model {args.model}, SGD lr {args.lr}, E = {args.epochs}, "
        f"B = {args.batch_size}, seeds {', '.join(map(str, args.seeds))}; FLACC: "
        f"alpha_0 = {args.flacc_params.get('alpha_0', 0)}, T = {args.flacc_params.get('memory', 10)}, "
        f"n_merge = {args.n_merge}, N_sep = {2 if args.quick else 10}; FL+HC: {2 if args.quick else 10} FedAvg rounds "
        f"before clustering ({'unit-length' if args.flhc_normalize else 'raw'} updates, Ward linkage); "
        f"CFL: eps1 = 0.4, eps2 = 1.6; IFCA and CFL average "
        f"{'n-weighted (FedAvg)' if args.baseline_weighted else 'the plain mean (as the originals)'}.",
    ]
    if shared:  # one line, not one note per federation and seed
        kinds = sorted({n.split(" federation of ")[0] for n in shared})
        lines += ["", f"Note: clients share samples in the {', '.join(kinds)} federation(s): the {args.dataset} pool "
                  "is smaller than what the clients ask for; no client's test row is in any client's training rows "
                  f"(e.g. {shared[0].split(': ', 1)[-1]})."]
    return "\n".join(lines) + "\n"


def figures(rounds: pd.DataFrame, details: dict[str, Any], args: argparse.Namespace, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    feds = [f for f in args.federations if f in set(rounds["federation"])]
    seed = args.seeds[0]
    paths = []
    fig, axes = plt.subplots(1, len(feds), figsize=(4.2 * len(feds), 3.4), squeeze=False)
    for ax, f in zip(axes[0], feds):
        r = rounds[(rounds["federation"] == f) & (rounds["seed"] == seed)]
        hs = {LABELS[m]: r[r["method"] == m] for m in ("flacc", "fedavg", "local") if m in set(r["method"])}
        d = details.get((f, seed))
        sep = None
        if d is not None:
            fl = r[r["method"] == "flacc"]
            sep_rows = fl[fl["phase"] == "separated"]["round"]
            sep = int(sep_rows.min()) if len(sep_rows) else None
        plot_accuracy(hs, ax=ax, separation_round=sep, title=f"{f} {args.dataset}")
    fig.tight_layout()
    paths.append(out / "accuracy.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    have = [f for f in feds if (f, seed) in details]
    if have:
        fig, axes = plt.subplots(len(have), 1, figsize=(9, 2.6 * len(have)), squeeze=False)
        for ax, f in zip(axes[:, 0], have):
            d = details[(f, seed)]
            plot_clusters(d["assignment"], d["true_groups"], d["n_samples"], ax=ax, group_names=d["group_names"],
                          title=f"{f} {args.dataset}: {len(np.unique(d['assignment']))} clusters found by FLACC")
        fig.tight_layout()
        paths.append(out / "clusters.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _clients_per_actor(v: str) -> str | int:
    """``auto`` or a positive whole number (argparse names this function in its one-line error)."""
    if v == "auto":
        return v
    n = int(v)
    if n < 1:
        raise ValueError(v)
    return n


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dataset", default="sklearn:digits", help="sklearn:digits (embedded) or mnist")
    p.add_argument("--data-dir", default=None, help="folder holding mnist/ (default $FEDRAY_DATA_DIR)")
    p.add_argument("--data-options", type=json.loads, default={},
                   help="JSON of data.options, e.g. '{\"classes\": \"letters\"}' for femnist")
    p.add_argument("--federations", nargs="+", default=FEDERATIONS, choices=FEDERATIONS)
    p.add_argument("--partition-options", type=json.loads, default={},
                   help="JSON of further data.partition options, e.g. '{\"label_sets\": \"case\"}'")
    p.add_argument("--methods", nargs="+", default=METHODS,
                   help=f"built-in ({' '.join(METHODS)}), {CONTROL} (FLACC's random-groups control arm) or a "
                        "plug-in package.module:ClassName")
    p.add_argument("--plugin-params", nargs="+", default=[], metavar="KEY=V1[,V2]",
                   help="parameters of plug-in methods; several values give one row each")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0 1 2 (quick: 0)")
    p.add_argument("--n-clients", type=int, default=None, help="default 40 (quick: 12)")
    p.add_argument("--fraction", type=float, default=None, help="default 0.25 (quick: 0.5)")
    p.add_argument("--samples", nargs=2, type=int, default=None, help="samples per client, default 200 800")
    p.add_argument("--rounds", type=int, default=None, help="N_server, default 50 (quick: 4)")
    p.add_argument("--epochs", type=int, default=None, help="local epochs E, default 5 (quick: 1)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=None, help="evaluate every r rounds, default 5 (quick: 2)")
    p.add_argument("--n-merge", type=int, default=2,
                   help="FLACC entity pairs merged per round (paper's experiments: 2; it recommends 1 when "
                        "nothing is known of the federation)")
    p.add_argument("--flhc-d", nargs="+", type=float, default=None,
                   help=f"FL+HC cut-off distances (default {' '.join(map(str, FLHC_D))} on raw updates, "
                        f"{' '.join(map(str, FLHC_D_NORMALIZED))} with --flhc-normalize)")
    p.add_argument("--flhc-normalize", action="store_true",
                   help="FL+HC clusters unit-length updates (default: raw updates, as Briggs et al.)")
    p.add_argument("--ifca-k", nargs="+", type=int, default=None, help="IFCA's k values (default s-1, s, s+1)")
    p.add_argument("--flacc-params", type=json.loads, default={},
                   help="JSON of further parameters of flacc and flacc-control, e.g. '{\"alpha_0\": 0.1}'")
    p.add_argument("--baseline-weighted", action="store_true",
                   help="IFCA and CFL average n-weighted (FedAvg) instead of the plain mean of the originals")
    p.add_argument("--model", default="auto", help="auto = cnn8 for 8x8 digits, the paper's cnn28 for 28x28")
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of an embedded Ray instance")
    p.add_argument("--clients-per-actor", default="auto", type=_clients_per_actor,
                   help="clients hosted by one actor with --backend ray (auto: one actor per CPU)")
    p.add_argument("--stack-clients", choices=["gpu", "always", "never"], default="gpu",
                   help="train a host's clients as one stacked network: on a GPU only (default), always, never")
    p.add_argument("--per-client", action="store_true",
                   help="train client by client (runtime.batched = false), to check the batched training")
    p.add_argument("--quick", action="store_true", help="a few seconds: 12 clients, 4 rounds, one variant each")
    p.add_argument("--out", default="runs/flacc_table")
    args = p.parse_args(argv)
    bad = [m for m in args.methods if m not in METHODS and m != CONTROL and not is_plugin(m)]
    if bad:
        p.error(f"--methods: unknown {', '.join(map(repr, bad))}; choose from {', '.join(METHODS)}, {CONTROL} "
                "or give a plug-in as package.module:ClassName")
    if not isinstance(args.flacc_params, dict):
        p.error(f"--flacc-params: expected a JSON object such as '{{\"alpha_0\": 0.1}}'; got {args.flacc_params!r}")
    try:
        fedray.make_config({"algorithm": {"name": "flacc", "params": args.flacc_params}})
    except fedray.ConfigError as exc:
        p.error(f"--flacc-params: {exc}")
    args.plugin_params = parse_plugin_params(args.plugin_params)
    q = args.quick
    defaults = {"seeds": [0] if q else [0, 1, 2], "n_clients": 12 if q else 40, "fraction": 0.5 if q else 0.25,
                "samples": (30, 60) if q else (200, 800), "rounds": 4 if q else 50, "epochs": 1 if q else 5,
                "eval_every": 2 if q else 5}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    runs, rounds, details = run_table(args)
    runs.to_parquet(out / "results.parquet", index=False)
    rounds.to_parquet(out / "rounds.parquet", index=False)
    md = markdown(runs, args, details)
    (out / "table.md").write_text(md)
    figures(rounds, details, args, out)
    log.info("%s\nwritten to %s in %.0f s (fedray %s)", md, out, time.perf_counter() - t0, fedray.__version__)
    return runs


if __name__ == "__main__":
    main()
