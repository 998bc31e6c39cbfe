"""A round whose evaluated models diverged says so, once, and its test loss covers the finite ones."""
from __future__ import annotations

import logging
import warnings

import numpy as np

from fedray.core.contract import FederationInfo, Reply, RoundContext
from fedray.core.registry import get_algorithm, make_params


def _fedavg(n: int):
    info = FederationInfo(n_clients=n, n_features=64, sample_shape=(64,), n_samples=np.full(n, 10),
                          feature_min=np.zeros(64), feature_max=np.ones(64), n_classes=10, has_labels=True)
    cls = get_algorithm("fedavg")
    return cls(make_params(cls, {"model": "mlp"}), info, 0)


def _evals(losses: list[float]) -> list[Reply]:
    return [Reply(i, {"acc": 10.0, "test_loss": loss}) for i, loss in enumerate(losses)]


def test_non_finite_test_losses_are_named_once_and_left_out_of_the_mean(caplog):
    alg = _fedavg(4)
    with caplog.at_level(logging.WARNING, logger="fedray.nn.supervised"), warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy "Mean of empty slice" on the way
        out = alg.round_metrics(RoundContext(round=5, seed=0, sampled=(0, 1, 2, 3), info=alg.info),
                                _evals([1.0, np.nan, 3.0, np.inf]))
        assert out["test_loss"] == 2.0
        every = alg.round_metrics(RoundContext(round=6, seed=0, sampled=(0, 1), info=alg.info),
                                  _evals([np.nan, np.nan]))
        assert np.isnan(every["test_loss"])
    said = [r.getMessage() for r in caplog.records if "diverged" in r.getMessage()]
    assert said == [said[0]] and said[0].startswith("round 5: 2 of 4 evaluated clients have a non-finite test loss")


def test_finite_test_losses_say_nothing(caplog):
    alg = _fedavg(2)
    with caplog.at_level(logging.WARNING, logger="fedray.nn.supervised"):
        out = alg.round_metrics(RoundContext(round=0, seed=0, sampled=(0, 1), info=alg.info), _evals([1.0, 2.0]))
    assert out["test_loss"] == 1.5
    assert not [r for r in caplog.records if "diverged" in r.getMessage()]
