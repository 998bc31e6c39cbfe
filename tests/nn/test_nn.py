"""fedray.nn: models by name, flat weights, the training loop, threads and devices, client splits."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from fedray.core.errors import ConfigError
from fedray.nn import check_model, model_spec, resolve_model_name
from fedray.nn.models import build_model, n_parameters
from fedray.nn.split import client_split, split_rows
from fedray.nn.train import (
    default_threads,
    evaluate,
    fit,
    get_flat,
    initial_weights,
    model_for,
    resolve_device,
    set_flat,
    torch_threads,
    train,
)


def _digits(n: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data[:n] / 16.0).astype(np.float32), d.target[:n].astype(np.int64)


@pytest.mark.parametrize("name,shape", [("cnn28", (1, 28, 28)), ("cnn8", (1, 8, 8)), ("mlp", (13,)),
                                        ("cnn1d", (64,)), ("cnn1d", (2, 32)), ("cnn8", (8, 8))])
def test_models_map_flat_samples_to_logits(name, shape):
    model = build_model(name, shape, 7, seed=0)
    x = torch.zeros(5, int(np.prod(shape)))
    assert model(x).shape == (5, 7)
    assert model.sample_shape == shape


def test_cnn28_is_the_papers_network():
    model = build_model("cnn28", (1, 28, 28), 10, seed=0)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    dense = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    pools = [m for m in model.modules() if isinstance(m, torch.nn.MaxPool2d)]
    assert [(c.out_channels, c.kernel_size) for c in convs] == [(32, (5, 5)), (64, (5, 5))]
    assert len(pools) == 2 and dense[0].out_features == 512 and dense[-1].out_features == 10
    cnn1d = build_model("cnn1d", (128,), 12, seed=0)
    assert [c.out_channels for c in cnn1d.modules() if isinstance(c, torch.nn.Conv1d)] == [64, 128, 256]
    assert [m.out_features for m in cnn1d.modules() if isinstance(m, torch.nn.Linear)] == [128, 64, 12]


def test_bad_model_choices_are_clear_errors():
    with pytest.raises(ConfigError, match=r"algorithm.params.model: unknown model 'resnet'.*cnn28"):
        check_model("resnet", (1, 8, 8))
    with pytest.raises(
        ConfigError, match=r"'cnn28' is an image model but the data are tabular \(sample shape \(4,\)\)"
    ):
        build_model("cnn28", (4,), 3, seed=0)
    with pytest.raises(ConfigError, match="'cnn1d' is a model for 1-D signals"):
        check_model("cnn1d", (1, 8, 8))
    with pytest.raises(ConfigError, match="needs labels"):
        model_spec("mlp", (4,), None, 0)
    assert resolve_model_name("auto", (1, 28, 28)) == "cnn28"
    assert resolve_model_name("auto", (1, 8, 8)) == "cnn8"
    assert resolve_model_name("auto", (30,)) == "mlp"


def test_initial_weights_depend_on_the_seed_only_and_leave_torch_rng_alone():
    before = torch.random.get_rng_state().clone()
    spec = model_spec("cnn8", (1, 8, 8), 10, seed=3)
    a, b = initial_weights(spec), initial_weights(spec)
    c = initial_weights({**spec, "seed": 4})
    assert torch.equal(before, torch.random.get_rng_state())
    assert a.dtype == np.float32 and a.shape == (n_parameters(build_model("cnn8", (1, 8, 8), 10, 3)),)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_flat_weights_round_trip():
    model = build_model("mlp", (6,), 3, seed=0)
    v = np.arange(n_parameters(model), dtype=np.float32) / 100
    set_flat(model, v)
    assert np.array_equal(get_flat(model), v)
    v.setflags(write=False)  # vectors arriving from the object store are read-only
    set_flat(model, v)
    with pytest.raises(ValueError, match="parameters"):
        set_flat(model, v[:-1])


def test_training_is_deterministic_for_the_same_batch_order_and_learns_digits():
    X, y = _digits()
    spec = model_spec("cnn8", (1, 8, 8), 10, seed=0)
    out = []
    for seed in (1, 1, 2):
        m = model_for(spec, "cpu")
        set_flat(m, initial_weights(spec))
        train(m, X[:500], y[:500], epochs=10, batch_size=32, lr=0.2, rng=np.random.default_rng(seed))
        out.append(get_flat(m))
    assert np.array_equal(out[0], out[1])  # same seed, same bits
    assert not np.array_equal(out[0], out[2])  # the batch order comes from rng
    m = model_for(spec, "cpu")
    set_flat(m, out[0])
    loss, acc = evaluate(m, X[500:], y[500:])
    assert acc > 0.6 and np.isfinite(loss)


def test_fit_is_generic_enough_for_an_autoencoder():
    X, _ = _digits(300)
    torch.manual_seed(0)
    ae = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 64), torch.nn.Sigmoid())
    losses = fit(ae, (X,), lambda m, xb: torch.nn.functional.mse_loss(m(xb), xb), epochs=5, batch_size=32,
                 lr=1e-2, optimizer="adam", rng=np.random.default_rng(0))
    assert len(losses) == 5 and losses[-1] < 0.7 * losses[0]
    with pytest.raises(ConfigError, match="optimizer"):
        fit(ae, (X,), lambda m, xb: m(xb).sum(), epochs=1, batch_size=8, lr=0.1, optimizer="lbfgs",
            rng=np.random.default_rng(0))


def test_threads_are_one_outside_ray_and_restored(monkeypatch):
    assert default_threads() == 1
    old = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == old


def test_devices():
    assert resolve_device("cpu").type == "cpu"
    with pytest.raises(ConfigError, match="algorithm.params.device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto").type == "cpu"
        with pytest.raises(ConfigError, match="no CUDA device"):
            resolve_device("cuda")


def test_threads_follow_the_cpus_ray_gives_the_actor(ray_session):
    ray = ray_session

    @ray.remote(num_cpus=2)
    def two() -> tuple[int, str]:
        from fedray.nn.train import default_threads, resolve_device

        return default_threads(), resolve_device("auto").type

    @ray.remote(num_cpus=0.5)
    def half() -> int:
        from fedray.nn.train import default_threads

        return default_threads()

    assert ray.get(two.remote()) == (2, "cpu")
    assert ray.get(half.remote()) == 1


class _Client:
    def __init__(self, X, y, cid=0, seed=0, meta=None):
        from fedray.runtime.clients import ClientData

        self.data = ClientData(X, y, (X.shape[1],))
        self.labels = y
        self.id, self.seed, self.state, self.meta = cid, seed, {}, dict(meta or {})


def test_client_split_is_85_15_disjoint_and_deterministic():
    X, y = _digits(200)
    tr, te = split_rows(200, 0.15, seed=0, client_id=3)
    assert len(te) == 30 and len(tr) == 170 and not set(tr) & set(te)
    assert np.array_equal(te, split_rows(200, 0.15, seed=0, client_id=3)[1])
    assert not np.array_equal(te, split_rows(200, 0.15, seed=0, client_id=4)[1])
    c = _Client(X, y, cid=3)
    s = client_split(c)
    assert s.n_train == 170 and s.n_test == 30 and s.X_train.dtype == np.float32
    assert client_split(c) is s  # cached with the client
    fixed = client_split(_Client(X, y, meta={"n_test": 20}))
    assert np.array_equal(fixed.X_test, X[-20:]) and np.array_equal(fixed.y_train, y[:-20])


def test_nn_package_root_and_split_do_not_import_torch():
    code = "import sys, fedray.nn, fedray.nn.split; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
