"""Dotted keys and overrides of the raw configuration mapping, before it is validated.

``set_dotted`` sets a nested key (``"federation.n_clients"``) in a raw mapping, creating the
levels it needs; ``parse_override`` reads a ``KEY=VALUE`` string of the command line (``--set``,
``--grid``), the value parsed as YAML; ``nest_kwargs`` turns the keyword arguments of
:func:`fedray.api.config.make_config` (``federation__n_clients=5``, dotted keys, whole sections,
``data=fedray.from_arrays(...)``) into a raw mapping.
"""
from __future__ import annotations

from typing import Any

import yaml

from fedray.core.errors import ConfigError
from fedray.data.arrays import ArrayData


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set ``raw["a"]["b"]["c"] = value`` for ``key = "a.b.c"`` (creating levels)."""
    parts = key.split(".")
    cur = raw
    for p in parts[:-1]:
        nxt = cur.get(p)
        if nxt is None:
            nxt = cur[p] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"{key}: {p!r} is not a section (it holds {nxt!r})")
        cur = nxt
    cur[parts[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """``"federation.n_clients=100"`` -> (``"federation.n_clients"``, 100) (value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. federation.n_clients=100")
    key, _, value = item.partition("=")
    try:
        parsed = yaml.safe_load(value) if value != "" else None
    except yaml.YAMLError:
        parsed = value
    return key.strip(), parsed


def nest_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments to a raw mapping; ``federation__n_clients=5`` or dotted keys work too."""
    raw: dict[str, Any] = {}
    for k, v in kwargs.items():
        key = k.replace("__", ".")
        if key == "data" and isinstance(v, ArrayData):  # data=fedray.from_arrays(...)
            v = {"dataset": v}
        if "." in key:
            set_dotted(raw, key, v)
        elif isinstance(v, dict) and isinstance(raw.get(key), dict):
            raw[key].update(v)
        else:
            raw[key] = v
    return raw
