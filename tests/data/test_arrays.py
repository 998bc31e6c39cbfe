"""Data from Python (fedray.from_arrays): same federations, results and checks as file data."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_iris

import fedray
from fedray.core.errors import ConfigError, DataError, FedrayError

LOCAL = {"backend": "local"}
KMEANS = {"name": "kmeans", "params": {"n_clusters": 3, "init": "random-box"}}
X_IRIS, Y_IRIS = load_iris(return_X_y=True)
SITES = np.array(["a", "b", "c"])[np.arange(150) % 3]
COLS = ["f0", "f1", "f2", "f3"]


def _frame() -> pd.DataFrame:
    df = pd.DataFrame(X_IRIS, columns=COLS)
    df["label"] = Y_IRIS
    df["site"] = SITES
    return df


def _same_run(a: fedray.Result, b: fedray.Result) -> None:
    np.testing.assert_array_equal(a.centers, b.centers)
    pd.testing.assert_series_equal(a.history["objective"], b.history["objective"])
    assert a.final["ari"] == b.final["ari"] and a.final["objective"] == b.final["objective"]
    assert a.clients["n_samples"].tolist() == b.clients["n_samples"].tolist()


def test_client_vector_equals_csv_client_column_bit_for_bit(tmp_path):
    """Rows named by a client vector give the run a CSV with that client column gives."""
    path = tmp_path / "iris.csv"
    _frame().to_csv(path, index=False)
    from_file = fedray.run(algorithm=KMEANS, runtime=LOCAL, data={
        "dataset": f"csv:{path}", "client_column": "site", "label_column": "label"})
    from_arrays = fedray.run(algorithm=KMEANS, runtime=LOCAL, data=fedray.from_arrays(X_IRIS, Y_IRIS, clients=SITES))
    _same_run(from_file, from_arrays)
    assert from_arrays.clients["name"].tolist() == from_file.clients["name"].tolist() == ["a", "b", "c"]


@pytest.mark.parametrize("partition", [None, {"name": "dirichlet", "alpha": 5.0}, "quantity_skew"])
def test_pooled_partition_equals_csv_partition_bit_for_bit(tmp_path, partition):
    """A pooled array split by a partition gives the shards (and run) a CSV split by it gives, for the same seed."""
    path = tmp_path / "iris.csv"
    _frame().drop(columns=["site"]).to_csv(path, index=False)
    part = {"name": partition} if isinstance(partition, str) else (partition or {})
    from_file = fedray.run(algorithm=KMEANS, runtime=LOCAL, seed=7, federation={"n_clients": 5},
                           data={"dataset": f"csv:{path}", "label_column": "label", "partition": part})
    from_arrays = fedray.run(algorithm=KMEANS, runtime=LOCAL, seed=7,
                             data=fedray.from_arrays(X_IRIS, Y_IRIS, n_clients=5, partition=partition))
    _same_run(from_file, from_arrays)


def test_pooled_without_n_clients_uses_federation_n_clients():
    """Pooled arrays without n_clients are split over federation.n_clients, like a file."""
    res = fedray.run(algorithm=KMEANS, runtime=LOCAL, federation={"n_clients": 4}, data=fedray.from_arrays(X_IRIS))
    assert res.summary["n_clients"] == 4 and res.clients["n_samples"].sum() == 150


def test_list_of_client_arrays_equals_client_vector():
    """One array per client gives the run the same rows named by a client vector give."""
    Xs = [X_IRIS[SITES == s] for s in "abc"]
    ys = [Y_IRIS[SITES == s] for s in "abc"]
    a = fedray.run(algorithm=KMEANS, runtime=LOCAL, data=fedray.from_arrays(Xs, ys))
    b = fedray.run(algorithm=KMEANS, runtime=LOCAL, data=fedray.from_arrays(X_IRIS, Y_IRIS, clients=SITES))
    _same_run(a, b)


def test_dataframe_columns_name_features_label_and_client():
    """A DataFrame keeps its column names; y= and clients= may name its columns, which then are not features."""
    arrays = fedray.from_arrays(_frame(), y="label", clients="site")
    assert arrays.feature_names == tuple(COLS) and arrays.n_clients == 3 and arrays.has_labels
    res = fedray.run(algorithm=KMEANS, runtime=LOCAL, data=arrays)
    ref = fedray.run(algorithm=KMEANS, runtime=LOCAL, data=fedray.from_arrays(X_IRIS, Y_IRIS, clients=SITES))
    _same_run(res, ref)


def test_session_and_make_config_accept_arrays_and_keep_them_through_overrides():
    """data= works for Session and make_config; re-validating a config (sweeps, overrides) keeps the arrays."""
    arrays = fedray.from_arrays(X_IRIS, clients=SITES)
    cfg = fedray.make_config(algorithm=KMEANS, runtime=LOCAL, data=arrays, **{"data.scale": "standard"})
    assert cfg.data.dataset is arrays and cfg.data.scale == "standard" and cfg.federation.n_clients == 3
    again = fedray.make_config(cfg, overrides=["seed=3"])
    assert again.data.dataset is arrays and again.seed == 3
    with fedray.Session(again) as s:
        assert s.info.n_clients == 3 and s.info.n_features == 4
        res = s.run()
    assert res.centers.shape == (3, 4)


def test_config_and_summary_show_a_description_not_the_rows(tmp_path):
    """config.yaml and summary.json serialise; they describe the arrays; the YAML cannot be re-run silently."""
    res = fedray.run(algorithm=KMEANS, runtime=LOCAL, data=fedray.from_arrays(X_IRIS, Y_IRIS, clients=SITES),
                     output=tmp_path / "out")
    text = (tmp_path / "out" / "config.yaml").read_text()
    assert "dataset: 'arrays: 3 clients, 150x4'" in text and "5.1" not in text
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["dataset"] == "arrays: 3 clients, 150x4"
    assert res.summary["dataset"] == "arrays: 3 clients, 150x4"
    with pytest.raises(ConfigError, match=r"^data.dataset: 'arrays: 3 clients, 150x4' describes arrays passed from "
                                          r"Python.*fedray.from_arrays"):
        fedray.make_config(tmp_path / "out" / "config.yaml")


def test_local_clients_hold_read_only_views_of_float64_client_arrays():
    """On the local runtime per-client float64 arrays are not copied, and clients cannot change them."""
    Xs = [np.ascontiguousarray(X_IRIS[SITES == s]) for s in "abc"]
    with fedray.Session(algorithm=KMEANS, runtime=LOCAL, data=fedray.from_arrays(Xs)) as s:
        held = s.executor.gather_data()
    for (_, X, _), mine in zip(held, Xs):
        assert np.shares_memory(X, mine) and not X.flags.writeable
    assert Xs[0].flags.writeable  # the caller's array itself stays writable


def test_ray_sends_each_shard_once_through_its_own_object_ref(ray_session):
    """On Ray each client's recipe holds its own object ref (one ray.put per shard) with exactly its rows."""
    import ray

    arrays = fedray.from_arrays(X_IRIS, Y_IRIS, clients=SITES)
    with fedray.Session(algorithm=KMEANS, data=arrays, runtime={"backend": "ray", "clients_per_actor": 2}) as s:
        specs = s.executor.specs
        refs = [sp.source["shard"] for sp in specs]
        assert all(isinstance(r, ray.ObjectRef) for r in refs) and len({r.hex() for r in refs}) == 3
        held = s.executor.gather_data()
        for sp, ref, (_, X, y) in zip(specs, refs, held):
            rows = SITES == sp.name
            Xr, yr = ray.get(ref)
            np.testing.assert_array_equal(Xr, X_IRIS[rows])  # only this client's rows travel in its object
            np.testing.assert_array_equal(X, X_IRIS[rows])
            np.testing.assert_array_equal(y, Y_IRIS[rows])
        # The driver's federation keeps the inline recipes; only the executor's copies are refs.
        assert all(isinstance(sp.source["shard"], tuple) for sp in s.federation.specs)


def test_ray_equals_local_on_arrays(ray_session):
    """Arrays give identical results on the local and the Ray runtime."""
    arrays = fedray.from_arrays(X_IRIS, Y_IRIS, n_clients=6, partition={"name": "dirichlet", "alpha": 0.5})
    alg = {"name": "federated-fcm", "params": {"n_clusters": 3, "objective": True}}
    a = fedray.run(algorithm=alg, data=arrays, runtime=LOCAL, seed=2)
    b = fedray.run(algorithm=alg, data=arrays, runtime={"backend": "ray", "clients_per_actor": 4}, seed=2)
    np.testing.assert_array_equal(a.centers, b.centers)
    pd.testing.assert_series_equal(a.history["objective"], b.history["objective"])


# --- the checks of file data, with the same messages, before any runtime starts -----------------
def _message(fn) -> str:
    with pytest.raises(DataError) as exc:
        fn()
    return str(exc.value)


def test_non_finite_value_message_equals_file_data_and_comes_before_ray(tmp_path, monkeypatch):
    """A NaN gives the message a CSV gives, and fails before the Ray runtime is started."""
    df = _frame()
    df.loc[4, "f2"] = np.nan  # row 4 belongs to client "b", where it is row 1
    path = tmp_path / "nan.csv"
    df.to_csv(path, index=False)
    want = _message(lambda: fedray.run(algorithm=KMEANS, runtime=LOCAL, data={
        "dataset": f"csv:{path}", "client_column": "site", "label_column": "label"}))
    assert want == ("client 1 (b): non-finite value nan in column 'f2' (row 1 of the client's shard); clean or impute "
                    "the data first (NaN and inf are not allowed)")

    import fedray.api.session as S

    def no_ray(*a, **k):
        raise AssertionError("Ray was started before the data was checked")

    monkeypatch.setattr(S, "ensure_ray", no_ray)
    got = _message(lambda: fedray.run(algorithm=KMEANS, runtime={"backend": "ray"},
                                      data=fedray.from_arrays(df, y="label", clients="site")))
    assert got == want


def test_empty_client_and_feature_mismatch_messages_equal_file_data():
    """An empty client and clients with different feature counts fail as they do for file shards."""
    from fedray.data.checks import check_descriptions

    empty = _message(lambda: fedray.run(algorithm=KMEANS, runtime=LOCAL,
                                        data=fedray.from_arrays([X_IRIS[:50], X_IRIS[50:], np.zeros((0, 4))])))
    assert empty == "client 2 has no samples; remove it or change the partition"
    mixed = _message(lambda: fedray.run(algorithm=KMEANS, runtime=LOCAL,
                                        data=fedray.from_arrays([X_IRIS[:50], X_IRIS[50:, :3]])))
    desc = [{"client_id": 0, "name": "client-0", "n": 50, "n_features": 4},
            {"client_id": 1, "name": "client-1", "n": 100, "n_features": 3}]
    assert mixed == _message(lambda: check_descriptions(desc))
    assert mixed.startswith("clients have different numbers of features")


def test_partition_needing_labels_gives_the_file_message():
    """A label partition without y fails with the message file data without labels gets."""
    msg = _message(lambda: fedray.run(algorithm=KMEANS, runtime=LOCAL,
                                      data=fedray.from_arrays(X_IRIS, n_clients=3, partition="dirichlet")))
    assert msg.startswith("data.partition.name: 'dirichlet' needs labels")


RAGGED = [[1.0, 2.0], [3.0]]
BAD = [
    (lambda: fedray.from_arrays(RAGGED), DataError, r"^X: rows have different lengths"),
    (lambda: fedray.from_arrays(X_IRIS, Y_IRIS[:-1]), DataError, r"^y: 149 values for 150 rows of X"),
    (lambda: fedray.from_arrays(X_IRIS, clients=SITES[:10]), DataError, r"^clients: 10 values for 150 rows"),
    (lambda: fedray.from_arrays(np.zeros((0, 4))), DataError, r"^X: 0 rows"),
    (
        lambda: fedray.from_arrays(np.zeros((5, 0))),
        DataError,
        r"^X: 0 feature\(s\) \(shape=\(5, 0\)\) while a minimum of 1 is required\.",
    ),
    (
        lambda: fedray.from_arrays(np.zeros((4, 3, 2))),
        DataError,
        r"^X: expected a 2-D array .*got 3-D shape \(4, 3, 2\)",
    ),
    (lambda: fedray.from_arrays(np.zeros(4)), DataError, r"^X: expected a 2-D array .*1-D.*reshape"),
    (lambda: fedray.from_arrays(np.array([["a", "b"], ["c", "d"]])), DataError, r"^X: strings are not numeric.*'a'"),
    (lambda: fedray.from_arrays([[1.0, "x"], [2.0, 3.0]]), DataError, r"^X: strings are not numeric"),
    (lambda: fedray.from_arrays(np.array([[1.0, None]], dtype=object)), DataError, r"^X: non-numeric value None"),
    (lambda: fedray.from_arrays(np.ones((3, 2), dtype=bool)), DataError, r"^X: boolean values are not numeric"),
    (lambda: fedray.from_arrays(np.ones((3, 2), dtype=complex)), DataError, r"^X: Complex data not supported"),
    (
        lambda: fedray.from_arrays(__import__("scipy.sparse").sparse.csr_matrix(np.ones((3, 2)))),
        DataError,
        r"^X: sparse input is not supported \(csr_matrix\)",
    ),
    (lambda: fedray.from_arrays("data.csv"), DataError, r"^X: expected a 2-D array .*got str 'data.csv'"),
    (lambda: fedray.from_arrays(_frame()), DataError, r"^X: column 'site' has dtype \w+, which is not numeric"),
    (lambda: fedray.from_arrays(_frame(), clients="site"), None, None),
    (
        lambda: fedray.from_arrays(_frame(), clients="place"),
        DataError,
        r"^from_arrays clients: column 'place' is not in X",
    ),
    (lambda: fedray.from_arrays(X_IRIS, clients="site"), ConfigError, r"^from_arrays clients: 'site' is a column name"),
    (
        lambda: fedray.from_arrays(X_IRIS, n_clients=151),
        DataError,
        r"^from_arrays n_clients: 151 clients but .*n_samples=150",
    ),
    (
        lambda: fedray.from_arrays(X_IRIS, n_clients=0),
        ConfigError,
        r"^from_arrays n_clients: must be an integer >= 1; got 0",
    ),
    (
        lambda: fedray.from_arrays(X_IRIS, clients=SITES, n_clients=3),
        ConfigError,
        r"^from_arrays: pass clients= or n_clients=, not both",
    ),
    (
        lambda: fedray.from_arrays(X_IRIS, clients=SITES, partition="iid"),
        ConfigError,
        r"^from_arrays partition: 'iid' splits a pooled array",
    ),
    (
        lambda: fedray.from_arrays([X_IRIS[:5], X_IRIS[5:]], n_clients=2),
        ConfigError,
        r"^from_arrays n_clients: X is already a list of 2",
    ),
    (
        lambda: fedray.from_arrays([X_IRIS[:5], X_IRIS[5:]], Y_IRIS),
        DataError,
        r"^y: with X as a list of 2 per-client arrays",
    ),
    (
        lambda: fedray.from_arrays(X_IRIS, partition="alphabetical"),
        ConfigError,
        r"^from_arrays partition: unknown partition 'alphabetical'; choose one of",
    ),
    (
        lambda: fedray.from_arrays(X_IRIS, partition="by_column"),
        ConfigError,
        r"^from_arrays partition: 'by_column' is given by clients=",
    ),
    (
        lambda: fedray.from_arrays(X_IRIS, np.where(Y_IRIS == 1, np.nan, Y_IRIS)),
        DataError,
        r"^y: missing value \(nan\) at row 50",
    ),
    (
        lambda: fedray.from_arrays(X_IRIS, np.array([1, "a"] * 75, dtype=object)),
        DataError,
        r"^y: labels of mixed types",
    ),
    (
        lambda: fedray.from_arrays(X_IRIS, clients=np.r_[np.zeros(149), np.nan]),
        DataError,
        r"^clients: missing value \(nan\) at row 149",
    ),
    (
        lambda: fedray.make_config(
            data={"dataset": fedray.from_arrays(X_IRIS, clients=SITES), "client_column": "site"}
        ),
        ConfigError,
        r"^data.client_column: 'site' applies to files.*pass clients= to fedray.from_arrays",
    ),
    (
        lambda: fedray.make_config(data=fedray.from_arrays(X_IRIS, clients=SITES), federation={"n_clients": 5}),
        ConfigError,
        r"^federation.n_clients: 5, but the arrays from fedray.from_arrays are split over 3 clients",
    ),
]


@pytest.mark.parametrize("call,error,match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_one_line_error_naming_the_argument(call, error, match):
    """Every malformed input is one FedrayError line that names the argument (no traceback, no coercion)."""
    if error is None:
        assert isinstance(call(), fedray.ArrayData)
        return
    with pytest.raises(error, match=match) as exc:
        call()
    assert isinstance(exc.value, FedrayError) and "\n" not in str(exc.value)
