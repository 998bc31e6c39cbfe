"""Batched local training (fedray.nn.batched, the batched form of fedray.nn.supervised.client_round).

The clients of a host that train with the base's hooks train together; the result equals the
per-client loop (runtime.batched = false) up to float rounding, and does not depend on which
clients share a host (local and ray give the same bits). Clients whose class overrides the
training hooks run their own code.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import fedray
from fedray.nn import batched as nn_batched
from fedray.nn import stacked as nn_stacked
from fedray.nn.batched import can_batch, fit_many
from fedray.nn.models import build_model
from fedray.nn.train import _cross_entropy, fit, get_flat, set_flat

ROTATED = {"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [30, 70]}}
SIZES = [37, 64, 5, 0, 50]  # uneven: short last batches, a tiny client, one without rows


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


def _problem(name: str, shape: tuple[int, ...]):
    model = build_model(name, shape, 10, 0)
    rs = np.random.default_rng(1)
    w0 = get_flat(model)
    starts = np.stack([w0 + 0.01 * rs.normal(size=w0.shape).astype(np.float32) for _ in SIZES])
    data = [(rs.normal(size=(n, *shape)).astype(np.float32), rs.integers(0, 10, n)) for n in SIZES]
    return model, starts, data


def _loop(model, starts, data, path=None, **kw):
    out, losses = [], []
    for i, (X, y) in enumerate(data):
        set_flat(model, starts[i])
        losses.append(fit(model, (X, y), _cross_entropy, rng=np.random.default_rng(100 + i), **kw)[-1])
        out.append(get_flat(model))
    return np.stack(out), np.array(losses)


def _many(model, starts, data, which=None, **kw):
    which = list(range(len(data))) if which is None else which
    return fit_many(model, starts[which], [data[i] for i in which], [np.random.default_rng(100 + i) for i in which],
                    **kw)


SGD, MOMENTUM = dict(optimizer="sgd"), dict(optimizer="sgd", momentum=0.9, weight_decay=1e-3)


@pytest.mark.parametrize("name,shape,opt,path", [
    (name, shape, opt, path) for name, shape in [("mlp", (20,)), ("cnn8", (1, 8, 8))] for opt in (SGD, MOMENTUM)
    for path in ("explicit", "vmap")] + [("cnn1d", (16,), SGD, "explicit")])  # + 1-D convolutions
def test_batched_training_equals_the_loop_within_1e_5_with_uneven_clients(name, shape, opt, path):
    model, starts, data = _problem(name, shape)
    kw = dict(epochs=3 if name != "cnn1d" else 1, batch_size=16, lr=0.1, path=path, **opt)
    w_loop, l_loop = _loop(model, starts, data, **kw)
    w_many, l_many = _many(model, starts, data, **kw)
    for i in range(len(SIZES)):
        assert _rel(w_many[i], w_loop[i]) < 1e-5, f"client {i} ({SIZES[i]} rows)"
        assert not np.array_equal(w_loop[i], starts[i]) or SIZES[i] == 0
    np.testing.assert_array_equal(w_many[3], starts[3])  # no rows: the client does not move
    assert np.isnan(l_many[3]) and np.isnan(l_loop[3])
    np.testing.assert_allclose(np.delete(l_many, 3), np.delete(l_loop, 3), rtol=1e-5)


def _odd_convnet(conv1d: bool) -> tuple[nn.Module, tuple[int, ...]]:
    """Strides, dilation, uneven padding, overlapping and padded pooling, ceil mode, ReLU before and after a pooling."""
    if conv1d:
        shape: tuple[int, ...] = (1, 24)
        model = nn.Sequential(nn.Conv1d(1, 4, 5, stride=2, padding=3, dilation=2), nn.ReLU(),
                              nn.MaxPool1d(3, stride=2, padding=1, ceil_mode=True),
                              nn.Conv1d(4, 3, 3, padding=1), nn.ReLU(), nn.MaxPool1d(2), nn.Flatten(),
                              nn.Linear(9, 10))
    else:
        shape = (1, 9, 11)
        model = nn.Sequential(
            nn.Conv2d(1, 6, 3, stride=2, padding=(1, 2)), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1),
            nn.Conv2d(6, 5, 2, dilation=2, padding=1), nn.MaxPool2d(2, ceil_mode=True), nn.ReLU(),
            nn.Flatten(), nn.Linear(20, 10))
    return model, shape


@pytest.mark.parametrize("conv1d", [False, True])
def test_the_written_out_forward_handles_any_stride_padding_dilation_and_pooling(conv1d):
    """The stacked forward (convolutions as matrix products of patches, channels-last pooling, a ReLU
    moved behind its pooling) gives the loop's weights for layer settings the built-in models lack."""
    with torch.random.fork_rng(devices=[]):  # seeded weights, the global generator untouched
        torch.manual_seed(0)
        model, shape = _odd_convnet(conv1d)
    with torch.no_grad():
        n_out = model(torch.zeros(1, *shape)).shape
    assert n_out == (1, 10)
    assert nn_stacked.flat_layers(model) is not None, "the explicit forward must know these layers"
    rs = np.random.default_rng(3)
    w0 = get_flat(model)
    starts = np.stack([w0 + 0.05 * rs.normal(size=w0.shape).astype(np.float32) for _ in SIZES])
    data = [(rs.normal(size=(n, *shape)).astype(np.float32), rs.integers(0, 10, n)) for n in SIZES]
    kw = dict(epochs=2, batch_size=16, lr=0.1, **SGD)
    w_loop, _ = _loop(model, starts, data, **kw)
    w_many, _ = _many(model, starts, data, path="explicit", **kw)
    for i in range(len(SIZES)):
        assert _rel(w_many[i], w_loop[i]) < 1e-5, f"client {i} ({SIZES[i]} rows)"
        assert not np.array_equal(w_loop[i], starts[i]) or SIZES[i] == 0


def test_input_patches_cut_once_or_step_by_step_give_the_same_bits(monkeypatch):
    """cnn8's input patches are cut once for all rows; above INPUT_PATCHES_MAX they are cut at each step
    from the gathered rows: the same products, so the same bits."""
    model, starts, data = _problem("cnn8", (1, 8, 8))
    kw = dict(epochs=2, batch_size=16, lr=0.1)
    once, _ = _many(model, starts, data, **kw)
    monkeypatch.setattr(nn_batched, "INPUT_PATCHES_MAX", 0)
    stepwise, _ = _many(model, starts, data, **kw)
    np.testing.assert_array_equal(once, stepwise)


def test_only_narrow_kernels_run_as_matrix_products_of_patches():
    """A patch at most twice the output: cnn8's and cnn28's first convolutions; cnn28's second one
    (32 x 25 values a patch for 64 outputs) stays a grouped convolution."""
    convs = [m for m in build_model("cnn28", (1, 28, 28), 10, 0).modules() if isinstance(m, nn.Conv2d)]
    assert [nn_stacked._patches_pay(m) for m in convs] == [True, False]
    assert all(nn_stacked._patches_pay(m) for m in build_model("cnn8", (1, 8, 8), 10, 0).modules()
               if isinstance(m, nn.Conv2d))


def test_relu_moves_behind_its_max_pooling_in_the_written_out_forward():
    layers = nn_stacked.flat_layers(build_model("cnn8", (1, 8, 8), 10, 0))
    kinds = [type(m).__name__ for _, m in layers]
    assert kinds[kinds.index("Conv2d") + 1:kinds.index("Conv2d") + 3] == ["MaxPool2d", "ReLU"]


def test_batched_adam_follows_torch_adam_on_an_mlp():
    model, starts, data = _problem("mlp", (20,))
    kw = dict(epochs=2, batch_size=16, lr=0.01, optimizer="adam")
    w_loop, _ = _loop(model, starts, data, **kw)
    w_many, _ = _many(model, starts, data, **kw)
    assert max(_rel(w_many[i], w_loop[i]) for i in range(len(SIZES))) < 1e-4


@pytest.mark.parametrize("path", ["explicit", "vmap"])
def test_a_clients_bits_do_not_depend_on_the_clients_beside_it(path):
    model, starts, data = _problem("cnn8", (1, 8, 8))
    kw = dict(epochs=2, batch_size=16, lr=0.1, path=path)
    all_, _ = _many(model, starts, data, **kw)
    for which in ([0], [1, 2], [4, 0], [2, 3, 4]):
        part, _ = _many(model, starts, data, which, **kw)
        np.testing.assert_array_equal(part, all_[which])


def test_networks_with_dropout_batch_norm_or_buffers_are_not_batched():
    assert can_batch(build_model("cnn28", (1, 28, 28), 10, 0))
    assert nn_stacked.flat_layers(build_model("cnn28", (1, 28, 28), 10, 0)) is not None  # the explicit forward
    assert not can_batch(nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2)))
    assert not can_batch(nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)))
    with pytest.raises(ValueError, match="client by client"):
        fit_many(nn.Sequential(nn.Linear(4, 2), nn.Dropout()), np.zeros((1, 10), np.float32),
                 [(np.zeros((3, 4), np.float32), np.zeros(3, np.int64))], [np.random.default_rng(0)],
                 epochs=1, batch_size=2, lr=0.1)


def test_fit_many_rejects_mismatched_inputs_in_one_line():
    model, starts, data = _problem("mlp", (20,))
    with pytest.raises(ValueError, match="5 clients' data, 4 generators"):
        fit_many(model, starts, data, [np.random.default_rng(0)] * 4, epochs=1, batch_size=8, lr=0.1)
    with pytest.raises(ValueError, match="parameters"):
        fit_many(model, starts[:, :-1], data, [np.random.default_rng(0)] * 5, epochs=1, batch_size=8, lr=0.1)
    with pytest.raises(ValueError, match="explicit stacked forward does not know"):
        fit_many(nn.Sequential(nn.Linear(20, 4), nn.Softplus()), starts[:, :84], data,
                 [np.random.default_rng(0)] * 5, epochs=1, batch_size=8, lr=0.1, path="explicit")
    with pytest.raises(fedray.ConfigError, match="optimizer"):
        fit_many(model, starts, data, [np.random.default_rng(0)] * 5, epochs=1, batch_size=8, lr=0.1,
                 optimizer="lbfgs")


def _cfg(alg: str, batched: bool, backend: str = "local", rounds: int = 1, **params):
    params = {"model": "cnn8", "epochs": 2, "eval_every": 1, "stack_clients": "always", **params}
    return dict(algorithm={"name": alg, "params": params},
                data=ROTATED, federation={"n_clients": 8, "fraction": 0.5, "rounds": rounds}, seed=2,
                runtime={"backend": backend, "batched": batched, "progress": False})


@pytest.fixture
def spy(monkeypatch):
    calls: list[int] = []
    real = nn_batched.fit_many

    def counting(model, starts, *a, **kw):
        calls.append(len(starts))
        return real(model, starts, *a, **kw)

    monkeypatch.setattr(nn_batched, "fit_many", counting)
    return calls


@pytest.mark.parametrize("alg,params", [("fedavg", {}), ("flacc", {"n_merge": 1}), ("fedavg", {"model": "mlp"})])
def test_one_round_batched_equals_the_per_client_loop_within_1e_5(alg, params, spy):
    on = fedray.run(**_cfg(alg, True, **params), output=None)
    assert spy and max(spy) == 4, "the sampled clients did not train together"
    off = fedray.run(**_cfg(alg, False, **params), output=None)
    assert len(spy) == 1, "runtime.batched = false must run the loop"
    assert _rel(on.model["weights"], off.model["weights"]) < 1e-5
    np.testing.assert_allclose(on.history["train_loss"], off.history["train_loss"], rtol=1e-5)
    assert on.history["accuracy"].tolist() == off.history["accuracy"].tolist()  # evaluated before training


def test_clients_of_different_cluster_models_train_in_one_stacked_call(spy):
    """After FL+HC clusters every client alone, the four clients trained in a round hold four different
    models; the host still trains them in one stacked call (the batched form takes each client's
    shared object), and the result stays within 1e-5 of the loop."""
    params = dict(n_pre=1, distance_threshold=1e-6, rounds=4)
    on = fedray.run(**_cfg("flhc", True, **params), output=None)
    assert len(on.model["model_keys"]) == 8  # one model per client after the clustering round
    assert spy[2:] == [4, 4], f"the clients of different models trained apart: {spy}"
    off = fedray.run(**_cfg("flhc", False, **params), output=None)
    assert _rel(on.model["weights"], off.model["weights"]) < 1e-5


def test_local_and_ray_give_the_same_bits_with_batched_training(ray_session, spy):
    out = [fedray.run(**_cfg("flacc", True, backend, rounds=3, n_merge=1, epochs=1), output=None)
           for backend in ("local", "ray")]
    a, b = out
    np.testing.assert_array_equal(a.model["weights"], b.model["weights"])
    assert a.history["train_loss"].tolist() == b.history["train_loss"].tolist()
    assert a.final["client_accuracy"] == b.final["client_accuracy"]


FEDPROX = "examples.plugins.fedprox:FedProx"
PERFEDAVG = "examples.plugins.perfedavg:PerFedAvg"


@pytest.mark.parametrize("plugin,params", [(FEDPROX, {"mu": 0.5}), (PERFEDAVG, {"alpha": 0.03})])
def test_plugins_that_override_training_hooks_run_their_own_code(plugin, params, spy):
    on = fedray.run(**_cfg(plugin, True, rounds=2, **params), output=None)
    assert not spy, "a class overriding client_train or client_loss must not train in the batched path"
    off = fedray.run(**_cfg(plugin, False, rounds=2, **params), output=None)
    np.testing.assert_array_equal(on.model["weights"], off.model["weights"])  # the same code: the same bits
    plain = fedray.run(**_cfg("fedavg", True, rounds=2), output=None)
    assert _rel(on.model["weights"], plain.model["weights"]) > 1e-4  # and its own code changes the result


def test_the_batched_path_places_stacked_weights_on_the_models_device():
    model, starts, data = _problem("mlp", (20,))
    w, _ = fit_many(model, starts[:2], data[:2], [np.random.default_rng(0)] * 2, epochs=1, batch_size=8, lr=0.1)
    assert w.dtype == np.float32 and w.shape == starts[:2].shape  # back on the CPU as float32
    if torch.cuda.is_available():
        gpu = build_model("mlp", (20,), 10, 0).to("cuda")
        w_gpu, _ = fit_many(gpu, starts[:2], data[:2], [np.random.default_rng(0)] * 2, epochs=1, batch_size=8,
                            lr=0.1)
        assert _rel(w_gpu, w) < 1e-4


def test_fedcref_autoencoders_train_batched_as_client_by_client(spy):
    """Every client's cluster autoencoders (fc_train) in one stacked batch: within 1e-5 of the loop."""
    import copy
    import warnings

    from fedray.algorithms import fedcref_client as fc
    from fedray.api.session import Session
    from fedray.core.contract import Task
    from fedray.core.errors import SharedSamplesWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        s = Session(algorithm={"name": "fedcref", "params": {"stack_clients": "always", "hidden": [16, 8],
                                                             "local_epochs": 2, "fed_rounds": 1,
                                                             "max_iterations": 1, "batch_size": 32,
                                                             "init": "kmeans", "local_k": 3}},
                    data={"dataset": "sklearn:digits", "partition": {"name": "class-subsets", "classes": [2, 3],
                                                                    "samples_per_class": 25}},
                    federation={"n_clients": 4, "rounds": 50}, runtime={"backend": "local"}, seed=3)
    with s:
        res = s.run(output=False)
        host = s.executor.host
        ids = sorted(host.clients)
        saved = {c: copy.deepcopy(host.clients[c].state) for c in ids}
        assert res.summary["rounds"] > 0
        spec = {"n_features": 64, "hidden": (16, 8), "output": "sigmoid", "seed": 3}  # FedCRef's, as it builds it
        sh = {"spec": spec, "epochs": 2, "batch_size": 16, "lr": 1e-3, "stack_clients": "always"}
        out = {}
        for mode in (True, False):
            spy.clear()
            for c in ids:
                host.clients[c].state = copy.deepcopy(saved[c])
            host.batched = mode
            outcomes = host.run(7, [(c, Task(fc.fc_train, None), 0) for c in ids], sh)
            assert all(o.error is None for o in outcomes), [o.error for o in outcomes]
            assert bool(spy) == mode and (not mode or spy[-1] >= 2 * len(ids))  # all autoencoders at once
            out[mode] = [o.update["weights"] for o in outcomes]
    for a, b in zip(out[True], out[False]):
        assert a.shape == b.shape and a.shape[0] >= 2
        assert _rel(a, b) < 1e-5


def test_large_networks_train_client_by_client_on_the_cpu_and_chunks_change_no_bits():
    from fedray.nn.batched import clients_per_chunk

    # cnn28's activations for a batch of 32 (about 2.9 M values) would spill the caches: the loop
    assert clients_per_chunk(build_model("cnn28", (1, 28, 28), 10, 0), (1, 28, 28), 32) == 0
    assert clients_per_chunk(build_model("cnn8", (1, 8, 8), 10, 0), (1, 8, 8), 32) >= 2
    assert clients_per_chunk(nn.Sequential(nn.Linear(4, 2), nn.Dropout()), (4,), 32) == 0
    model, starts, data = _problem("cnn8", (1, 8, 8))
    kw = dict(epochs=2, batch_size=16, lr=0.1)
    whole, _ = _many(model, starts, data, **kw)
    chunked, _ = _many(model, starts, data, chunk=2, **kw)
    np.testing.assert_array_equal(whole, chunked)


def test_on_the_cpu_clients_stack_only_when_asked(spy):
    """stack_clients='gpu' (the default) trains client by client on the CPU, so CPU runs keep the loop's bits;
    'never' never stacks; both give the loop's bits."""
    loop = fedray.run(**_cfg("fedavg", False), output=None)
    for mode in ("gpu", "never"):
        res = fedray.run(**_cfg("fedavg", True, stack_clients=mode), output=None)
        assert not spy, f"stack_clients={mode!r} stacked clients on the CPU"
        np.testing.assert_array_equal(res.model["weights"], loop.model["weights"])
