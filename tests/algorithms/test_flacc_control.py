"""FLACC's control arm (``control: random-groups``): random groups of the sizes of the clusters found,
trained from the same separation round as FLACC's clusters.

Properties held: the control run is FLACC's run, bit for bit, up to separation; its groups have the
clusters' sizes; on a federation with planted groups (four rotations) it is clearly worse than FLACC,
on one without structure (one rotation) it is within noise of FLACC.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedray.algorithms.flacc_rules import entities, random_groups
from fedray.api.session import Session
from fedray.core.errors import ConfigError, SharedSamplesWarning

TRAIN = {"epochs": 5, "lr": 0.1, "batch_size": 32, "eval_every": 4, "n_merge": 1, "n_sep": 4}
PLANTED = {"name": "rotated", "proportions": [0.25] * 4, "samples": [60, 120]}
NO_STRUCTURE = {"name": "rotated", "rotations": [0], "proportions": [1.0], "samples": [60, 120]}
#: Accuracy spread of FLACC itself over seeds 0-2 of the unstructured federation below: 94.9-96.6 %
NOISE = 0.03


def _both(partition: dict, seed: int = 0):
    cfg = {"seed": seed, "algorithm": {"name": "flacc", "params": TRAIN},
           "data": {"dataset": "sklearn:digits", "partition": partition},
           "federation": {"n_clients": 16, "fraction": 0.5, "rounds": 22},
           "runtime": {"backend": "local", "progress": False}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        with Session(cfg) as s:
            return s.run(output=False), s.run("flacc", {**TRAIN, "control": "random-groups"}, output=False)


def _sizes(labels) -> list[int]:
    return sorted(len(e) for e in entities(np.asarray(labels)))


def test_random_groups_keep_the_sizes_and_follow_the_seed() -> None:
    labels = np.array([0, 0, 0, 3, 3, 5, 6, 6, 6, 6])
    a = random_groups(labels, np.random.default_rng(3))
    assert _sizes(a) == _sizes(labels)
    assert all(a[i] == min(e) for e in entities(a) for i in e)  # labelled by the smallest id, as entities are
    assert np.array_equal(a, random_groups(labels, np.random.default_rng(3)))
    assert not np.array_equal(a, random_groups(labels, np.random.default_rng(4)))


def test_control_is_worse_than_flacc_on_planted_groups() -> None:
    flacc, control = _both(PLANTED)
    f, c = flacc.final, control.final
    assert f["ari"] == pytest.approx(1.0) and c["found_ari"] == pytest.approx(1.0)  # the same clusters were found
    assert c["control"] == "random-groups" and f["control"] == "none"
    assert c["separation_round"] == f["separation_round"]
    assert _sizes(c["assignment"]) == _sizes(f["assignment"]) and c["ari"] < 0.5
    # the same run up to separation: same accuracies, losses and merges, bit for bit
    sep = f["separation_round"]
    h1, h2 = flacc.history, control.history
    cols = ["accuracy", "train_loss", "merges"]
    pre1, pre2 = h1.loc[h1["round"] <= sep, cols], h2.loc[h2["round"] <= sep, cols]
    np.testing.assert_array_equal(pre1.to_numpy(), pre2.to_numpy())
    # four rotations mixed in every group: far below one model per rotation (about 20 points on this one)
    assert c["accuracy"] < f["accuracy"] - 0.08


def test_control_is_within_noise_of_flacc_without_structure() -> None:
    flacc, control = _both(NO_STRUCTURE)
    f, c = flacc.final, control.final
    assert f["n_clusters"] >= 2  # FLACC split this federation, so the control trains different groups
    assert _sizes(c["assignment"]) == _sizes(f["assignment"])
    assert abs(c["accuracy"] - f["accuracy"]) < NOISE


def test_an_unknown_control_names_the_key() -> None:
    with pytest.raises(ConfigError, match="control"):
        Session({"algorithm": {"name": "flacc", "params": {"control": "shuffled"}},
                 "data": {"dataset": "sklearn:digits"}}).run()
