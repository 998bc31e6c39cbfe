"""Corcuera Bárcena et al. (2021), Table 1: federated FCM with a fraction γ of the clients per round.

20 clients with an IID (stratified) split; γ ∈ {0.25, 0.5, 0.75, 1}; λ = 2,
ε = 0.005, at most 30 rounds; random initial centres (uniform in the min-max
scaled bounding box), the same for the federated and the central FCM of a seed.
Reported: ARI of the argmax memberships on the union against the reference labels
and ‖V_fed − V_central‖_F under the best permutation of the centres (0 at γ = 1),
means over 10 seeds.

The paper's sets are xclara, s-set1, pendigits and waveform; the shared benchmark
folder holds s-set1 (``sipu/s1``); ``waveform`` is drawn by Breiman's recipe
(:mod:`reproductions.barcena2021.waveform`: 5000 × 21, 3 classes); xclara and
pendigits are absent, so ``uci/statlog`` (Statlog image segmentation: 7 classes,
2310 × 19) and ``uci/wine`` (3 classes, 178 × 13) stand in for them in the full script.
Each record also keeps ‖ΔV‖ between consecutive rounds (``shifts``, Figure 1a).

Each (set, seed, γ) is one record of ``results/table1.csv`` (resumable: recorded runs are skipped);
``--out`` also gets ``barcena.parquet``, ``barcena.md`` and ``plots/distance_by_fraction.png``.

    python -m reproductions run barcena2021/table1-s-set1-ari --seeds 0 1 2 3 4 5 6 7 8 9
    python -m reproductions run barcena2021/table1-waveform-ari --seeds 0 1 2 3 4 5 6 7 8 9
    python -m reproductions.barcena2021.table1 --data-dir ../shared/datasets   # every set, the figure
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

import fedray
from fedray import assign, best_permutation_distance, fcm
from reproductions.barcena2021.waveform import waveform
from reproductions.common import data_dir as default_data_dir
from reproductions.common import record_run, recorded

log = logging.getLogger("barcena_fraction")

FRACTIONS = (0.25, 0.5, 0.75, 1.0)
SETS = {"sipu/s1": "s-set1", "waveform": "waveform v1", "uci/statlog": "—", "uci/wine": "—"}
GENERATED = {"waveform": waveform}  # sets drawn here by their published recipe, not read from the data folder
PAPER = {  # ARI at gamma = 0.25, 0.5, 0.75, 1 and ||V_fed - V_sum||_F
    "xclara": ((0.99269, 0.99279, 0.99289, 0.99289), (0.00893, 0.00545, 0.00250, 0.0)),
    "s-set1": ((0.90418, 0.90384, 0.89645, 0.89728), (0.11640, 0.09915, 0.04865, 0.0)),
    "pendigits": ((0.42051, 0.42115, 0.42291, 0.42468), (0.11147, 0.08261, 0.03018, 0.0)),
    "waveform": ((0.24243, 0.24366, 0.24445, 0.24359), (0.03233, 0.01877, 0.02049, 0.0)),
}


RECORDS = "table1"
SIZES = "20 IID clients, γ ∈ {0.25, 0.5, 0.75, 1}, λ = 2, ε = 0.005, ≤ 30 rounds"


def run(data_dir: str | None, sets: list[str], seeds: list[int], fractions: tuple[float, ...], n_clients: int = 20,
        max_rounds: int = 30, record: bool = True) -> pd.DataFrame:
    """One row per (set, seed, γ); with ``record``, each seed's runs are recorded as they end and skipped when present."""
    from sklearn.metrics import adjusted_rand_score

    rows = []
    for name in sets:
        if name in GENERATED:
            Xg, yg = GENERATED[name]()[:2]
            k = int(len(np.unique(yg)))
        else:
            k = int(len(np.unique(fedray.load_dataset(f"benchmark:{name}", data_dir).y)))
        t0 = time.perf_counter()
        done = recorded("barcena2021", RECORDS)
        for seed in seeds:
            have = done[(done["method"] == name) & (done["seed"] == seed)] if record else done.iloc[:0]
            if len(have) == len(fractions):
                log.info("%s seed %d: recorded already", name, seed)
                continue
            central = None
            for gamma in fractions:
                t_run = time.perf_counter()
                cfg = fedray.make_config(
                    seed=seed,
                    algorithm={"name": "federated-fcm", "params": {"n_clusters": k, "init": "random-box", "m": 2.0,
                                                                   "tol": 0.005, "max_rounds": max_rounds,
                                                                   "settle_window": 0}},  # the paper's rule: ‖ΔV‖ < ε
                    data=_data(name, data_dir, n_clients, None if name not in GENERATED else (Xg, yg)),
                    federation={"n_clients": n_clients, "fraction": gamma, "rounds": max_rounds},
                    runtime={"backend": "local", "progress": False})
                with fedray.Session(cfg) as s:
                    res = s.run(output=False)
                    if central is None:
                        parts = s.executor.gather_data(labels=True)
                        X = np.vstack([p[1] for p in parts])
                        y = np.concatenate([p[2] for p in parts])
                        Vc = fcm(X, res.model["initial_centers"], m=2.0, tol=0.005, max_iter=max_rounds)[0]
                        central = (Vc, adjusted_rand_score(y, assign(X, Vc)[0]))
                V = res.model["centers"]
                row = {"dataset": name, "k": k, "seed": seed, "gamma": gamma, "ari": res.final["ari"],
                       "ari_central": central[1], "dist_central": best_permutation_distance(central[0], V),
                       "rounds": res.summary["rounds"], "converged": res.summary["converged"],
                       "shifts": [round(float(x), 6) for x in res.history["center_shift"]]}
                rows.append(row)
                if record:
                    record_run("barcena2021", RECORDS, method=name, variant=f"gamma={gamma}", seed=seed,
                               scale="paper", sizes=SIZES, config={"n_clients": n_clients, "gamma": gamma,
                                                                   "max_rounds": max_rounds, "dataset": name},
                               metrics={k_: row[k_] for k_ in ("ari", "ari_central", "dist_central", "rounds",
                                                              "converged", "shifts")},
                               wall_s=time.perf_counter() - t_run)
        log.info("%s: %d seeds in %.1f s", name, len(seeds), time.perf_counter() - t0)
    return pd.DataFrame(rows)


def _data(name: str, data_dir: str | None, n_clients: int, arrays: tuple[np.ndarray, np.ndarray] | None
          ) -> dict[str, object]:
    """The ``data`` section: a benchmark file, or generated arrays, min-max scaled, split IID (stratified)."""
    iid = {"name": "iid", "stratified": True}
    if arrays is None:
        return {"dataset": f"benchmark:{name}", "data_dir": data_dir, "scale": "minmax", "partition": iid}
    return {"dataset": fedray.from_arrays(arrays[0], arrays[1], n_clients=n_clients, partition=iid),
            "scale": "minmax"}


def markdown(df: pd.DataFrame, seeds: int) -> str:
    g = df.groupby(["dataset", "gamma"]).agg(ari=("ari", "mean"), dist=("dist_central", "mean"),
                                             ari_c=("ari_central", "mean"), rounds=("rounds", "mean"))
    gammas = sorted(df["gamma"].unique())
    lines = [f"#### Table 1 — federated FCM, 20 IID clients, means over {seeds} seed(s)\n",
             "| dataset (K, N, F) | " + " | ".join(f"ARI γ={x}" for x in gammas) + " | "
             + " | ".join(f"‖ΔV‖ γ={x}" for x in gammas) + " | central ARI |",
             "|---|" + "---|" * (2 * len(gammas) + 1)]
    for name in df["dataset"].unique():
        row = g.loc[name]
        n = int(df[df["dataset"] == name]["k"].iloc[0])
        lines.append(f"| {name} (K={n}) | " + " | ".join(f"{row.loc[x, 'ari']:.5f}" for x in gammas) + " | "
                     + " | ".join(f"{row.loc[x, 'dist']:.5f}" for x in gammas) + f" | {row['ari_c'].iloc[0]:.5f} |")
    lines.append("")
    lines.append("Paper (Table 1):\n")
    lines.append("| dataset | " + " | ".join(f"ARI γ={x}" for x in FRACTIONS) + " | "
                 + " | ".join(f"‖ΔV‖ γ={x}" for x in FRACTIONS) + " |")
    lines.append("|---|" + "---|" * 8)
    for name, (ari, dist) in PAPER.items():
        lines.append(f"| {name} | " + " | ".join(f"{v:.5f}" for v in ari) + " | " + " | ".join(f"{v:.5f}" for v in dist) + " |")
    lines.append("")
    return "\n".join(lines)


def plot(df: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "plots").mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, d in df.groupby("dataset"):
        m = d.groupby("gamma")[["ari", "dist_central"]].agg(["mean", "std"])
        axes[0].errorbar(m.index, m[("ari", "mean")], yerr=m[("ari", "std")], marker="o", capsize=3, label=name)
        axes[1].errorbar(m.index, m[("dist_central", "mean")], yerr=m[("dist_central", "std")], marker="o",
                         capsize=3, label=name)
    axes[0].set_ylabel("ARI (argmax memberships, union)")
    axes[1].set_ylabel("‖V_fed − V_central‖_F (best permutation)")
    for ax in axes:
        ax.set_xlabel("fraction of clients per round γ")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "plots" / "distance_by_fraction.png", dpi=100)
    plt.close(fig)


def run_claim(claim, scale: str, seeds: list[int], quick: bool, data_dir: str | None) -> None:
    """The lab's runner: the claim's set (``claim.select['method']``) over ``seeds``, recorded run by run."""
    name = claim.select.get("method", "sipu/s1")
    if quick:
        run(data_dir, ["uci/wine"], seeds[:2], FRACTIONS, max_rounds=10)
    else:
        run(data_dir, [name], seeds, FRACTIONS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="wine only, 2 seeds, at most 10 rounds")
    ap.add_argument("--out", default="fedray-output/barcena2021")
    ap.add_argument("--data-dir", default=None, help="benchmark data folder (default: $FEDRAY_DATA_DIR)")
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    args.data_dir = default_data_dir(args.data_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        df = run(args.data_dir, ["uci/wine"], [0, 1], FRACTIONS, max_rounds=10, record=False)
    else:
        df = run(args.data_dir, list(SETS), list(range(args.seeds)), FRACTIONS, record=False)
    df.to_parquet(out / "barcena.parquet", index=False)
    md = markdown(df, int(df["seed"].nunique()))
    (out / "barcena.md").write_text(md)
    plot(df, out)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
