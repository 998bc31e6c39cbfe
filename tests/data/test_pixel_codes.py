"""Image sets stay 8-bit pixel codes until a client's shard is cut: the pooled CIFAR-10 costs a byte a value
in the driver and in each process that builds shards, and the shards (and what trains on them) are the same
values as when the whole set was converted to float64 first."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.data.datasets import _load_cached, load_dataset, load_pooled
from fedray.data.federation import build_federation, materialize
from fedray.data.image_files import read_cifar_bin
from fedray.data.partitions import TRANSFORMS
from tests.conftest import SHARED_DATA

RNG = np.random.default_rng(11)
N = 40  # images in the small batch written below


def _cifar_folder(tmp_path):
    """A CIFAR-10 binary test batch of N random images (the authors' record format)."""
    X = RNG.integers(0, 256, size=(N, 3, 32, 32), dtype=np.uint8)
    y = np.arange(N) % 10
    d = tmp_path / "cifar-10-batches-bin"
    d.mkdir()
    (d / "test_batch.bin").write_bytes(b"".join(bytes([int(c)]) + x.tobytes() for x, c in zip(X, y)))
    _load_cached.cache_clear()
    return X, y


def _data(tmp_path, partition=None):
    return fedray.make_config(algorithm={"name": "fedavg", "params": {"model": "cnn32"}},
                              data={"dataset": "cifar10", "data_dir": str(tmp_path),
                                    "partition": partition or {"name": "iid"}},
                              federation={"n_clients": 4}).data


def test_the_pooled_set_holds_a_byte_a_value_and_shards_hold_the_float64_values(tmp_path):
    """Property: the cached pooled CIFAR-10 is uint8 (n x 3072 bytes, not 8 times that), load_dataset still
    gives float64 values in [0, 1], and every client's shard equals the float64 conversion of its images
    exactly (on today's main the pooled set was float64: 8 bytes a value in every process)."""
    X, y = _cifar_folder(tmp_path)
    ds = load_pooled("cifar10", str(tmp_path))
    assert ds.X.dtype == np.uint8 and ds.X.nbytes == N * 3072 and ds.pixel_scale == 255.0
    values = load_dataset("cifar10", str(tmp_path)).X
    assert values.dtype == np.float64 and np.array_equal(values, X.reshape(N, -1) / 255.0)
    for partition in ({"name": "iid"}, {"name": "rotated", "samples": [6, 10]}):
        fed = build_federation(_data(tmp_path, partition), 4, seed=3)
        assert load_pooled("cifar10", str(tmp_path)).X.dtype == np.uint8  # building the federation kept it so
        for spec in fed.specs:
            shard, labels, _ = materialize(spec)
            want = X.reshape(N, -1)[spec.indices].astype(np.float64) / 255.0
            for name, kw in spec.meta.get("transforms", ()):
                want = TRANSFORMS[name](want, None, **kw)[0]
            assert shard.dtype == np.float64 and np.array_equal(shard, want)
            assert np.array_equal(labels, y[spec.indices])


def test_a_training_step_on_a_shard_equals_one_on_images_converted_up_front(tmp_path):
    """Property: the weights after a step of local training (cnn32) on a client's shard are those of the same
    step on its images converted to float64 as a whole first (how the set was loaded before), within float32
    rounding; and a FedAvg round on the CIFAR-10 federation runs end to end."""
    from fedray.nn.models import build_model
    from fedray.nn.train import get_flat, train

    X, y = _cifar_folder(tmp_path)
    spec = build_federation(_data(tmp_path), 4, seed=3).specs[0]
    shard, labels, _ = materialize(spec)
    before = (X.reshape(N, -1).astype(np.float64) / 255.0)[spec.indices]
    weights = []
    for rows in (shard, before):
        model = build_model("cnn32", (3, 32, 32), 10, seed=1)
        train(model, rows.astype(np.float32).reshape(-1, 3, 32, 32), labels, epochs=1, batch_size=4, lr=0.05,
              rng=np.random.default_rng(0), device="cpu")
        weights.append(get_flat(model))
    np.testing.assert_allclose(weights[0], weights[1], rtol=0, atol=1e-6)
    res = fedray.run(algorithm={"name": "fedavg", "params": {"model": "cnn32", "epochs": 1, "batch_size": 8}},
                     data={"dataset": "cifar10", "data_dir": str(tmp_path), "partition": {"name": "iid"}},
                     federation={"n_clients": 2, "fraction": 1.0, "rounds": 1}, seed=3,
                     runtime={"backend": "local", "progress": False})
    assert np.isfinite(res.model["weights"]).all() and np.isfinite(res.history["train_loss"]).all()


@pytest.mark.skipif(not (SHARED_DATA / "cifar10" / "cifar-10-batches-bin").is_dir(), reason="no CIFAR-10 here")
def test_the_real_training_batches_cost_their_bytes():
    """Property: the five training batches (50,000 images) cache as 150 MB of codes, not 1.2 GB of float64."""
    _load_cached.cache_clear()
    ds = load_pooled("cifar10", str(SHARED_DATA), part="train")
    assert ds.X.dtype == np.uint8 and ds.X.nbytes == 50_000 * 3072
    first = read_cifar_bin(SHARED_DATA / "cifar10" / "cifar-10-batches-bin" / "data_batch_1.bin")[0]
    assert np.array_equal(ds.rows(slice(0, 5)), first[:5].reshape(5, -1) / 255.0)
    _load_cached.cache_clear()
