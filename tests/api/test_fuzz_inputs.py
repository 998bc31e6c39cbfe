"""Input hardening: whatever the data and the configuration, a run either gives finite results or
fails with a FedrayError — never a hang, never a Ray or Python traceback, never a silent NaN."""
from __future__ import annotations

import contextlib
import math
import signal
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fedray
from fedray.core.errors import FedrayError

TIME_LIMIT_S = 30  # per example; a run of these sizes takes well under a second
ALGORITHMS = ["kmeans", "federated-fcm", "fedkmeans", "kfed", "fedfcm"]

# Values a column may be made of.
VALUES = st.sampled_from(["normal", "constant", "duplicated", "huge", "tiny", "nan", "inf", "integers", "strings"])


pytestmark = pytest.mark.quiet_log()


@contextlib.contextmanager
def time_limit(seconds: int):
    def _raise(signum, frame):
        raise TimeoutError(f"run did not finish within {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _column(kind: str, n: int, rng: np.random.Generator) -> list:
    if kind == "normal":
        return rng.normal(size=n).tolist()
    if kind == "constant":
        return [3.25] * n
    if kind == "duplicated":
        return ([float(rng.normal())] * n)
    if kind == "huge":
        return (rng.normal(size=n) * 1e300).tolist()
    if kind == "tiny":
        return (rng.normal(size=n) * 1e-300).tolist()
    if kind == "nan":
        v = rng.normal(size=n).tolist()
        v[int(rng.integers(n))] = float("nan")
        return v
    if kind == "inf":
        v = rng.normal(size=n).tolist()
        v[int(rng.integers(n))] = float("inf")
        return v
    if kind == "integers":
        return rng.integers(-3, 4, size=n).tolist()
    return [f"s{int(i)}" for i in rng.integers(0, 3, size=n)]


@st.composite
def experiments(draw):
    n_clients = draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 7)) for _ in range(n_clients)]
    n_features = draw(st.integers(1, 3))
    kinds = [draw(VALUES) for _ in range(n_features)]
    seed = draw(st.integers(0, 2**16))
    cfg = {
        "algorithm": {"name": draw(st.sampled_from(ALGORITHMS)),
                      "params": {"n_clusters": draw(st.integers(1, 4))}},
        "federation": {"fraction": draw(st.sampled_from([0.3, 0.5, 1.0])), "rounds": draw(st.integers(1, 4)),
                       "min_clients": draw(st.integers(1, 2))},
        "data": {"scale": draw(st.sampled_from(["none", "standard", "minmax"]))},
        "seed": seed,
    }
    if draw(st.booleans()):
        cfg["algorithm"]["params"]["init"] = "random-box"
    extras = draw(st.sampled_from(["none", "secure_aggregation", "guard", "faults"]))
    if extras == "secure_aggregation":
        cfg["privacy"] = {"secure_aggregation": True}
    elif extras == "guard":
        cfg["privacy"] = {"min_samples_guard": True}
    elif extras == "faults":
        cfg["faults"] = {"crash_probability": 0.3}
        cfg["federation"]["round_retries"] = 1
    return sizes, kinds, cfg


def _table(sizes: list[int], kinds: list[str], seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    parts = []
    for c, n in enumerate(sizes):
        part = pd.DataFrame({f"f{j}": _column(k, n, rng) for j, k in enumerate(kinds)})
        part["site"] = f"site-{c}"
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _finite_numbers(obj, where: str) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _finite_numbers(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _finite_numbers(v, f"{where}[{i}]")
    elif isinstance(obj, (float, np.floating)):
        assert math.isfinite(obj), f"silent non-finite value in {where}: {obj}"
    elif isinstance(obj, np.ndarray) and obj.dtype.kind == "f":
        assert np.isfinite(obj).all(), f"silent non-finite values in {where}"


def check_run(sizes, kinds, cfg, tmp_path, backend: str = "local") -> str:
    """Run one experiment; returns "ok" or the FedrayError class name (anything else fails)."""
    path = tmp_path / "data.parquet"
    _table(sizes, kinds, cfg["seed"]).to_parquet(path, index=False)
    cfg = {**cfg, "data": {**cfg["data"], "dataset": f"parquet:{path}", "client_column": "site"},
           "federation": {**cfg["federation"], "n_clients": None}, "runtime": {"backend": backend}}
    with time_limit(TIME_LIMIT_S), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = fedray.run(cfg, output=False)
        except FedrayError as exc:
            assert str(exc).strip(), "an error without a message"
            return type(exc).__name__
    assert res.centers is not None or res.model, "no model"
    for key, value in res.model.items():
        _finite_numbers(np.asarray(value) if isinstance(value, (list, np.ndarray)) else value, f"model.{key}")
    _finite_numbers(res.final, "final")
    for row in res.history.to_dict("records"):
        for k, v in row.items():
            if k in res.history.columns and isinstance(v, float) and not math.isnan(v):
                assert math.isfinite(v), f"history column {k} holds {v}"
    present = [{k: v for k, v in r.items()} for r in res.history.to_dict("records")]
    assert all(r["clients_answered"] >= 1 for r in present)
    return "ok"


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(experiments())
def test_any_input_runs_or_fails_with_a_fedray_error(tmp_path_factory, exp):
    sizes, kinds, cfg = exp
    check_run(sizes, kinds, cfg, tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("kinds,expect", [
    (["normal", "normal"], "ok"),
    (["normal", "nan"], "DataError"),
    (["huge", "normal"], "DataError"),
    (["strings", "normal"], "ok"),  # text columns are not features unless named
    (["strings", "strings"], "DataError"),
])
def test_known_inputs(tmp_path, kinds, expect):
    cfg = {"algorithm": {"name": "federated-fcm", "params": {"n_clusters": 2}}, "federation": {"rounds": 3},
           "data": {"scale": "standard"}, "seed": 1}
    assert check_run([6, 6, 6], kinds, cfg, tmp_path) == expect


def test_a_named_text_column_is_a_data_error(tmp_path):
    cfg = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 2}}, "federation": {"rounds": 2},
           "data": {"scale": "none", "feature_columns": ["f0", "f1"]}, "seed": 1}
    assert check_run([4, 4], ["strings", "normal"], cfg, tmp_path) == "DataError"


def test_bad_data_on_ray_fails_with_a_fedray_error_not_a_ray_traceback(ray_session, tmp_path):
    cfg = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 2}}, "federation": {"rounds": 2},
           "data": {"scale": "none"}, "seed": 1}
    assert check_run([5, 5], ["huge", "normal"], cfg, tmp_path, backend="ray") == "DataError"
