"""The FLACC sweeps, the resumable MNIST table, and the baselines' options in the Table I script (quick runs
and hand-made inputs)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


#: the FLACC scripts live in the lab now (reproductions/mehta2023), imported as modules
MOVED = {"flacc_table": "table", "flacc_sweeps": "sweeps", "flacc_mnist": "mnist"}


def _module(name):
    if name in MOVED:
        return importlib.import_module(f"reproductions.mehta2023.{MOVED[name]}")
    if str(EXPERIMENTS) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS))
    spec = importlib.util.spec_from_file_location(f"_exp_{name}", EXPERIMENTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_table_script_passes_the_baselines_options():
    ft = _module("flacc_table")
    # default: raw updates with the raw-scale cut-offs, the originals' plain mean
    flhc = ft.variants("flhc", "rotated", False)
    assert [e["distance_threshold"] for _, e in flhc] == list(ft.FLHC_D)
    assert all("normalize" not in e for _, e in flhc)
    assert all(
        "weighted" not in e for _, e in ft.variants("ifca", "rotated", False) + ft.variants("cfl", "rotated", False)
    )
    # the old behaviour on request
    norm = ft.variants("flhc", "rotated", False, flhc_normalize=True)
    assert [e["distance_threshold"] for _, e in norm] == list(ft.FLHC_D_NORMALIZED)
    assert all(e["normalize"] is True for _, e in norm)
    assert all(e["weighted"] is True for _, e in ft.variants("ifca", "rotated", False, baseline_weighted=True)
               + ft.variants("cfl", "rotated", False, baseline_weighted=True))
    assert [e["n_clusters"] for _, e in ft.variants("ifca", "rotated", False, ifca_k=(7,))] == [7]
    assert [e["distance_threshold"] for _, e in ft.variants("flhc", "rotated", False, flhc_d=(0.9,))] == [0.9]


def test_diagnosis_of_a_run_on_hand_made_similarities():
    sw = _module("flacc_sweeps")
    g = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    S = np.where(g[:, None] == g[None, :], 0.6, -0.1)
    S[6:, 3:6] = S[3:6, 6:] = 0.2      # groups 1 and 2 look alike
    S[0, 1] = S[1, 0] = np.nan         # never sampled together
    np.fill_diagonal(S, 1.0)
    merges = [{"round": 3, "first": (0,), "second": (2,), "similarity": 0.6},
              {"round": 9, "first": (3, 4), "second": (6,), "similarity": 0.05},  # joins groups 1 and 2
              {"round": 9, "first": (0, 2), "second": (3, 4, 6), "similarity": 0.01}]  # mixed: not counted
    d = sw.diagnose({"similarity_mean": S, "true_groups": g}, {"merges": merges}, n_groups=3)
    assert d["within"] == pytest.approx(0.6) and d["closest_groups"] == "1-2"
    assert d["closest_cross"] == pytest.approx(0.2)
    assert d["offline_ari"] == pytest.approx(1.0)  # the similarities separate the three groups
    assert d["n_wrong_merges"] == 1 and d["wrong_merges"] == "r9:0.050"
    assert d["pairs_seen"] == pytest.approx(54 / 56)


def test_flacc_records_the_mean_similarity_of_every_pair_it_saw():
    import fedray

    res = fedray.run(algorithm={"name": "flacc", "params": {"model": "cnn8", "epochs": 1, "n_sep": 2}},
                     data={"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [30, 50]}},
                     federation={"n_clients": 6, "fraction": 0.5, "rounds": 3},
                     runtime={"backend": "local", "progress": False}, output=False)
    S, C = res.model["similarity_mean"], res.model["similarity_count"]
    assert S.shape == C.shape == (6, 6)
    seen = C > 0
    assert np.array_equal(seen, np.isfinite(S)) and np.allclose(S[seen], S.T[seen])
    assert np.allclose(np.diag(S)[np.diag(seen)], 1.0) and (np.abs(S[seen]) <= 1.0 + 1e-12).all()
    # each merging round samples 3 clients: 3 x 3 entries per round (diagonal included)
    merging = int((res.history["phase"] == "merging").sum())
    assert C.sum() == 9 * merging


def test_sweep_runs_each_value_once_and_resumes(tmp_path):
    sw = _module("flacc_sweeps")
    out = tmp_path / "alpha0"
    runs = sw.main(["--sweep", "alpha0", "--quick", "--out", str(out)])
    assert sorted(runs["value"].astype(float)) == [-0.1, 0.0, 0.1]
    text = (out / "table.md").read_text()
    assert "| +0.1 |" in text and "| -0.1 |" in text and "4 ± 0" in text  # the paper's numbers beside ours
    again = sw.main(["--sweep", "alpha0", "--quick", "--out", str(out)])
    assert len(again) == 3 and len(pd.read_csv(out / "results.csv")) == 3  # nothing run twice


def test_mnist_table_appends_per_seed_and_method_and_skips_what_is_done(tmp_path):
    fm = _module("flacc_mnist")
    out = tmp_path / "m"
    argv = ["--quick", "--dataset", "sklearn:digits", "--methods", "fedavg", "ifca", "--seeds", "0", "--out", str(out)]
    runs = fm.main(argv)
    assert sorted(runs["method"]) == ["fedavg", "ifca"] and runs["variant"].tolist()[1] == "k=4"
    fm.main(argv + ["--seeds", "0", "1"])  # only seed 1 is new
    df = pd.read_csv(out / "results.csv")
    assert sorted(zip(df["seed"], df["method"])) == [(0, "fedavg"), (0, "ifca"), (1, "fedavg"), (1, "ifca")]
    assert "Seeds finished per method: FedAvg 2, IFCA (k) 2." in (out / "table.md").read_text()


def test_sweep_takes_chosen_values_and_records_merges_across_groups(tmp_path):
    sw = _module("flacc_sweeps")
    out = tmp_path / "a"
    runs = sw.main(["--sweep", "alpha0", "--quick", "--values", "0", "0.05", "--federations", "grouped",
                    "--out", str(out)])
    assert sorted(runs["value"].astype(float)) == [0.0, 0.05] and "wrong_merges" in runs
    assert "| +0.05 |" in (out / "table.md").read_text()
    assert sw.parse_args(["--sweep", "memory", "--values", "10", "inf"]).values == [10, None]


def test_mnist_table_runs_the_control_arm_and_keeps_flaccs_clusters(tmp_path):
    fm = _module("flacc_mnist")
    out = tmp_path / "c"
    runs = fm.main(["--quick", "--dataset", "sklearn:digits", "--methods", "flacc", "flacc-control", "--seeds", "0",
                    "--out", str(out)])
    assert runs["method"].tolist() == ["flacc", "flacc-control"]
    assert "FLACC control (random groups)" in (out / "table.md").read_text()
    import json

    d = json.loads((out / "clusters_rotated_0_flacc.json").read_text())
    assert len(d["assignment"]) == len(d["true_groups"]) == len(d["client_accuracy"]) == 12
    assert set(pd.read_csv(out / "rounds.csv")["method"]) == {"flacc", "flacc-control"}


def test_flacc_warmup_runs_fedavg_before_the_first_similarity():
    import fedray

    def run(warmup):
        return fedray.run(algorithm={"name": "flacc", "params": {"model": "cnn8", "epochs": 1, "n_sep": 2,
                                                                 "warmup": warmup}},
                          data={"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [30, 50]}},
                          federation={"n_clients": 6, "fraction": 0.5, "rounds": 4}, seed=1,
                          runtime={"backend": "local", "progress": False}, output=False)

    plain, warm = run(0), run(2)
    h = warm.history
    assert (h["merges"].iloc[:2] == 0).all() and (h["n_entities"].iloc[:2] == 6).all()
    assert all(m["round"] >= 2 for m in warm.final["merges"])
    # two rounds fewer of similarities, 3 x 3 entries each
    merging = int((h["phase"] == "merging").sum())
    assert warm.model["similarity_count"].sum() == 9 * (merging - 2)
    # the same FedAvg rounds until the first merge: identical first-round accuracy
    assert plain.history["accuracy"].iloc[0] == warm.history["accuracy"].iloc[0]
