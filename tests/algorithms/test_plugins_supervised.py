"""The public supervised base: client hooks, model factories, FedProx and Per-FedAvg plug-ins.

Plug-ins are loaded by reference (``examples.plugins.fedprox:FedProx``) from the
repository root, as a user runs them; the local runtime unless a test is about Ray.
"""
from __future__ import annotations

import ast
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import fedray
from fedray.core.errors import ConfigError, SharedSamplesWarning
from fedray.nn.supervised import SupervisedAlgorithm
from fedray.nn.supervised_client import ClientContext, client_round
from tests import plugins

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "examples" / "plugins"
FEDPROX = "examples.plugins.fedprox:FedProx"
PERFEDAVG = "examples.plugins.perfedavg:PerFedAvg"
FACTORY = "examples.plugins.models:small_mlp"
ROTATED = {"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [40, 80]}}
TRAIN = {"model": "cnn8", "epochs": 2}


def _cfg(alg: str = "fedavg", params: dict | None = None, *, n_clients: int = 6, fraction: float = 0.5,
         rounds: int = 3, data: dict | None = None, backend: str = "local", seed: int = 4) -> dict:
    return dict(algorithm={"name": alg, "params": {**TRAIN, **(params or {})}}, data=data or ROTATED,
                federation={"n_clients": n_clients, "fraction": fraction, "rounds": rounds}, seed=seed,
                runtime={"backend": backend, "progress": False})


def _loop_cfg(**kw) -> dict:
    """:func:`_cfg` with every client trained by the per-client loop (``runtime.batched: false``)."""
    cfg = _cfg(**kw)
    cfg["runtime"]["batched"] = False
    return cfg


_same = plugins.assert_same_training  # weights, accuracy and training loss of every round, bit for bit


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        yield


# --- FedProx: a loss hook -------------------------------------------------------------
def test_fedprox_with_mu_zero_is_fedavg_bit_for_bit():
    # FedProx overrides client_loss, so it trains by the per-client loop; FedAvg's loop is the reference
    # (with batched training FedAvg equals it within float rounding, tests/nn/test_batched_training.py).
    with fedray.Session(_loop_cfg()) as s:
        fedavg = s.run()
        prox = s.run(FEDPROX, {**TRAIN, "mu": 0.0})
    _same(fedavg, prox)


def test_fedprox_proximal_term_keeps_clients_near_the_global_model():
    with fedray.Session(_cfg(fraction=1.0, rounds=1, params={"epochs": 5})) as s:
        theta0 = s.make_algorithm().init
        fedavg = s.run()
        prox = s.run(FEDPROX, {**TRAIN, "epochs": 5, "mu": 1.0})
    d_avg = np.linalg.norm(fedavg.model["weights"][0] - theta0)
    d_prox = np.linalg.norm(prox.model["weights"][0] - theta0)
    assert 0 < d_prox < 0.95 * d_avg


def test_fedprox_is_at_most_30_lines_of_public_code():
    assert len((PLUGINS / "fedprox.py").read_text().splitlines()) <= 30


# --- the hooks ------------------------------------------------------------------------
CALLS: list[tuple[int, int, tuple[int, ...], bool]] = []


class CountingFedAvg(SupervisedAlgorithm):
    """FedAvg whose loss hook records each call (local runtime: same process)."""

    name = "counting-fedavg"

    @classmethod
    def client_loss(cls, model, outputs, targets, ctx: ClientContext):
        starts = ctx.start_tensors(model)
        CALLS.append((ctx.client.id, ctx.client.round, tuple(outputs.shape),
                      all(s.shape == p.shape for s, p in zip(starts, model.parameters()))))
        return super().client_loss(model, outputs, targets, ctx)


def test_loss_hook_is_called_once_a_mini_batch_and_sees_the_start_weights():
    CALLS.clear()
    with fedray.Session(_loop_cfg(rounds=2)) as s:  # a loss hook trains by the loop: compare with FedAvg's
        res = s.run(CountingFedAvg(CountingFedAvg.Params(**TRAIN), s.info, s.config.seed))
        fedavg = s.run()
    _same(res, fedavg)  # the hook's default is FedAvg's cross-entropy
    trained = res.history["clients_trained"].sum()
    assert {c[1] for c in CALLS} == {0, 1}
    assert all(c[2][1] == 10 and c[3] for c in CALLS)
    # E epochs of ceil(n_train / B) mini-batches for every client that trained
    per_client = {}
    for cid, rnd, _, _ in CALLS:
        per_client[(cid, rnd)] = per_client.get((cid, rnd), 0) + 1
    assert len(per_client) == trained
    assert all(n % TRAIN["epochs"] == 0 for n in per_client.values())


def tagged_round(payload, shared, client):
    out = client_round(payload, shared, client)
    out["tag"] = payload["tag"]
    return out


class TaggedFedAvg(SupervisedAlgorithm):
    """FedAvg with its own client function and an extra payload entry."""

    name = "tagged-fedavg"

    def configure_round(self, ctx):
        return self.make_tasks(ctx, ctx.sampled, fn=tagged_round, tag=7)

    def aggregate(self, ctx, replies):
        assert all(r.update["tag"] == 7 for r in replies)
        return {**super().aggregate(ctx, replies), "tags": float(len(replies))}


def test_make_tasks_takes_another_client_function():
    with fedray.Session(_loop_cfg(rounds=2)) as s:  # tagged_round has no batched form: the loop
        res = s.run(TaggedFedAvg(TaggedFedAvg.Params(**TRAIN), s.info, s.config.seed))
        fedavg = s.run()
    _same(res, fedavg)
    assert (res.history["tags"] == 6).all()  # evaluation rounds: every client answers


# --- model factories --------------------------------------------------------------------
def small_mlp_params(d: int = 64, k: int = 10) -> int:
    return d * 32 + 32 + 32 * k + k


def test_model_factory_trains_with_fedavg():
    res = fedray.run(**_cfg("fedavg", {"model": FACTORY, "epochs": 5}, data={"dataset": "sklearn:digits"},
                            n_clients=4, fraction=1.0, rounds=4))
    assert res.model["weights"].shape == (1, small_mlp_params())
    assert res.final["accuracy"] > 0.8  # chance is 0.1


def test_model_factory_trains_with_flacc():
    res = fedray.run(**_cfg("flacc", {"model": FACTORY, "epochs": 3, "n_merge": 1, "n_sep": 2, "eval_every": 2},
                            data={"dataset": "sklearn:digits"}, n_clients=8, fraction=0.5, rounds=8))
    assert res.model["weights"].shape[1] == small_mlp_params()
    acc = res.history["accuracy"].dropna()
    assert acc.iloc[-1] > acc.iloc[0] + 0.4
    assert res.final["accuracy"] > 0.7


def test_model_factory_is_seeded_like_the_built_in_models():
    a = fedray.run(**_cfg("fedavg", {"model": FACTORY}, rounds=1))
    b = fedray.run(**_cfg("fedavg", {"model": FACTORY}, rounds=1))
    c = fedray.run(**_cfg("fedavg", {"model": FACTORY}, rounds=1, seed=5))
    _same(a, b)
    assert not np.array_equal(a.model["weights"], c.model["weights"])


def shape_checked(input_shape, n_classes):
    """A factory whose network takes only batches of samples ``(b, *input_shape)``, as the docs promise it
    gets them (a convolution on (C, H, W) samples, no flattening of its own)."""
    import torch
    from torch import nn

    class Checked(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(input_shape[0], 8, 3, padding=1)
            self.head = nn.Linear(8 * input_shape[1] * input_shape[2], n_classes)

        def forward(self, x):
            if tuple(x.shape[1:]) != tuple(input_shape):
                raise ValueError(f"a batch of shape {tuple(x.shape)}; expected (b, *{tuple(input_shape)})")
            return self.head(torch.relu(self.conv(x)).flatten(1))

    return Checked()


@pytest.mark.parametrize("batched", [False, True])
def test_a_factory_gets_batches_of_its_input_shape_in_training_and_evaluation(batched):
    """Property: a model built by ``factory(input_shape, n_classes)`` is trained and evaluated on batches of
    shape (b, *input_shape), as the model check probes it, by the per-client loop and the batched path alike
    (on today's main training handed it flat rows (b, C*H*W) and every client failed)."""
    cfg = _cfg("fedavg", {"model": f"{HERE}:shape_checked", "epochs": 3}, data={"dataset": "sklearn:digits"},
               n_clients=4, fraction=1.0, rounds=3)
    cfg["runtime"]["batched"] = batched
    res = fedray.run(**cfg)
    assert res.final["accuracy"] > 0.5  # chance is 0.1
    assert int(res.history["clients_trained"].sum()) == 4 * 3


def returns_int(input_shape, n_classes):
    return 3


def wrong_outputs(input_shape, n_classes):
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), n_classes + 1))


def fails(input_shape, n_classes):
    raise RuntimeError("no GPU here\nsecond line")


NOT_CALLABLE = 42
HERE = __name__


@pytest.mark.parametrize("ref,match", [
    ("no_such_pkg.models:net", r"algorithm.params.model: cannot import module 'no_such_pkg.models' .*no module named "
                               r"'no_such_pkg'"),
    ("examples.plugins.models:missing", r"module 'examples.plugins.models' has no attribute 'missing'"),
    (f"{HERE}:NOT_CALLABLE", r"is not callable \(got int\); it must be a function \(input_shape, n_classes\)"),
    (f"{HERE}:returns_int", r"returned int, not a torch.nn.Module"),
    (f"{HERE}:wrong_outputs", r"returns outputs of shape \(2, 11\) for a batch of shape \(2, 1, 8, 8\); expected "
                              r"logits of shape \(2, 10\)"),
    (f"{HERE}:fails", r"failed when called with \(\(1, 8, 8\), 10\): RuntimeError: no GPU here$"),
    ("not a:reference", r"'not a:reference' is not a model reference; write 'package.module:function'"),
])
def test_bad_model_references_are_one_line_errors(ref, match):
    with pytest.raises(ConfigError, match=match) as err:
        fedray.run(**_cfg("fedavg", {"model": ref}, rounds=1))
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("algorithm.params.model: ")


def test_model_reference_errors_come_before_any_data_when_they_can():
    with pytest.raises(ConfigError, match="cannot import module 'no_such_pkg'") as err:
        fedray.make_config(algorithm={"name": "flacc", "params": {"model": "no_such_pkg:net"}})
    assert "\n" not in str(err.value)


def test_built_in_model_names_keep_working():
    assert (
        fedray.make_config(algorithm={"name": "fedavg", "params": {"model": "cnn8"}}).algorithm.params["model"]
        == "cnn8"
    )
    with pytest.raises(ConfigError, match="unknown model 'resnet'"):
        fedray.make_config(algorithm={"name": "fedavg", "params": {"model": "resnet"}})


# --- Per-FedAvg: custom client training ----------------------------------------------------
def test_perfedavg_runs_end_to_end_and_personalises_only_the_evaluation():
    with fedray.Session(_cfg(rounds=3)) as s:
        plain = s.run(PERFEDAVG, {**TRAIN, "alpha": 0.05, "personal_steps": 0})
        personal = s.run(PERFEDAVG, {**TRAIN, "alpha": 0.05, "personal_steps": 1})
        fedavg = s.run()
    # evaluation adapts a copy and reloads the received model: training is the same
    assert np.array_equal(plain.model["weights"], personal.model["weights"])
    assert plain.history["train_loss"].tolist() == personal.history["train_loss"].tolist()
    assert plain.history["test_loss"].tolist() != personal.history["test_loss"].tolist()
    # and it is not FedAvg's training
    assert not np.array_equal(plain.model["weights"], fedavg.model["weights"])
    assert np.isfinite(personal.final["accuracy"])
    assert personal.final["n_clusters"] == 1


def test_perfedavg_refuses_adam_in_one_line():
    with pytest.raises(ConfigError, match=r"algorithm.params.optimizer: 'perfedavg' takes plain gradient steps") as err:
        fedray.run(**_cfg(PERFEDAVG, {"optimizer": "adam"}, rounds=1))
    assert "\n" not in str(err.value)


# --- Ray -----------------------------------------------------------------------------------
def test_plugins_and_model_factory_give_the_same_bits_on_ray(ray_session):
    """Relies on the clients' processes importing ``examples`` (the repository root is the
    working directory of the driver and of the embedded Ray instance's workers, and the
    runtime ships plug-in modules it can name)."""
    out = {}
    for backend in ("local", "ray"):
        with fedray.Session(_cfg(rounds=2, backend=backend)) as s:
            out[backend] = (s.run(FEDPROX, {**TRAIN, "mu": 0.5}),
                            s.run(PERFEDAVG, {**TRAIN, "alpha": 0.05}),
                            s.run("fedavg", {**TRAIN, "model": FACTORY}))
    for a, b in zip(out["local"], out["ray"]):
        _same(a, b)


# --- the plug-ins use only the public API ----------------------------------------------------
PUBLIC_MODULES = {"fedray", "fedray.supervised"}


@pytest.mark.parametrize("name", ["fedprox.py", "perfedavg.py", "pfedme.py", "models.py"])
def test_example_plugins_import_only_public_names(name):
    tree = ast.parse((PLUGINS / name).read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod.split(".")[0] == "fedray" and mod not in PUBLIC_MODULES:
                bad.append(f"from {mod}")
            bad += [f"{mod}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] == "fedray" and a.name not in PUBLIC_MODULES]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "fedray":
            if node.attr.startswith("_"):
                bad.append(f"fedray.{node.attr}")
    assert bad == []
