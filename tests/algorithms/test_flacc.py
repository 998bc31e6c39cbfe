"""FLACC end to end on small rotated-digits federations (Mehta & Shao 2023, Algorithm 1)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fedray
from fedray.algorithms.flacc import merge_table
from fedray.api.config import make_config
from fedray.api.session import Session
from fedray.core.errors import ConfigError, SharedSamplesWarning

TRAIN = {"epochs": 5, "lr": 0.1, "batch_size": 32, "eval_every": 4}
# A small federation merges its few entities within a few rounds, while all updates still share the
# direction away from the random start; one merge a round (the paper's advice where nothing is known
# about the clusters) and N_sep = 4 keep the run short and the merges right.
SMALL = {"n_merge": 1, "n_sep": 4}


def _cfg(backend: str = "local", *, n_clients: int = 16, fraction: float = 0.5, rounds: int = 24,
         params: dict | None = None, partition: dict | None = None, seed: int = 0) -> dict:
    part = {"name": "rotated", "proportions": [0.25, 0.25, 0.25, 0.25], "samples": [60, 120], **(partition or {})}
    return {"seed": seed, "algorithm": {"name": "flacc", "params": {**TRAIN, **SMALL, **(params or {})}},
            "data": {"dataset": "sklearn:digits", "partition": part},
            "federation": {"n_clients": n_clients, "fraction": fraction, "rounds": rounds},
            "runtime": {"backend": backend, "progress": False}}


@pytest.fixture(scope="module")
def small_run():
    """FLACC and FedAvg on one 16-client federation with four rotations (a few seconds each)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        with Session(_cfg()) as s:
            flacc = s.run(output=False)
            fedavg = s.run("fedavg", TRAIN, output=False)
    return flacc, fedavg


def test_flacc_finds_the_four_rotation_groups(small_run) -> None:
    res, _ = small_run
    fin = res.final
    truth = np.asarray(res.model["true_groups"])
    assert fin["n_clusters"] == 4 and fin["ari"] == pytest.approx(1.0)
    found = {tuple(e) for e in fin["entities"]}
    assert found == {tuple(np.flatnonzero(truth == g)) for g in range(4)}
    # the run separated after N_sep rounds without a merge and then trained one model per group
    sep = fin["separation_round"]
    assert sep is not None
    h = res.history
    assert (h.loc[h["round"] > sep, "phase"] == "separated").all()
    assert (h.loc[h["round"] <= sep, "phase"] == "merging").all()
    assert h.loc[(h["round"] > sep - 4) & (h["round"] <= sep), "merges"].sum() == 0
    assert len(res.model["weights"]) == 4


def test_separated_groups_beat_one_global_model(small_run) -> None:
    flacc, fedavg = small_run
    assert flacc.final["accuracy"] > fedavg.final["accuracy"]
    # during the merging phase FLACC *is* FedAvg: identical accuracies in the same rounds
    h1, h2 = flacc.history, fedavg.history
    sep = flacc.final["separation_round"]
    a = h1.loc[h1["round"] <= sep, "accuracy"].dropna().to_numpy()
    b = h2.loc[h2["round"] <= sep, "accuracy"].dropna().to_numpy()
    np.testing.assert_array_equal(a, b[: len(a)])


def test_every_merge_is_recorded_and_consistent(small_run) -> None:
    res, _ = small_run
    merges = res.final["merges"]
    assert len(merges) == res.final["n_merges"] == 16 - 4  # m clients -> 4 entities takes m - 4 merges
    df = merge_table(merges)
    assert (df["similarity"] > 0).all()  # alpha_min_cross > alpha_0 = 0 (eq. 17)
    assert (df.loc[df["kind"] == "subserver+subserver", "phi"] > 0).all()  # Phi > 0 (eq. 14)
    assert df.groupby("round").size().max() <= 1  # n_merge = 1
    # replaying the merges from singletons reproduces the final partition
    parts = {i: (i,) for i in range(16)}
    for a, b in zip(df["first"], df["second"]):
        ka, kb = min(a), min(b)
        assert parts[ka] == tuple(a) and parts[kb] == tuple(b)
        parts[min(ka, kb)] = tuple(sorted(a + b))
        del parts[max(ka, kb)]
    assert sorted(parts.values()) == sorted(tuple(e) for e in res.final["entities"])


def test_same_seed_same_merges_and_accuracies_on_local_and_ray(ray_session) -> None:
    small = dict(n_clients=12, rounds=6, params={"epochs": 1, "n_sep": 2, "eval_every": 2})
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        for backend in ("local", "ray"):
            res = fedray.run(_cfg(backend, **small), output=None)
            out[backend] = res
    a, b = out["local"], out["ray"]
    assert a.final["merges"] == b.final["merges"] and len(a.final["merges"]) > 0
    np.testing.assert_array_equal(a.history["accuracy"].to_numpy(), b.history["accuracy"].to_numpy())
    assert a.final["client_accuracy"] == b.final["client_accuracy"]
    np.testing.assert_array_equal(a.model["weights"], b.model["weights"])


def test_fraction_sampling_fewer_than_two_clients_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"federation\.fraction: 0\.1 of 10 clients samples 1 client"):
        make_config(_cfg(n_clients=10, fraction=0.1))
    make_config(_cfg(n_clients=10, fraction=0.2))  # two clients a round is enough


@pytest.mark.parametrize("params, match", [
    ({"model": "resnet"}, r"algorithm\.params \(flacc\)\.model: .*unknown model 'resnet'; choose one of"),
    ({"n_merge": 0}, r"algorithm\.params \(flacc\)\.n_merge"),
    ({"alpha_0": -1.0}, r"algorithm\.params \(flacc\)\.alpha_0"),
    ({"memory": 0}, r"algorithm\.params \(flacc\)\.memory"),
    ({"n_sep": 0}, r"algorithm\.params \(flacc\)\.n_sep"),
    ({"bogus": 1}, r"algorithm\.params \(flacc\)\.bogus: unknown parameter"),
])
def test_bad_parameters_name_the_key(params: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_config(_cfg(params=params))


def test_image_model_on_tabular_data_is_a_clear_error() -> None:
    cfg = {"algorithm": {"name": "flacc", "params": {"model": "cnn8"}}, "data": {"dataset": "sklearn:iris"},
           "federation": {"n_clients": 4}, "runtime": {"backend": "local"}}
    with pytest.raises(ConfigError, match=r"'cnn8' is an image model but the data are tabular"):
        Session(cfg).run()
