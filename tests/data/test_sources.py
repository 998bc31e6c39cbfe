"""Data sources are one registry: a user's source plugs in by one registration, built-in sources load
through it unchanged, and the shared G2 and Bank Marketing files load as the papers use them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fedray
from fedray.core.errors import ConfigError, DataError
from fedray.data import DATA_SOURCES, DataSource, available_datasets, build_federation, load_dataset, materialize
from fedray.data.datasets import check_dataset_name, register_data_source
from tests import plugins
from tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]


def _points(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 40)
    X = rng.normal(size=(120, 2)) * 0.2 + y[:, None] * 3.0
    path = tmp_path / "points.npz"
    np.savez(path, X=X, y=y)
    return path, X, y


def test_a_registered_source_runs_like_a_built_in_one(tmp_path):
    """One registration (examples/plugins/npz_source.py) makes "npz:PATH" a data set: it is listed, checked,
    split, and a run on it sees exactly the file's rows (the union of the shards is the file)."""
    import examples.plugins.npz_source  # noqa: F401  (registers "npz")

    path, X, y = _points(tmp_path)
    assert "npz:PATH" in available_datasets()
    check_dataset_name(f"npz:{path}")
    with pytest.raises(ConfigError, match="'npz' needs 'npz:PATH'"):
        check_dataset_name("npz")
    cfg = fedray.make_config({"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}},
                              "data": {"dataset": f"npz:{path}"}, "federation": {"n_clients": 4}, "seed": 1})
    fed = build_federation(cfg.data, 4, 1)
    shards = [materialize(s) for s in fed.specs]
    rows = np.vstack([s[0] for s in shards])
    assert sorted(map(tuple, rows)) == sorted(map(tuple, X))
    assert fed.has_labels and fed.n_classes == 3
    with pytest.raises(ConfigError, match=r"data.options: unknown option\(s\) \['label'\] for npz"):
        load_dataset(f"npz:{path}", labels=True, label=True)
    res = fedray.run({**cfg.model_dump(mode="python"), "runtime": {"backend": "local", "progress": False}},
                     output=False)
    assert res.final["ari"] == 1.0 and res.final["cluster_sizes"] == [40, 40, 40]  # the three blobs, all rows


def test_a_user_source_is_imported_where_the_shard_is_built(tmp_path):
    """A client process that never imported the plug-in builds its shard: the recipe names the module."""
    import examples.plugins.npz_source  # noqa: F401

    path, X, _ = _points(tmp_path)
    cfg = fedray.make_config({"algorithm": {"name": "kmeans"}, "data": {"dataset": f"npz:{path}"},
                              "federation": {"n_clients": 3}})
    spec = build_federation(cfg.data, 3, 0).specs[1]
    assert spec.source["module"] == "examples.plugins.npz_source"
    code = ("import pickle, sys; from fedray.data import materialize; "
            "X, y, _ = materialize(pickle.loads(sys.stdin.buffer.read())); print(X.shape[0], int(y.sum()))")
    import pickle

    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(spec), capture_output=True, cwd=ROOT,
                         check=True).stdout.decode().split()
    X1, y1, _ = materialize(spec)
    assert out == [str(X1.shape[0]), str(int(y1.sum()))]


def test_registration_names_and_builtin_sources():
    with pytest.raises(ConfigError, match="without ':'"):
        register_data_source("a:b", DataSource(lambda a, d, o: None))
    for name in ("sklearn", "benchmark", "csv", "parquet", "mnist", "scenario", "blobs", "bank", "femnist",
                 "fashion-mnist", "emnist", "cifar10"):
        assert name in DATA_SOURCES, name
    for shown in available_datasets():
        if not any(p in shown for p in ("NAME", "PATH", "SPLIT", "FOLDER")):
            check_dataset_name(shown)
    with pytest.raises(ConfigError, match="unknown dataset 'nothing'"):
        check_dataset_name("nothing")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['part'\] for sklearn"):
        load_dataset("sklearn:iris", part="train")


@pytest.mark.skipif(not (SHARED_DATA / "g2").is_dir(), reason=f"G2 sets not found under {SHARED_DATA}")
def test_g2_text_files_load_as_a_battery():
    """g2-2-30.txt with g2-2-30-gt.txt: 2048 points, two classes of 1024 around (500, 500) and (600, 600)."""
    ds = load_dataset("benchmark:g2/g2-2-30", SHARED_DATA)
    assert ds.X.shape == (2048, 2) and ds.y.tolist() == [0] * 1024 + [1] * 1024
    means = np.vstack([ds.X[ds.y == c].mean(axis=0) for c in (0, 1)])
    assert np.abs(means - [[500, 500], [600, 600]]).max() < 5
    raw = np.loadtxt(SHARED_DATA / "g2" / "g2-2-30.txt")
    assert np.array_equal(ds.X, raw)
    with pytest.raises(DataError, match="g2-2-35"):
        load_dataset("benchmark:g2/g2-2-35", SHARED_DATA)


@pytest.mark.skipif(not (SHARED_DATA / "bank").is_dir(), reason=f"Bank Marketing not found under {SHARED_DATA}")
def test_bank_marketing_loads_as_stallmann_and_wilbik_encode_it():
    """The first 3,000 rows: rows with an unknown job or education dropped, education 1/2/3, one group a job."""
    import pandas as pd

    raw = pd.read_csv(SHARED_DATA / "bank" / "bank-full.csv", sep=";", nrows=3000)
    keep = raw[(raw["job"] != "unknown") & raw["education"].isin(["primary", "secondary", "tertiary"])]
    ds = load_dataset("bank", SHARED_DATA, nrows=3000)
    assert ds.feature_names == ("age", "balance", "education") and ds.X.shape == (len(keep), 3) < (3000, 3)
    assert np.array_equal(ds.X[:, 0], keep["age"].to_numpy()) and np.array_equal(ds.X[:, 1], keep["balance"])
    assert np.array_equal(ds.X[:, 2], keep["education"].map({"primary": 1, "secondary": 2, "tertiary": 3}))
    assert list(ds.groups) == list(keep["job"]) and ds.y.sum() == (keep["y"] == "yes").sum()
    every = load_dataset("bank", SHARED_DATA, nrows=3000, attributes="all")
    assert every.X.shape == (len(keep), 3 + 5 + 3 + 1 + 3 + 3 + 4) and "job" not in every.feature_names
    for bad, msg in (({"attributes": "onehot"}, "data.options.attributes"), ({"nrows": 0}, "data.options.nrows"),
                     ({"file": "x"}, "data.options.file")):
        with pytest.raises(ConfigError, match=msg):
            load_dataset("bank", SHARED_DATA, **bad)


@pytest.mark.skipif(not (SHARED_DATA / "bank").is_dir(), reason=f"Bank Marketing not found under {SHARED_DATA}")
def test_fedray_run_on_bank_gives_one_client_a_job(tmp_path, capsys):
    from fedray.tools.cli import main

    cfg = tmp_path / "bank.yaml"
    cfg.write_text(f"algorithm: {{name: fedfcm, params: {{n_clusters: 4, max_rounds: 3}}}}\n"
                   f"data: {{dataset: bank, data_dir: {SHARED_DATA}, scale: standard, options: {{nrows: 2000}}}}\n"
                   "runtime: {backend: local}\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "-q"]) == 0
    import pandas as pd

    clients = pd.read_parquet(tmp_path / "out" / "clients.parquet")
    jobs = set(pd.read_csv(SHARED_DATA / "bank" / "bank-full.csv", sep=";", nrows=2000)["job"]) - {"unknown"}
    assert len(clients) == len(jobs)


def test_an_installed_package_declares_a_source_by_entry_point(tmp_path, monkeypatch):
    """``[project.entry-points."fedray.data_sources"] npz2 = "examples.plugins.npz_source:NPZ"``: the name
    works in a configuration file with nothing imported by hand."""
    plugins.installed_distribution(
        tmp_path,
        "npz-plugin",
        "fedray.data_sources",
        "npz2 = examples.plugins.npz_source:NPZ\nbroken = examples.plugins.npz_source:load_npz\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path, X, _ = _points(tmp_path)
    assert load_dataset(f"npz2:{path}").X.shape == X.shape
    with pytest.raises(ConfigError, match="'broken'.* not a fedray.data.DataSource"):
        check_dataset_name("broken:x")
