"""The built-in data sources that are neither files of a paper's image set nor tables read by clients:
``sklearn:NAME``, ``benchmark:BATTERY/NAME``, ``mnist`` and ``scenario:NAME`` (registered in
:data:`~fedray.data.datasets.DATA_SOURCES` as a user's own source is)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError
from fedray.data.datasets import (
    DATA_SOURCES,
    MNIST_OPTIONS,
    SCENARIOS,
    SKLEARN_SETS,
    Dataset,
    DataSource,
    load_benchmark,
    load_mnist,
)


def load_sklearn(name: str) -> Dataset:
    from sklearn import datasets as skd

    if name not in SKLEARN_SETS:
        raise ConfigError(f"data.dataset: unknown scikit-learn data set {name!r}; choose one of "
                          f"{', '.join(SKLEARN_SETS)}")
    bunch = getattr(skd, f"load_{name}")()
    X = np.asarray(bunch.data, dtype=np.float64)
    names = tuple(str(n) for n in getattr(bunch, "feature_names", [f"x{i}" for i in range(X.shape[1])]))
    shape = (1, 8, 8) if name == "digits" else (X.shape[1],)
    if name == "digits":
        X = X / 16.0
    return Dataset(X, np.asarray(bunch.target, dtype=np.int64), names, shape, f"sklearn:{name}")


def _check_sklearn(rest: str) -> None:
    if rest not in SKLEARN_SETS:
        raise ConfigError(f"data.dataset: unknown dataset 'sklearn:{rest}'; choose one of "
                          f"{', '.join(f'sklearn:{n}' for n in SKLEARN_SETS)}")


def _check_benchmark(rest: str) -> None:
    if "/" not in rest:
        raise ConfigError(f"data.dataset: unknown dataset 'benchmark:{rest}'; expected benchmark:BATTERY/NAME "
                          "(a folder under data.data_dir and a set in it, e.g. benchmark:sipu/s1)")


def _check_scenario(rest: str) -> None:
    if rest not in SCENARIOS:
        raise ConfigError(f"data.dataset: unknown scenario {rest!r}; choose one of "
                          f"{', '.join(SCENARIOS.names()) or 'none'}")


def _scenario(rest: str, ddir: Path | None, options: dict[str, Any], seed: int) -> Dataset:
    return SCENARIOS[rest](seed=seed, **options)


DATA_SOURCES.register("sklearn", DataSource(
    lambda rest, ddir, options: load_sklearn(rest),
    "scikit-learn's bundled data sets (no data directory needed)", source="scikit-learn",
    arg="NAME", check=_check_sklearn, listed=tuple(f"sklearn:{n}" for n in SKLEARN_SETS)))
DATA_SOURCES.register("benchmark", DataSource(
    lambda rest, ddir, options: load_benchmark(rest, ddir),
    "a clustering benchmark set: BATTERY/NAME.data.gz (and NAME.labels0.gz), or the text form NAME.txt with "
    "its ground truth NAME-gt.txt (the G2 sets: benchmark:g2/g2-2-30)", arg="BATTERY/NAME",
    check=_check_benchmark))
DATA_SOURCES.register("mnist", DataSource(
    lambda rest, ddir, options: load_mnist(ddir, options),
    "MNIST (LeCun et al.): 28x28 grey handwritten digits, 60,000 training and 10,000 test images",
    "mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or the folder itself)",
    "http://yann.lecun.com/exdb/mnist/", MNIST_OPTIONS, defaults={"part": "test"}))
DATA_SOURCES.register("scenario", DataSource(
    _scenario, "a named scenario generated from the run's seed (register_scenario)", arg="NAME",
    check=_check_scenario, open_options=True, seeded=True,
    listed=lambda: [f"scenario:{n}" for n in SCENARIOS.names()] or ["scenario:NAME"]))
