"""scikit-learn style estimators for the federated clustering algorithms (the published path).

The estimators live in :mod:`fedray.analysis.estimators`; this module keeps the import path
``from fedray.estimators import FederatedKMeans`` that the README gives.
"""
from fedray.analysis.estimators import *  # noqa: F403 - the public names, as listed below
from fedray.analysis.estimators import __all__  # noqa: F401
