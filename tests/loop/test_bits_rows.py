"""The invariant that matters most: the same seed gives the same bits, whatever holds the clients.

For several algorithms and layers, a run's model arrays, the numeric columns of its history
(timings aside) and its final metrics are identical between the reference (plain per-client
functions, ``runtime.batched: false``), the local runtime with batched forms, hosts that keep
their shards or generate them again (``runtime.resident``), and the Ray runtime with 1, 3 or
``auto`` clients per actor.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import fedray

BASE = dict(
    data={
        "dataset": "blobs",
        "scale": "standard",
        "options": {"n_centers": 3, "points_per_client": 25, "n_features": 3},
    },
    federation={"n_clients": 9, "rounds": 3},
    seed=7,
)

SCENARIOS: dict[str, dict[str, Any]] = {
    "kmeans fraction 0.3": dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                                federation={"fraction": 0.3}),
    "federated-fcm": dict(algorithm={"name": "federated-fcm", "params": {"n_clusters": 3}}),
    "kfed": dict(algorithm={"name": "kfed", "params": {"n_clusters": 3, "n_init": 2}}),
    "kmeans secure aggregation": dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                                      privacy={"secure_aggregation": True}),
    "kmeans crashes and retries": dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                                       faults={"crash_probability": 0.2},
                                       federation={"round_retries": 2, "min_clients": 4}),
    "kmeans messages": dict(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                            **{"output.messages": True}),
}

VARIANTS: dict[str, dict[str, Any]] = {
    "local batched": {"backend": "local"},
    "local never resident": {"backend": "local", "resident": "never"},
    "local always resident": {"backend": "local", "resident": "always"},
    "ray 1 per actor": {"backend": "ray", "clients_per_actor": 1},
    "ray 3 per actor": {"backend": "ray", "clients_per_actor": 3, "resident": "never"},
    "ray auto": {"backend": "ray", "clients_per_actor": "auto"},
}


def _run(scenario: dict[str, Any], runtime: dict[str, Any], tmp_path) -> Any:
    kw = {**BASE, **scenario}
    kw["federation"] = {**BASE["federation"], **scenario.get("federation", {})}
    return fedray.run(runtime={"progress": False, **runtime}, **kw)


def _numeric(res: Any) -> dict[str, np.ndarray]:
    """The model's arrays, the history's numeric columns without timings, the final metrics."""
    out = {f"model.{k}": np.asarray(v) for k, v in res.model.items()
           if isinstance(v, (np.ndarray, float, int)) and not isinstance(v, bool)}
    h = res.history
    for col in h.columns:
        if not col.endswith("_s") and pd.api.types.is_numeric_dtype(h[col]):
            out[f"history.{col}"] = h[col].to_numpy()
    for k, v in res.final.items():
        if isinstance(v, (int, float, np.number, np.ndarray)) and not isinstance(v, bool):
            out[f"final.{k}"] = np.asarray(v, dtype=np.float64)
    return out


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray], what: str) -> None:
    assert a.keys() == b.keys(), f"{what}: {sorted(a.keys() ^ b.keys())}"
    for k in a:
        assert a[k].shape == b[k].shape and np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), \
            f"{what}: {k} differs: {a[k]!r} vs {b[k]!r}"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_runtime_gives_the_bits_of_the_reference(name, ray_session, tmp_path):
    """Model arrays, numeric history columns (no *_s timings) and final metrics of every runtime
    variant equal those of the plain per-client reference exactly (NaN equal to NaN)."""
    scenario = SCENARIOS[name]
    reference = _run(scenario, {"backend": "local", "batched": False}, tmp_path)
    ref = _numeric(reference)
    assert any(k.startswith("model.") for k in ref) and len(reference.history) >= 1
    if "messages" in name:
        assert reference.messages is not None and len(reference.messages)
    if "crashes" in name:
        assert len(reference.failures), "no client crashed: the scenario checks nothing about faults"
    for variant, runtime in VARIANTS.items():
        got = _run(scenario, runtime, tmp_path)
        _same(ref, _numeric(got), f"{name} / {variant}")
        if "messages" in name:
            cols = [c for c in reference.messages.columns if not c.endswith("_s")]
            assert got.messages[cols].equals(reference.messages[cols]), f"{variant}: messages differ"
