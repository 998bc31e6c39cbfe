"""A data source of your own: ``data.dataset: "npz:PATH"`` reads arrays ``X`` (and ``y``) from a NumPy ``.npz``.

Importing this module registers it (``fedray.data.register_data_source``), exactly as fedray registers
``mnist`` or ``bank``; a configuration then names it like any built-in data set::

    import examples.plugins.npz_source  # noqa: F401  (registers "npz")
    fedray.run({"algorithm": {"name": "kmeans", "params": {"n_clusters": 3}},
                "data": {"dataset": "npz:/path/to/points.npz", "partition": {"name": "dirichlet"}}})
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.data import Dataset, DataSource, register_data_source


def load_npz(arg: str, data_dir: Path | None, options: dict[str, Any]) -> Dataset:
    """``X`` (n × d) and optional ``y`` (n) of ``PATH`` (relative paths: under ``data.data_dir`` too)."""
    path = Path(arg).expanduser()
    if not path.is_absolute() and not path.exists() and data_dir is not None:
        path = data_dir / path
    if not path.is_file():
        raise DataError(f"data.dataset: npz:{arg}: no such file")
    with np.load(path, allow_pickle=False) as f:
        if "X" not in f:
            raise DataError(f"data.dataset: npz:{arg} has no array 'X' (it has {sorted(f.files)})")
        X = np.asarray(f["X"], dtype=np.float64).reshape(len(f["X"]), -1)
        y = np.asarray(f["y"], dtype=np.int64) if "y" in f and options.get("labels", True) else None
    if not isinstance(options.get("labels", True), bool):
        raise ConfigError(f"data.options.labels: must be true or false; got {options['labels']!r}")
    return Dataset(X, y, tuple(f"x{i}" for i in range(X.shape[1])), (X.shape[1],), f"npz:{arg}")


NPZ = DataSource(load_npz, "arrays X (and y) from a NumPy .npz file", files="PATH.npz", source="the user",
                 options={"labels": "read y when the file has it (default true)"}, arg="PATH")
register_data_source("npz", NPZ)
