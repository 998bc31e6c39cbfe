"""Data sources and partitions: every row lands on exactly one client, shards are built in the client."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.api.config import DataConfig
from fedray.core.errors import ConfigError
from fedray.data import build_federation, load_dataset, materialize, partition_indices
from fedray.runtime.host import ClientHost


@pytest.mark.parametrize("name,opts", [("iid", {}), ("iid", {"stratified": True}), ("dirichlet", {"alpha": 0.3}),
                                       ("classes_per_client", {"classes": [1, 2]}), ("quantity_skew", {"alpha": 0.5})])
def test_partitions_cover_every_row_once(name, opts):
    y = load_dataset("sklearn:digits").y
    parts = partition_indices(name, len(y), y, 9, np.random.default_rng(0), **opts)
    allidx = np.concatenate(parts)
    assert len(parts) == 9
    assert len(np.unique(allidx)) == len(allidx)  # no row on two clients
    if name == "classes_per_client":  # rows of classes that no client drew stay unused
        assert set(allidx) <= set(range(len(y)))
    else:
        np.testing.assert_array_equal(np.sort(allidx), np.arange(len(y)))


def test_classes_per_client_limits_labels():
    y = load_dataset("sklearn:digits").y
    parts = partition_indices("classes_per_client", len(y), y, 12, np.random.default_rng(1), classes=2)
    assert all(len(np.unique(y[p])) <= 2 for p in parts if len(p))


def test_stratified_iid_keeps_proportions():
    y = load_dataset("sklearn:iris").y
    parts = partition_indices("iid", len(y), y, 5, np.random.default_rng(0), stratified=True)
    for p in parts:
        np.testing.assert_array_equal(np.bincount(y[p]), [10, 10, 10])


def test_dirichlet_small_alpha_skews_labels():
    y = load_dataset("sklearn:digits").y
    skewed = partition_indices("dirichlet", len(y), y, 10, np.random.default_rng(0), alpha=0.05)
    even = partition_indices("dirichlet", len(y), y, 10, np.random.default_rng(0), alpha=100.0)
    top = lambda parts: np.mean([np.bincount(y[p]).max() / len(p) for p in parts if len(p)])  # noqa: E731
    assert top(skewed) > 0.5 > top(even)


def test_blobs_are_generated_per_client_from_seed_and_id():
    data = DataConfig(dataset="blobs", options={"points_per_client": 50, "n_features": 3})
    fed = build_federation(data, 4, seed=9)
    assert all(s.indices is None for s in fed.specs)  # a recipe, not rows
    X2, y2, _ = materialize(fed.specs[2])
    X2b, _, _ = materialize(build_federation(data, 10, seed=9).specs[2])
    np.testing.assert_array_equal(X2, X2b)  # client 2's shard does not depend on the client count
    assert X2.shape == (50, 3) and not np.array_equal(X2, materialize(fed.specs[1])[0])


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_table_by_column_reads_each_clients_rows(tmp_path, fmt):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"site": np.repeat(["a", "b", "c"], [5, 7, 9]), "x": rng.normal(size=21),
                       "y": rng.normal(size=21), "kind": rng.choice(["u", "v"], 21), "note": "text"})
    path = tmp_path / f"t.{fmt}"
    df.to_csv(path, index=False) if fmt == "csv" else df.to_parquet(path, index=False)
    data = DataConfig(dataset=f"{fmt}:{path}", client_column="site", label_column="kind")
    fed = build_federation(data, None, seed=0)
    assert [s.name for s in fed.specs] == ["a", "b", "c"]
    assert fed.feature_names == ("x", "y")  # numeric columns but label and client
    host = ClientHost(fed.specs, 0, False, (2,))
    sizes = host.describe().n.tolist()
    assert sizes == [5, 7, 9]
    np.testing.assert_allclose(host.clients[1]._X, df[df.site == "b"][["x", "y"]].to_numpy())


def test_csv_iid_partition_and_run(tmp_path):
    from sklearn.datasets import load_wine

    wine = load_wine(as_frame=True).frame
    path = tmp_path / "wine.csv"
    wine.to_csv(path, index=False)
    res = fedray.run(data={"dataset": f"csv:{path}", "label_column": "target", "scale": "standard"},
                     algorithm={"name": "kmeans", "params": {"n_clusters": 3}}, federation={"n_clients": 4},
                     runtime={"backend": "local"})
    assert res.summary["n_features"] == 13 and res.final["ari"] > 0.8


def test_unknown_partition_option_is_named():
    with pytest.raises(ConfigError, match=r"data.partition: bad options \['beta'\] for 'dirichlet'"):
        partition_indices("dirichlet", 10, np.zeros(10, int), 2, np.random.default_rng(0), beta=1)


def test_benchmark_loader(data_dir):
    ds = load_dataset("benchmark:sipu/s1", str(data_dir))
    assert ds.X.shape == (5000, 2) and len(np.unique(ds.y)) == 15 and ds.y.min() == 0
