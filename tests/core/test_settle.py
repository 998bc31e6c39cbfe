"""The partial-participation stopping rule (fedray.core.settle). Properties held: a shift that
keeps falling never settles, one at a floor does; full participation is untouched (same bits and
stopping round with and without the rule); at a fraction < 1 kmeans and federated-fcm stop as
"settled" well before their budget, with the mean of the last W centres."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.core.settle import Settling

WINE = {"dataset": "sklearn:wine", "scale": "standard", "partition": {"name": "dirichlet", "alpha": 0.5}}


def test_a_falling_shift_never_settles_and_a_floor_does():
    falling = Settling(3)
    assert not any(falling.settled(0.5 ** t, np.zeros((2, 2))) for t in range(30))
    flat = Settling(3)
    noisy = [1.2, 1.0, 1.3, 1.1, 1.25, 1.05]
    got = [flat.settled(s, np.full((2, 2), float(i))) for i, s in enumerate(noisy)]
    assert got == [False] * 5 + [True]
    np.testing.assert_array_equal(flat.averaged(), np.full((2, 2), 4.0))  # mean of rounds 3, 4, 5


@pytest.mark.parametrize("name", ["kmeans", "federated-fcm"])
def test_full_participation_is_untouched(name):
    runs = [fedray.run(algorithm={"name": name, "params": {"n_clusters": 3, "settle_window": w}}, data=WINE,
                       federation={"n_clients": 10, "fraction": 1.0}, runtime={"backend": "local", "progress": False},
                       output=False) for w in (0, 5)]
    np.testing.assert_array_equal(runs[0].centers, runs[1].centers)
    assert runs[0].summary["rounds"] == runs[1].summary["rounds"] and runs[1].summary["stop_reason"] == "converged"


@pytest.mark.parametrize("name", ["kmeans", "federated-fcm"])
def test_partial_participation_settles_with_averaged_centres(name):
    params = {"n_clusters": 3, "settle_window": 4}
    res = fedray.run(algorithm={"name": name, "params": params}, data=WINE,
                     federation={"n_clients": 10, "fraction": 0.5}, runtime={"backend": "local", "progress": False},
                     output=False)
    train = res.history[res.history["phase"] == "train"]
    assert res.summary["stop_reason"] == "settled" and len(train) >= 8
    assert len(train) < {"kmeans": 100, "federated-fcm": 30}[name]
    last = train["center_shift"].to_numpy()
    assert last[-4:].mean() >= 0.9 * last[-8:-4].mean()  # the rule's condition held when it stopped
    off = fedray.run(algorithm={"name": name, "params": {**params, "settle_window": 0}}, data=WINE,
                     federation={"n_clients": 10, "fraction": 0.5, "rounds": len(res.history)},
                     runtime={"backend": "local", "progress": False}, output=False)
    assert not np.array_equal(off.centers, res.centers)  # the same rounds, but not averaged
