"""The pFedMe plug-in (``examples/plugins/pfedme.py``), loaded by reference from the repository root.

Tiny rotated-digits federations on the local runtime unless a test is about Ray.
"""
from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedray
from examples.plugins.pfedme import KEY, PFedMe
from fedray.core.errors import ConfigError, SharedSamplesWarning
from fedray.nn.supervised_client import ClientContext
from tests import plugins

REPO = Path(__file__).resolve().parents[2]
PFEDME = "examples.plugins.pfedme:PFedMe"
ROTATED = {"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [40, 80]}}
TRAIN = {"model": "cnn8", "epochs": 2}


def _cfg(params: dict | None = None, *, rounds: int = 3, backend: str = "local", fraction: float = 0.5) -> dict:
    return dict(algorithm={"name": PFEDME, "params": {**TRAIN, **(params or {})}}, data=ROTATED,
                federation={"n_clients": 6, "fraction": fraction, "rounds": rounds}, seed=4,
                runtime={"backend": backend, "progress": False})


def _same(a: Any, b: Any) -> None:
    """Bit for bit: weights, accuracies and losses of every round, final per-client accuracies."""
    plugins.assert_same_training(a, b, ("accuracy", "test_loss", "train_loss"))


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        yield


GAPS: list[float] = []  # ||theta_i - w_{i,R}|| / ||w_{i,R}|| of each client training (local runtime: same process)


class GlobalEvalPFedMe(PFedMe):
    """pFedMe that scores the received global model instead of theta_i, and records the gaps."""

    name = "pfedme-global-eval"

    @classmethod
    def client_evaluate(cls, model: Any, ctx: ClientContext) -> dict[str, float]:
        return fedray.SupervisedAlgorithm.client_evaluate.__func__(cls, model, ctx)

    @classmethod
    def client_train(cls, model: Any, ctx: ClientContext) -> dict[str, Any]:
        out = super().client_train(model, ctx)
        theta, w = ctx.state[KEY][1], out["weights"]
        GAPS.append(float(np.linalg.norm(theta - w) / np.linalg.norm(w)))
        return out


def _pair(session: fedray.Session, params: dict) -> tuple[Any, Any, list[float]]:
    """pFedMe and its global-evaluation twin with the same parameters; the twin's gaps."""
    GAPS.clear()
    personal = session.run(PFEDME, {**TRAIN, **params})
    glob = session.run(GlobalEvalPFedMe(GlobalEvalPFedMe.Params(**TRAIN, **params), session.info, session.config.seed))
    return personal, glob, list(GAPS)


def test_pfedme_runs_end_to_end_and_learns():
    with fedray.Session(_cfg({"epochs": 5}, rounds=6, fraction=1.0)) as s:
        res = s.run()
        fedavg = s.run("fedavg", {**TRAIN, "epochs": 5})
    acc = res.history["accuracy"]
    assert np.isfinite(res.final["accuracy"]) and res.final["n_clusters"] == 1
    assert res.final["accuracy"] > acc.iloc[0] + 0.1  # learns (chance is 0.1; 0.30 against 0.12 at round 0)
    assert res.model["weights"].shape == fedavg.model["weights"].shape
    assert not np.array_equal(res.model["weights"], fedavg.model["weights"])  # not FedAvg's training


def test_evaluation_scores_the_personalised_model_kept_in_client_state():
    """Training does not depend on what is evaluated; the evaluation does: from the first
    round after a client trained, pFedMe scores its theta_i, not the received w."""
    with fedray.Session(_cfg()) as s:
        personal, glob, gaps = _pair(s, {})
        again = s.run()  # the clients now hold theta_i of two earlier runs: ignored, the run's own are used
    _same(personal, again)
    assert np.array_equal(personal.model["weights"], glob.model["weights"])  # evaluation reloads w
    assert personal.history["train_loss"].tolist() == glob.history["train_loss"].tolist()
    loss_p, loss_g = personal.history["test_loss"].tolist(), glob.history["test_loss"].tolist()
    assert loss_p[0] == loss_g[0]  # round 0: no client has trained, so no theta_i yet
    assert all(p != g for p, g in zip(loss_p[1:], loss_g[1:]))
    assert personal.final["client_accuracy"] != glob.final["client_accuracy"]
    assert min(gaps) > 1e-3  # theta_i is not w


def test_with_a_large_lambda_the_personalised_model_is_the_global_one():
    """Moreau envelope: theta_i(w) - w = -grad f_i(theta_i) / lambda, so theta_i -> w as lambda grows
    (the gap is measured after each client's training, between theta_i and the w_{i,R} it sends)."""
    with fedray.Session(_cfg()) as s:
        _, _, gaps15 = _pair(s, {"lam": 15.0, "personal_lr": 0.09, "lr": 0.0005})
        _, _, gaps_big = _pair(s, {"lam": 1000.0, "personal_lr": 0.001, "lr": 0.0005})  # lr * lam = 0.5
    assert len(gaps_big) == len(gaps15) == 9  # 3 clients a round, 3 rounds
    assert max(gaps_big) < 1e-3 and max(gaps_big) < min(gaps15) / 20
    assert min(gaps_big) > 0  # close, not equal


def test_beta_one_is_plain_averaging_and_beta_two_extrapolates():
    """One round from theta_0 with every client: w_1 = theta_0 + beta (avg_i w_i - theta_0)."""
    with fedray.Session(_cfg(rounds=1, fraction=1.0)) as s:
        theta0 = s.make_algorithm().init.astype(np.float64)
        one = s.run(PFEDME, {**TRAIN, "beta": 1.0}).model["weights"][0].astype(np.float64)
        two = s.run(PFEDME, {**TRAIN, "beta": 2.0}).model["weights"][0].astype(np.float64)
    assert np.allclose(two - theta0, 2 * (one - theta0), atol=1e-6)
    assert np.linalg.norm(one - theta0) > 1e-2


def test_ray_gives_the_same_bits_as_local(ray_session):
    """Relies on the clients' processes importing ``examples`` (see tests/algorithms/test_plugins_supervised.py)."""
    out = {}
    for backend in ("local", "ray"):
        with fedray.Session(_cfg(rounds=3, backend=backend)) as s:
            out[backend] = s.run()
    _same(out["local"], out["ray"])


@pytest.mark.parametrize("params,match", [
    ({"lam": 0}, r"algorithm.params \(pfedme\).lam: Input should be greater than 0; got 0$"),
    ({"beta": -1}, r"algorithm.params \(pfedme\).beta: Input should be greater than 0; got -1$"),
    ({"inner_steps": 0}, r"algorithm.params \(pfedme\).inner_steps: Input should be greater than or equal to 1"),
    ({"personal_lr": 0}, r"algorithm.params \(pfedme\).personal_lr: Input should be greater than 0; got 0$"),
    ({"lambda": 15}, r"algorithm.params \(pfedme\).lambda: unknown parameter \(did you mean 'lam'\?\); got 15$"),
])
def test_bad_parameters_are_one_error_line_each(params, match):
    with pytest.raises(ConfigError, match=match) as err:
        fedray.run(**_cfg(params, rounds=1))
    assert len(str(err.value).splitlines()) == 1  # one line, as every configuration error


@pytest.mark.parametrize("params,match", [
    ({"lam": 30}, r"^algorithm.params.personal_lr: personal_lr \* lam must be below 2 .*; got 0.09 \* 30 = 2.7$"),
    ({"lam": 15, "personal_lr": 0.01, "lr": 0.2}, r"^algorithm.params.lr: lr \* lam must be below 2 .* = 3$"),
    ({"optimizer": "adam"}, r"^algorithm.params.optimizer: 'pfedme' takes plain gradient steps; got 'adam'"),
])
def test_unstable_steps_and_adam_are_refused_in_one_line(params, match):
    with pytest.raises(ConfigError, match=match) as err:
        fedray.run(**_cfg(params, rounds=1))
    assert "\n" not in str(err.value)


def test_pfedme_imports_only_public_names():
    tree = ast.parse((REPO / "examples" / "plugins" / "pfedme.py").read_text())
    allowed = {"__future__", "secrets", "typing", "numpy", "pydantic", "torch", "fedray", "fedray.supervised"}
    mods = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    mods += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert set(mods) <= allowed
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    attrs = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "fedray"]
    assert not [x for x in names + attrs if x.startswith("_")]
