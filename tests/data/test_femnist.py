"""FEMNIST read from LEAF's JSON shards: writers are clients, with LEAF's own train/test rows."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedray.api.config import make_config
from fedray.core.errors import ConfigError, DataError
from fedray.data.datasets import _load_cached, load_dataset
from fedray.data.federation import build_federation, materialize
from tests.conftest import SHARED_DATA


def _shard(path: Path, writers: dict[str, tuple[np.ndarray, list[int]]]) -> None:
    """One LEAF shard: users, num_samples, user_data = {writer: {x: [[784 floats]], y: [labels]}}."""
    doc = {"users": list(writers), "num_samples": [len(y) for _, y in writers.values()],
           "user_data": {w: {"x": x.tolist(), "y": y} for w, (x, y) in writers.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def _leaf(tmp_path: Path) -> dict[str, dict[str, tuple[np.ndarray, list[int]]]]:
    rng = np.random.default_rng(0)

    def rows(labels: list[int]) -> tuple[np.ndarray, list[int]]:
        return rng.integers(0, 256, size=(len(labels), 784)) / 255.0, labels

    parts = {"train": {"w1": rows([0, 11, 40, 61, 5]), "w2": rows([12, 37, 3]), "w4": rows([7, 8])},
             "test": {"w1": rows([10, 36]), "w2": rows([9]), "w3": rows([1, 2])}}  # w3: test only, w4: train only
    _shard(tmp_path / "femnist" / "train" / "all_data_0_niid_05_keep_0_train_9.json",
           {k: parts["train"][k] for k in ("w1",)})
    _shard(tmp_path / "femnist" / "train" / "all_data_1_niid_05_keep_0_train_9.json",
           {k: parts["train"][k] for k in ("w2", "w4")})
    _shard(tmp_path / "femnist" / "test" / "all_data_0_niid_05_keep_0_test_9.json", parts["test"])
    return parts


def _fed(tmp_path, n_clients=None, seed=0, options=None, partition=None):
    cfg = make_config(data={"dataset": "femnist", "data_dir": str(tmp_path), "options": options or {},
                            "partition": partition or {}}, federation={"n_clients": n_clients})
    return build_federation(cfg.data, n_clients, seed)


def test_writers_become_clients_with_leafs_own_train_and_test_rows(tmp_path):
    parts = _leaf(tmp_path)
    fed = _fed(tmp_path)  # no partition named: femnist's natural one, by_writer
    assert fed.extras["partition"] == "by_writer"
    assert [s.name for s in fed.specs] == ["w1", "w2"]  # w3 has no training rows, w4 no test rows
    assert fed.n_classes == 62 and fed.sample_shape == (1, 28, 28)
    assert any("2 of 4 writers left out" in n for n in fed.notes)
    for spec in fed.specs:
        X, y, _ = materialize(spec)
        (xtr, ytr), (xte, yte) = parts["train"][spec.name], parts["test"][spec.name]
        assert spec.meta["n_test"] == len(yte)
        # training rows first, then test rows; ink 1 and background 0 as in MNIST (LEAF stores 1 - ink)
        assert np.array_equal(X, 1.0 - np.concatenate([xtr, xte]))
        assert y.tolist() == ytr + yte


def test_classes_letters_keeps_52_classes_renumbered_upper_then_lower(tmp_path):
    _leaf(tmp_path)
    ds = load_dataset("femnist", str(tmp_path), classes="letters")
    assert len(ds.meta["class_names"]) == 52 and ds.meta["class_names"][0] == "A" and ds.meta["class_names"][26] == "a"
    # letters of w1..w4: 11 40 61 | 10 36 | 12 37 -> minus 10
    assert sorted(ds.y.tolist()) == sorted([1, 30, 51, 0, 26, 2, 27])
    assert ds.n_classes == 52
    digits = load_dataset("femnist", str(tmp_path), classes="digits")
    assert set(digits.y.tolist()) <= set(range(10)) and digits.n_classes == 10


def test_writer_choice_is_seeded_and_bounded(tmp_path):
    _leaf(tmp_path)
    a = [s.name for s in _fed(tmp_path, n_clients=1, seed=3).specs]
    assert a == [s.name for s in _fed(tmp_path, n_clients=1, seed=3).specs]
    picks = {_fed(tmp_path, n_clients=1, seed=s).specs[0].name for s in range(12)}
    assert picks == {"w1", "w2"}  # the seed chooses among the writers that qualify
    fixed = {_fed(tmp_path, n_clients=1, seed=s, partition={"name": "by_writer", "writer_seed": 5}).specs[0].name
             for s in range(6)}
    assert len(fixed) == 1  # writer_seed fixes the writers whatever the run's seed
    assert [s.name for s in _fed(tmp_path, partition={"name": "by_writer", "min_samples": 5}).specs] == ["w1"]
    with pytest.raises(DataError, match="3 writers asked for but 2 writers qualify"):
        _fed(tmp_path, n_clients=3)
    with pytest.raises(ConfigError, match="unknown option"):
        _fed(tmp_path, partition={"name": "by_writer", "writers": 3})


def test_bad_leaf_files_are_one_line_data_errors(tmp_path):
    with pytest.raises(DataError, match="train/ and test/"):
        load_dataset("femnist", str(tmp_path))
    _leaf(tmp_path)
    bad = tmp_path / "femnist" / "test" / "all_data_0_niid_05_keep_0_test_9.json"
    bad.write_text('{"users": [')
    _load_cached.cache_clear()
    with pytest.raises(DataError, match="not a LEAF JSON shard"):
        load_dataset("femnist", str(tmp_path))
    _shard(bad, {"w1": (np.zeros((1, 10)), [1])})
    _load_cached.cache_clear()
    with pytest.raises(DataError, match="784"):
        load_dataset("femnist", str(tmp_path))
    with pytest.raises(ConfigError, match="unknown option"):
        load_dataset("femnist", str(tmp_path), writers=3)
    with pytest.raises(DataError, match="by_writer"):
        build_federation(make_config(data={"dataset": "sklearn:digits", "partition": {"name": "by_writer"}}).data, 3, 0)


FEMNIST = SHARED_DATA / "femnist"


@pytest.mark.skipif(not (FEMNIST / "train").is_dir(), reason=f"LEAF's FEMNIST sample not found under {FEMNIST}")
def test_flacc_runs_on_the_shared_femnist_writers_with_their_own_test_rows(tmp_path):
    import fedray

    pytest.importorskip("torch")
    train: dict[str, int] = {}
    test: dict[str, int] = {}
    for part, counts in (("train", train), ("test", test)):
        for f in sorted((FEMNIST / part).glob("*.json")):
            doc = json.loads(f.read_text())
            for w, n in zip(doc["users"], doc["num_samples"]):
                counts[w] = counts.get(w, 0) + n
    fed = _fed(SHARED_DATA, n_clients=None)
    assert sorted(s.name for s in fed.specs) == sorted(set(train) & set(test))  # the 105 writers of train/
    for spec in fed.specs:
        assert spec.meta["n_test"] == test[spec.name] and len(spec.indices) == train[spec.name] + test[spec.name]
    res = fedray.run(data={"dataset": "femnist", "data_dir": str(SHARED_DATA)},
                     algorithm={"name": "flacc", "params": {"epochs": 1, "n_sep": 1, "lr": 0.05}},
                     federation={"n_clients": 4, "rounds": 2}, runtime={"backend": "local"}, output=tmp_path / "out",
                     progress=False)
    clients = res.clients.sort_values("client_id")
    assert set(clients["name"]) <= set(train) & set(test)
    assert clients["n_samples"].tolist() == [train[w] + test[w] for w in clients["name"]]
    assert np.isfinite(clients["accuracy"]).all()
