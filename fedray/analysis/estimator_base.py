"""Shared machinery of the scikit-learn style federated estimators (for :mod:`fedray.analysis.estimators`;
not part of :mod:`fedray.estimators`).

``FederatedCenters`` is the base of every estimator in :mod:`fedray.analysis.estimators`:
it checks the constructor values when ``fit`` starts, splits ``X`` over simulated clients
with :func:`fedray.from_arrays`, runs the algorithm in a :class:`fedray.Session` and sets the
fitted attributes, and gives ``predict``, ``transform`` and ``score`` from the centres.
``FuzzyMemberships`` adds ``predict_proba`` (fuzzy memberships) and ``check_param`` raises a
one-line :class:`~fedray.core.errors.ConfigError` in scikit-learn's words for a value out of range.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from fedray.api.config import make_config
from fedray.api.session import Session
from fedray.core.errors import ConfigError, DataError
from fedray.core.ops import assign, fcm_memberships, sq_distances
from fedray.data.arrays import as_matrix, from_arrays, take_columns


def check_param(est: Any, name: str, value: Any, kind: str, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False, hi_open: bool = False, none: bool = False, choices: tuple = ()) -> None:
    """Raise a one-line ConfigError in scikit-learn's words when a constructor value is out of range."""
    if value is None and none:
        return
    cls = type(est).__name__
    if choices and isinstance(value, str):
        if value in choices:
            return
        raise ConfigError(f"The {name!r} parameter of {cls} must be one of {list(choices)}; got {value!r} instead.")
    if kind == "int":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        what = "an int"
    elif kind == "float":
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
        what = "a float"
    elif kind == "bool":
        ok = isinstance(value, (bool, np.bool_))
        what = "a bool"
    else:  # pragma: no cover - programming error
        raise AssertionError(kind)
    if ok and kind != "bool":
        ok = ((lo is None or (value > lo if lo_open else value >= lo)) and
              (hi is None or (value < hi if hi_open else value <= hi)))
    if not ok:
        rng = ""
        if kind != "bool":
            rng = (f" in the range {'(' if lo_open else '['}{'-inf' if lo is None else lo}, "
                   f"{'inf' if hi is None else hi}{')' if hi_open or hi is None else ']'}")
        extra = (f" or one of {list(choices)}" if choices else "") + (" or None" if none else "")
        raise ConfigError(f"The {name!r} parameter of {cls} must be {what}{rng}{extra}; got {value!r} instead.")


class FederatedCenters(ClusterMixin, TransformerMixin, BaseEstimator):
    """Shared ``fit`` / ``predict`` of the centre-based federated estimators (the base of those of
    :mod:`fedray.analysis.estimators`)."""

    _algorithm = ""
    _fuzzy = False
    _inits: tuple[str, ...] = ("kfed", "random-box")

    # --- parameters ----------------------------------------------------------------
    def _keep_params(self, given: dict[str, Any]) -> None:
        """Keep the constructor's parameters as given, each under its own name (scikit-learn reads them
        back by name and clones an estimator from them); ``given``: the constructor's ``locals()``."""
        for name, value in given.items():
            if name != "self":
                setattr(self, name, value)

    def _check_params(self) -> None:
        check_param(self, "n_clusters", self.n_clusters, "int", 1)
        check_param(self, "n_clients", self.n_clients, "int", 1, none=True)
        check_param(self, "fraction", self.fraction, "float", 0.0, 1.0, lo_open=True)
        if self.backend not in ("local", "ray"):
            raise ConfigError(f"The 'backend' parameter of {type(self).__name__} must be one of ['local', 'ray']; "
                              f"got {self.backend!r} instead.")
        if self.address is not None and not isinstance(self.address, str):
            raise ConfigError(f"The 'address' parameter of {type(self).__name__} must be a str or None; "
                              f"got {self.address!r} instead.")
        if self.address is not None and self.backend != "ray":
            raise ConfigError(f"The 'address' parameter of {type(self).__name__} needs backend='ray'; "
                              f"got backend={self.backend!r}")
        if hasattr(self, "max_iter"):
            check_param(self, "max_iter", self.max_iter, "int", 1)
        if hasattr(self, "tol"):
            check_param(self, "tol", self.tol, "float", 0.0)
        if hasattr(self, "m"):
            check_param(self, "m", self.m, "float", 1.0, lo_open=True)

    def _init_param(self, n_features: int) -> Any:
        init = self.init
        if isinstance(init, str):
            if init not in self._inits:
                raise ConfigError(f"The 'init' parameter of {type(self).__name__} must be one of {list(self._inits)} "
                                  f"or an array of shape (n_clusters, n_features); got {init!r} instead.")
            return init
        C = np.asarray(init, dtype=np.float64)
        if C.shape != (self.n_clusters, n_features):
            raise ConfigError(f"The 'init' parameter of {type(self).__name__}: explicit centres must have shape "
                              f"(n_clusters, n_features)={(self.n_clusters, n_features)}; got {C.shape}")
        return C.tolist()

    def _seed(self) -> int:
        rs = self.random_state
        if isinstance(rs, numbers.Integral) and not isinstance(rs, bool):
            if rs < 0:
                raise ConfigError(f"The 'random_state' parameter of {type(self).__name__} must be an int >= 0, a "
                                  f"RandomState or None; got {rs!r} instead.")
            return int(rs)  # the experiment seed itself: equals fedray.run(seed=random_state)
        try:
            return int(check_random_state(rs).randint(np.iinfo(np.int32).max))
        except ValueError:
            raise ConfigError(f"The 'random_state' parameter of {type(self).__name__} must be an int >= 0, a "
                              f"RandomState or None; got {rs!r} instead.") from None

    def _algorithm_params(self, n_features: int) -> dict[str, Any]:  # pragma: no cover - per estimator
        raise NotImplementedError

    def _rounds(self) -> int:
        """The server's cap on rounds: the training rounds plus one for an initialisation round."""
        return int(getattr(self, "max_iter", 1)) + 1

    def _adjust(self, session: Any, params: dict[str, Any]) -> dict[str, Any]:
        """Parameters that depend on the federation (FederatedKMeans: the tolerance scale)."""
        return params

    # --- fit -----------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None, clients: Any = None) -> FederatedCenters:
        """Cluster ``X`` split over simulated clients.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or None
            Ground truth, for evaluation metrics (``metrics_``) and label partitions only.
        clients : array-like of shape (n_samples,), column name of ``X``, or None
            The client of each row. None: ``n_clients`` clients (10 when None) drawn by ``partition``.

        Returns
        -------
        self
        """
        self._check_params()
        seed = self._seed()
        if isinstance(X, (list, tuple)) and X and not np.isscalar(X[0]) and np.ndim(X[0]) == 2:
            raise DataError("X: the estimators take one array of shape (n_samples, n_features) with clients= naming "
                            "the client of each row; for per-client arrays use fedray.from_arrays and fedray.run")
        X, y, clients = take_columns(X, y, clients)
        Xm, _ = as_matrix(X, "X")
        data = from_arrays(X, y, clients=clients, n_clients=self.n_clients if clients is None else None,
                                  partition=self.partition if clients is None else None)
        if clients is not None and self.n_clients is not None and self.n_clients != data.n_clients:
            raise ConfigError(f"The 'n_clients' parameter of {type(self).__name__} is {self.n_clients}, but clients= "
                              f"names {data.n_clients} clients; set n_clients=None")
        params = self._algorithm_params(Xm.shape[1])
        runtime: dict[str, Any] = {"backend": self.backend, "progress": False}
        if self.address is not None:
            runtime["address"] = self.address
        cfg = make_config(seed=seed, algorithm={"name": self._algorithm, "params": params}, data=data,
                                 federation={"fraction": float(self.fraction), "rounds": self._rounds()},
                                 runtime=runtime, output={"plots": False})
        with Session(cfg) as session:
            result = session.run(params=self._adjust(session, params), output=False)
        validate_data(self, X, reset=True, skip_check_array=True)  # n_features_in_, feature_names_in_
        self.cluster_centers_ = np.asarray(result.centers, dtype=np.float64)
        self.history_: pd.DataFrame = result.history
        phase = result.history["phase"] if "phase" in result.history else pd.Series([], dtype=object)
        self.n_iter_ = int((phase == "train").sum())
        self.n_clients_ = int(result.summary["n_clients"])
        self.metrics_ = dict(result.final)
        self.labels_, d2 = self._assign(Xm)
        self.inertia_ = float(d2.sum())
        return self

    # --- using the model ------------------------------------------------------------
    def _validate(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        try:
            return validate_data(self, X, reset=False, dtype=np.float64)
        except ValueError as exc:
            raise DataError(str(exc).replace("\n", " ")) from None

    def _assign(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return assign(X, self.cluster_centers_)

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest centre of each row; shape (n_samples,)."""
        return self._assign(self._validate(X))[0]

    def transform(self, X: Any) -> np.ndarray:
        """Euclidean distance of each row to each centre; shape (n_samples, n_clusters)."""

        return np.sqrt(np.maximum(sq_distances(self._validate(X), self.cluster_centers_), 0.0))

    def score(self, X: Any, y: Any = None) -> float:
        """Opposite of the objective on ``X``: -Σ min_k ||x - c_k||² (fuzzy: -Σ u^m ||x - c||²)."""
        X = self._validate(X)
        if self._fuzzy:

            U = fcm_memberships(X, self.cluster_centers_, float(self.m))
            return -float(np.sum(U ** float(self.m) * sq_distances(X, self.cluster_centers_)))
        return -float(self._assign(X)[1].sum())


class FuzzyMemberships:
    """``predict_proba`` for the fuzzy estimators (mixed in before :class:`FederatedCenters`)."""

    def predict_proba(self, X: Any) -> np.ndarray:
        """Fuzzy memberships of each row to each cluster (rows sum to 1); shape (n_samples, n_clusters)."""

        return fcm_memberships(self._validate(X), self.cluster_centers_, float(self.m))
