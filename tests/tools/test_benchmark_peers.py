"""``benchmarks/peers/run.py`` and ``benchmarks/updates_per_second.py``, run small.

The quick form of each peer's workload trains on fedray: the final model scores above chance and
above its own initial weights on the held-out rows, every round trains the sampled cohort, and the
Flower side (only where Flower is importable) does the same. The figures of benchmarks/README.md
come from the full workloads on a quiet machine.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # its dataclass resolves its annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def peers():
    return _load(BENCH / "peers" / "run.py", "peers_run_for_tests")


@pytest.fixture(scope="module")
def ups():
    return _load(BENCH / "updates_per_second.py", "updates_per_second_for_tests")


def _initial_accuracy(peers, spec) -> float:
    """Held-out accuracy of the untrained model (the run's initial weights)."""
    from fedray.data.datasets import load_dataset
    from fedray.nn.models import build_model
    from fedray.nn.train import get_flat

    ds = load_dataset(spec["dataset"], spec["data_dir"], seed=spec["seed"], part="test")
    model = build_model(f"peer_models:{spec['model']}", tuple(ds.sample_shape), int(ds.n_classes), spec["seed"])
    return peers.heldout(spec, get_flat(model))[0]


@pytest.mark.parametrize("name", ["flute", "blazefl", "pfl"])
def test_quick_workload_trains_on_fedray(peers, name, data_dir, ray_session):
    """fedray's side of the workload, quick form: every round trains the cohort it sampled, and the final
    model beats both chance (10 classes) and the initial model on the same 2000 held-out rows."""
    pytest.importorskip("torch")
    spec = peers.make_spec(name, quick=True, data_dir=str(data_dir))
    r = peers.run_fedray(spec)
    assert len(r["round_times"]) == spec["rounds"]
    assert r["updates"] == spec["per_round"] * spec["rounds"]
    assert r["eval_rows"] == 2000
    before = _initial_accuracy(peers, spec)
    assert r["accuracy"] > max(0.13, before + 0.02), (r["accuracy"], before)
    assert r["startup_s"] > 0 and r["wall_s"] > r["startup_s"]


def test_the_flower_side_trains_the_same_workload(peers, data_dir, tmp_path):
    """FLUTE's quick form on Flower (a fresh process with its own Ray): the cohort every round, and a
    model above chance on the held-out rows."""
    pytest.importorskip("flwr.simulation")
    spec = peers.make_spec("flute", quick=True, data_dir=str(data_dir))
    r = peers.child(BENCH / "peers" / "run.py", "flower", spec, timeout=900)
    assert not r.get("error"), r["error"]
    assert len(r["round_times"]) == spec["rounds"] and r["updates"] == spec["per_round"] * spec["rounds"]
    assert r["accuracy"] > 0.5


def test_bad_options_fail_in_one_line(peers, data_dir, capsys):
    for argv, flag in ((["--workload", "pfl"], "--device cuda"), (["--systems", "fedray,nothing"], "--systems"),
                       (["--rounds", "0"], "--rounds"),
                       (["--data-dir", str(data_dir / "no-such-folder")], "--data-dir"),
                       (["--client-cpus", "0"], "--client-cpus")):
        with pytest.raises(SystemExit):
            peers.parse_args([*argv, "--data-dir", str(data_dir)] if flag != "--data-dir" else argv)
        assert flag in capsys.readouterr().err


def test_rounds_caps_a_workload_and_quick_scores_2000_rows(peers, data_dir):
    spec = peers.make_spec("pfl", rounds=7, data_dir=str(data_dir))
    assert spec["rounds"] == 7 and spec["clients"] == 1000 and spec["per_round"] == 50 and spec["eval_rows"] is None
    assert peers.make_spec("flute", rounds=10**6, data_dir=str(data_dir))["rounds"] == 100
    cfg = peers.fedray_config(peers.make_spec("pfl", device="cuda", num_cpus=10, data_dir=str(data_dir)))
    assert cfg["runtime"]["client_resources"] == {"num_gpus": 0.1}
    assert cfg["algorithm"]["params"]["device"] == "cuda"


@pytest.mark.parametrize("workload", ["kmeans", "select-k"])
def test_updates_per_second_counts_the_replies(ups, workload, ray_session):
    """One small configuration in this process: k-means's rate is its cohort over the round; select-k
    counts the replies of every training round of each K (the cohort each) and of each K's index pass
    (every client)."""
    spec = dict(workload=workload, population=200, fraction=0.5, rounds=3, k_max=3, num_cpus=2)
    row = ups.measure(spec)
    assert row["cohort"] == 100 and row["startup_s"] > 0 and row["peak_mem_mb"] > 0
    assert math.isfinite(row["updates_per_s"]) and row["updates_per_s"] > 0
    if workload == "kmeans":
        assert row["updates_per_s"] * row["round_s"] == pytest.approx(100)
    else:
        assert row["k"] in (2, 3)
        rounds = round(row["work_s"] / row["round_s"])
        assert rounds >= 2 and row["updates"] == rounds * 100 + 2 * 200  # the rounds, and K = 2, 3's index passes
        assert row["updates_per_s"] == pytest.approx(row["updates"] / row["work_s"])


def test_a_population_that_cannot_fit_is_skipped_before_it_starts(ups):
    spec = dict(workload="kmeans", population=10**10, fraction=0.01, rounds=2, k_max=3, num_cpus=2)
    assert ups.skip_reason(spec, 1024, []).startswith("skipped")
