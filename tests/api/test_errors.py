"""Bad input fails early with a message naming the key, the value and what is allowed."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.core.errors import ConfigError, DataError
from fedray.data import ClientSpec
from fedray.data.checks import check_descriptions
from fedray.runtime.host import ClientHost
from fedray.tools.cli import main

LOCAL = {"backend": "local"}


@pytest.mark.parametrize("kwargs,match", [
    (dict(algorithm={"name": "nope"}), r"algorithm.name: unknown algorithm 'nope'; choose one of .*kmeans"),
    (dict(data={"dataset": "sklearn:nope"}), r"data.dataset: unknown dataset 'sklearn:nope'"),
    (dict(data={"dataset": "magic"}), r"data.dataset: unknown dataset 'magic'"),
    (dict(federation={"fraction": 1.5}), r"federation.fraction: .*less than or equal to 1; got 1.5"),
    (dict(federation={"fraction": 0.0}), r"federation.fraction: .*greater than 0; got 0.0"),
    (dict(federation={"n_clients": 0}), r"federation.n_clients: .*greater than or equal to 1; got 0"),
    (dict(algorithm={"name": "kmeans", "params": {"n_clusterz": 3}}), r"n_clusterz: unknown parameter"),
    (dict(algorithm={"name": "federated-fcm", "params": {"m": 1.0}}), r"\.m: .*greater than 1; got 1.0"),
    (dict(runtime={"backend": "dask"}), r"runtime.backend: .*'local' or 'ray'.*got 'dask'"),
    (dict(data={"partition": {"name": "alphabetical"}}), None),
])
def test_config_errors_name_key_and_value(kwargs, match):
    kwargs.setdefault("runtime", LOCAL)
    with pytest.raises(ConfigError, match=match or "partition.name: unknown partition 'alphabetical'"):
        if match is None:
            fedray.run(**kwargs)
        else:
            fedray.make_config(**kwargs)


def test_config_errors_happen_before_ray_starts():
    import ray

    was = ray.is_initialized()
    with pytest.raises(ConfigError):
        fedray.run(federation={"fraction": 2}, runtime={"backend": "ray"})
    assert ray.is_initialized() == was


def test_too_many_clusters():
    with pytest.raises(DataError, match="n_samples=150 should be >= n_clusters=200"):
        fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 200}}, runtime=LOCAL)


def _csv_with_nan(tmp_path):
    df = pd.DataFrame({"a": np.arange(20.0), "b": np.ones(20), "site": ["north"] * 10 + ["south"] * 10})
    df.loc[13, "b"] = np.nan
    path = tmp_path / "sites.csv"
    df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_nan_names_client_and_column(tmp_path, backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    path = _csv_with_nan(tmp_path)
    with pytest.raises(DataError, match=r"client 1 \(south\): non-finite value nan in column 'b'") as info:
        fedray.run(data={"dataset": f"csv:{path}", "client_column": "site"},
                   algorithm={"params": {"n_clusters": 2}}, runtime={"backend": backend})
    assert type(info.value) is DataError  # not a Ray error wrapping it


def test_clients_with_different_feature_counts():
    specs = [ClientSpec(0, {"kind": "pooled", "dataset": "sklearn:iris", "data_dir": None, "seed": 0, "options": {}},
                        np.arange(10)),
             ClientSpec(1, {"kind": "pooled", "dataset": "sklearn:wine", "data_dir": None, "seed": 0, "options": {}},
                        np.arange(10))]
    desc = ClientHost(specs, 0, False, (4,)).describe()
    with pytest.raises(DataError, match=r"different numbers of features: \{4: \[0\], 13: \[1\]\}"):
        check_descriptions(desc)


def test_empty_client():
    with pytest.raises(DataError, match=r"client \d+ has no samples"):
        fedray.run(data={"dataset": "sklearn:iris", "partition": {"name": "dirichlet", "alpha": 0.01}},
                   federation={"n_clients": 30}, runtime=LOCAL)


@pytest.mark.parametrize("dataset,match", [
    ("csv:/nonexistent/table.csv", r"file '/nonexistent/table.csv' does not exist"),
    ("parquet:/nonexistent/table.parquet", r"file '/nonexistent/table.parquet' does not exist"),
])
def test_missing_file(dataset, match):
    with pytest.raises(DataError, match=match):
        fedray.run(data={"dataset": dataset}, runtime=LOCAL)


def test_missing_benchmark_file(data_dir):
    with pytest.raises(DataError, match=r"benchmark file .*sipu/nothing.data.gz' does not exist"):
        fedray.run(data={"dataset": "benchmark:sipu/nothing", "data_dir": str(data_dir)}, runtime=LOCAL)


def test_benchmark_without_data_dir(monkeypatch):
    monkeypatch.delenv("FEDRAY_DATA_DIR", raising=False)
    with pytest.raises(DataError, match=r"needs a data directory"):
        fedray.run(data={"dataset": "benchmark:sipu/s1"}, runtime=LOCAL)


def test_cli_prints_error_without_traceback(capsys):
    code = main(["run", "--set", "algorithm.name=nope", "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("fedray: error: algorithm.name: unknown algorithm 'nope'")
    assert "Traceback" not in err


def test_cli_bad_override_syntax(capsys):
    assert main(["run", "--set", "federation.n_clients", "-q"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_unplaceable_client_actors_fail_fast(ray_session):
    # A request the cluster can never hold fails at once, naming the key, what the run needs and what the cluster has.
    with pytest.raises(ConfigError, match=r"runtime.client_resources.custom.fedray_client: .*need 2 fedray_client "
                                          r"in all but the Ray cluster has 0 fedray_client"):
        fedray.run(runtime={"backend": "ray", "client_resources": {"custom": {"fedray_client": 1}}})
    with pytest.raises(
        ConfigError, match=r"runtime.client_resources.num_gpus: .*need 1 GPU in all but the Ray cluster has 0 GPU"
    ):
        fedray.run(runtime={"backend": "ray", "client_resources": {"num_gpus": 0.5}})
