"""fedray: federated cluster analysis and clustered federated learning, simulated on Ray.

Quick use::

    import fedray
    result = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                        data={"dataset": "sklearn:iris"}, federation={"n_clients": 5})
    result.history, result.centers, result.summary["final"]
"""
from __future__ import annotations

import logging
from typing import Any

from fedray.core.centers import CenterAlgorithm, CenterParams
from fedray.core.client_view import ClientView
from fedray.core.contract import (
    Algorithm,
    FederationInfo,
    Params,
    Reply,
    RoundContext,
    Task,
    batched,
)
from fedray.core.errors import (
    ConfigError,
    DataError,
    EmptyClusterWarning,
    FedrayError,
    FedrayWarning,
    ReleaseRefusedError,
    RoundFailedError,
)
from fedray.core.registry import available_algorithms, register
from fedray.core.stats import Stats, StatsBlock, total

__version__ = "0.1.0"

logging.getLogger("fedray").addHandler(logging.NullHandler())

# Public names whose modules are imported on first use. The running side (config, session, results)
# pulls in pandas, pyarrow, scipy and cryptography, which a client actor never needs: a process that
# imports fedray (every Ray actor does) loads them only when it uses one of these names. The supervised
# base pulls in the model catalogue (and, when it trains, torch); arrays are an optional convenience.
_LAZY = {
    "ExperimentConfig": "fedray.api.config",
    "make_config": "fedray.api.config",
    "Result": "fedray.api.results",
    "resume": "fedray.api.run",
    "run": "fedray.api.run",
    "Session": "fedray.api.session",
    "Layer": "fedray.layers.base",  # a user's own layer between the server and the clients (docs/extending.md)
    "SupervisedAlgorithm": "fedray.nn.supervised",
    "SupervisedParams": "fedray.nn.supervised",
    "from_arrays": "fedray.data.arrays",
    "ArrayData": "fedray.data.arrays",
    # what the papers' reproductions (reproductions/) use: data sets, the central reference
    # algorithms and metrics, K selection and validation, the seeding scheme, checkpoints
    "load_dataset": "fedray.data.datasets",
    "assign": "fedray.core.ops",
    "lloyd": "fedray.core.ops",
    "fcm": "fedray.core.ops",
    "contingency": "fedray.core.metrics",
    "ari_from_table": "fedray.core.metrics",
    "acc_from_table": "fedray.core.metrics",
    "best_permutation_distance": "fedray.core.metrics",
    "client_rng": "fedray.core.seeding",
    "data_rng": "fedray.core.seeding",
    "SharedSamplesWarning": "fedray.core.errors",
    "select_k": "fedray.analysis.kselect",
    "choose_k": "fedray.analysis.kselect",
    "local_index_curve": "fedray.analysis.kselect",
    "central_curve": "fedray.analysis.kselect",
    "knowledge_gap": "fedray.analysis.validation",
    "federated_variance": "fedray.analysis.validation",
    "adhoc_call": ("fedray.core.calls", "adhoc"),  # Session.call(fedray.adhoc_call("purpose"), tasks)
    "load_checkpoint": ("fedray.api.checkpoint", "load"),
    "CHECKPOINT_FILE": ("fedray.api.checkpoint", "FILENAME"),
    "client_bundles": "fedray.api.settings",  # a Ray Tune trial's placement group (docs/tuning.md)
}


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'fedray' has no attribute {name!r}")
    import importlib

    mod, attr = where if isinstance(where, tuple) else (where, name)
    value = getattr(importlib.import_module(mod), attr)
    globals()[name] = value
    return value


__all__ = [
    "Algorithm", "ArrayData", "CenterAlgorithm", "CenterParams", "ClientView", "ConfigError", "DataError",
    "EmptyClusterWarning", "ExperimentConfig", "FederationInfo", "FedrayError", "FedrayWarning", "Params", "Reply",
    "ReleaseRefusedError", "Result", "RoundContext", "RoundFailedError", "Session", "resume", "Stats", "StatsBlock",
    "SupervisedAlgorithm", "SupervisedParams",
    "Task", "available_algorithms", "batched", "from_arrays", "make_config", "register", "run", "total",
    "load_dataset", "assign", "lloyd", "fcm", "contingency", "ari_from_table", "acc_from_table",
    "best_permutation_distance", "client_rng", "data_rng", "SharedSamplesWarning", "select_k", "choose_k",
    "local_index_curve", "central_curve", "knowledge_gap", "federated_variance", "adhoc_call", "load_checkpoint",
    "CHECKPOINT_FILE", "Layer", "client_bundles",
]
