"""FLACC's gradient similarity (``similarity: gradients``; Mehta & Shao 2023, eq. 8, Table VI) and the
per-round alpha_min_cross of Fig. 8."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from fedray.algorithms.flacc_rules import best_cross_similarity
from fedray.api.config import make_config
from fedray.api.session import Session
from fedray.core.errors import ConfigError, SharedSamplesWarning


def _cfg(rounds: int) -> dict[str, Any]:
    return {"seed": 0, "algorithm": {"name": "flacc"},
            "data": {"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [40, 60]}},
            "federation": {"n_clients": 8, "fraction": 0.5, "rounds": rounds},
            "runtime": {"backend": "local", "progress": False}}


def _runs(rounds: int, params: dict[str, Any]) -> dict[str, Any]:
    """FLACC with weight updates and with gradients on the same federation and seed."""
    base = {"lr": 0.1, "eval_every": 100, **params}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        with Session(_cfg(rounds)) as s:
            return {sim: s.run("flacc", {**base, "similarity": sim}, output=False) for sim in ("updates", "gradients")}


def _round0(res: Any) -> np.ndarray:
    """The similarities of round 0 (a one-round run): the pairs of clients sampled together."""
    S = np.asarray(res.model["similarity_mean"], dtype=float)
    return S[np.isfinite(S)]


def test_one_full_batch_step_makes_the_update_a_gradient_step() -> None:
    # E = 1 with B above every client's rows is one SGD step on the full risk: Delta theta_i = -eta grad F_i(theta),
    # so the cosines of the updates and of the gradients are the same (eq. 8 against eq. 19)
    runs = _runs(1, {"epochs": 1, "batch_size": 1000})
    upd, grad = _round0(runs["updates"]), _round0(runs["gradients"])
    assert upd.size >= 12  # 4 sampled clients: 16 entries
    np.testing.assert_allclose(grad, upd, atol=1e-5)
    pairs = {sim: [(m["round"], m["first"], m["second"]) for m in r.final["merges"]] for sim, r in runs.items()}
    assert pairs["gradients"] == pairs["updates"] and pairs["updates"]


def test_gradients_are_not_the_updates_of_several_local_steps() -> None:
    # E = 5, B = 32 (the paper's): the updates are many steps away from one gradient, so the two
    # similarities differ; a run that ignored the option would give the updates' values here
    runs = _runs(1, {"epochs": 5, "batch_size": 32})
    upd, grad = _round0(runs["updates"]), _round0(runs["gradients"])
    assert np.max(np.abs(grad - upd)) > 0.05
    # the clients' training is the same: the weights sent, hence the averaged model, agree bit for bit
    np.testing.assert_array_equal(runs["gradients"].model["weights"], runs["updates"].model["weights"])
    # the gradients went up too
    hu, hg = runs["updates"].history, runs["gradients"].history
    assert hg["bytes_train"].iloc[0] > hu["bytes_train"].iloc[0]


def test_alpha_min_cross_is_recorded_every_merging_round() -> None:
    res = _runs(14, {"epochs": 1, "batch_size": 32, "n_merge": 1, "n_sep": 3})["updates"]
    h = res.history
    sep = res.final["separation_round"]
    assert sep is not None
    merging, after = h[h["round"] <= sep], h[h["round"] > sep]
    assert merging["alpha_min_cross"].notna().all() and after["alpha_min_cross"].isna().all()
    merged = merging[merging["merges"] > 0]
    # a merge's alpha_min_cross is the value that solved (9), when no pair was skipped for Phi <= 0
    for m in res.final["merges"]:
        row = merging[merging["round"] == m["round"]].iloc[0]
        assert row["alpha_min_cross"] >= m["similarity"] - 1e-12
    assert np.isclose(merged["alpha_min_cross"], merged["merge_similarity"]).any()
    # no merge where the best pair is at or below alpha_0 = 0 (eq. 17)
    assert (merging.loc[merging["alpha_min_cross"] <= 0, "merges"] == 0).all()


def test_best_cross_similarity_is_the_max_min_over_entity_pairs() -> None:
    alpha = np.array([[1.0, 0.9, 0.2, -0.5],
                      [0.9, 1.0, 0.4, 0.1],
                      [0.2, 0.4, 1.0, 0.3],
                      [-0.5, 0.1, 0.3, 1.0]])
    known = np.ones((4, 4), dtype=bool)
    labels = np.array([0, 0, 2, 3])  # entities {0, 1}, {2}, {3}
    # min cross: {0,1}-{2}: 0.2, {0,1}-{3}: -0.5, {2}-{3}: 0.3 -> 0.3
    assert best_cross_similarity(alpha, known, labels) == pytest.approx(0.3)
    known[2, 3] = known[3, 2] = False  # forgotten: {2}-{3} is no candidate, {0,1}-{2} wins
    assert best_cross_similarity(alpha, known, labels) == pytest.approx(0.2)
    assert np.isnan(best_cross_similarity(alpha, np.zeros((4, 4), dtype=bool), labels))


def test_a_bad_similarity_names_the_key() -> None:
    cfg = _cfg(2)
    cfg["algorithm"]["params"] = {"similarity": "hessians"}
    with pytest.raises(ConfigError, match=r"algorithm\.params \(flacc\)\.similarity: .*'updates'.*'gradients'"):
        make_config(cfg)


def test_gradients_under_privacy_are_refused_with_the_key() -> None:
    cfg = _cfg(2)
    cfg["algorithm"]["params"] = {"similarity": "gradients"}
    cfg["privacy"] = {"secure_aggregation": True}
    with pytest.raises(ConfigError, match=r"algorithm\.params\.similarity: 'gradients' .*outside the privacy layers"):
        make_config(cfg)
