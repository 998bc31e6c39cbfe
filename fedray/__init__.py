"""fedray: federated cluster analysis and clustered federated learning, simulated on Ray.

Quick use::

    import fedray
    result = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
                        data={"dataset": "sklearn:iris"}, federation={"n_clients": 5})
    result.history, result.centers, result.summary["final"]
"""
from __future__ import annotations

import logging

from fedray.algorithm import Algorithm, FederationInfo, Reply, RoundContext, Task, available_algorithms, register
from fedray.config import ExperimentConfig, make_config
from fedray.errors import ConfigError, DataError, EmptyClusterWarning, FedrayError, FedrayWarning, RoundFailedError
from fedray.results import Result
from fedray.session import Session, run
from fedray.stats import Stats

__version__ = "0.1.0"

logging.getLogger("fedray").addHandler(logging.NullHandler())

__all__ = [
    "Algorithm", "ConfigError", "DataError", "EmptyClusterWarning", "ExperimentConfig", "FederationInfo",
    "FedrayError", "FedrayWarning", "Reply", "Result", "RoundContext", "RoundFailedError", "Session", "Stats",
    "Task", "available_algorithms", "make_config", "register", "run",
]
