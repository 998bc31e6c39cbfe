"""The public base of supervised (clustered) federated learning (the published path).

:class:`SupervisedAlgorithm` lives in :mod:`fedray.nn.supervised` and its client side in
:mod:`fedray.nn.supervised_client`; this module keeps the import paths that the docs and the
example plug-ins use (``from fedray.supervised import ClientContext``). Importing it does not
import torch.
"""
from fedray.core.metrics import cluster_metrics
from fedray.core.ops import cosine_similarities, weighted_average
from fedray.core.seeding import n_sampled
from fedray.nn.supervised import SupervisedAlgorithm, SupervisedParams
from fedray.nn.supervised_client import ClientContext, client_round, client_round_many

__all__ = ["ClientContext", "SupervisedAlgorithm", "SupervisedParams", "client_round", "client_round_many",
           "cluster_metrics", "cosine_similarities", "n_sampled", "weighted_average"]
