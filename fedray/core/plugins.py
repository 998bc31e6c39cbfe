"""Plug-ins: users' algorithms and models, found by reference or by entry point.

Three ways to bring code, the same in YAML, ``--set``, :func:`fedray.run` and
:class:`fedray.Session`:

* ``algorithm.name: package.module:ClassName`` — any importable subclass of
  :class:`fedray.Algorithm`, registered or not;
* an installed package that declares the entry-point group ``fedray.algorithms``
  (``kmedians = my_pkg.kmedians:KMedians`` in its ``pyproject.toml``), then
  ``algorithm.name: kmedians``;
* ``algorithm.params.model: package.module:function`` — a model factory
  ``function(input_shape, n_classes) -> torch.nn.Module`` for supervised methods.

A bad reference fails before Ray starts with one line: the module cannot be
imported, the attribute is missing, or the object is not what the key needs. This module
loads references; :mod:`fedray.core.registry` checks and registers the algorithms they name.
:func:`fedray.core.registry.plugin_modules` names the modules a configuration brings, so that the
runtime can ship them to the nodes that host clients.
"""
from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points as eps
from typing import Any

from fedray.core.errors import ConfigError

log = logging.getLogger(__name__)

#: Entry-point group under which installed packages declare algorithms.
ENTRY_POINT_GROUP = "fedray.algorithms"


def is_reference(value: Any) -> bool:
    """True for ``"package.module:attribute"`` strings."""
    if not isinstance(value, str) or value.count(":") != 1:
        return False
    mod, _, attr = value.partition(":")
    return bool(mod) and bool(attr) and all(p.isidentifier() for p in mod.split(".") + attr.split("."))


def load_reference(ref: str, key: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute.

    Raises
    ------
    ConfigError
        Naming ``key``, the reference and what failed (module not found, import error,
        attribute missing).
    """
    if not is_reference(ref):
        raise ConfigError(f"{key}: {ref!r} is not a reference of the form package.module:Name")
    mod_name, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"{key}: cannot import module {mod_name!r} for {ref!r}: no module named "
                          f"{exc.name or mod_name!r}; install it or run from the folder that holds it (or add that "
                          "folder to PYTHONPATH)") from None
    except Exception as exc:  # noqa: BLE001 - any error raised by the user's module at import
        raise ConfigError(f"{key}: importing module {mod_name!r} for {ref!r} failed: "
                          f"{type(exc).__name__}: {first_line(exc)}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{key}: module {mod_name!r} has no attribute {attr!r} (from {ref!r})")
        obj = getattr(obj, part)
    return obj


def entry_points() -> dict[str, Any]:
    """Installed algorithm plug-ins: ``{name: EntryPoint}`` of the group ``fedray.algorithms``."""

    return {ep.name: ep for ep in eps(group=ENTRY_POINT_GROUP)}


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when the message is empty), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
