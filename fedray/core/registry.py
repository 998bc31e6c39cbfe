"""The registry of algorithms: built-in names, ``register``, plug-ins by reference or entry point.

Built-in algorithms are found like plug-ins: by the module that registers them, imported
when asked for (so a clustering run never imports the torch-based methods).
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from fedray.core.contract import Algorithm, Params
from fedray.core.errors import ConfigError, format_validation_error
from fedray.core.plugins import _first_line, entry_points, is_reference, load_reference

_REGISTRY: dict[str, type[Algorithm]] = {}


# name -> module that registers it; modules are imported only when asked for, so a
# clustering run never imports the torch-based methods (nor torch).
_BUILTIN_MODULES: dict[str, str] = {
    "kmeans": "fedray.algorithms.kmeans",
    "federated-fcm": "fedray.algorithms.fcm",
    "fedkmeans": "fedray.algorithms.fedkmeans",
    "kfed": "fedray.algorithms.kfed",
    "fedfcm": "fedray.algorithms.fedfcm",
    "fedfcm-avg": "fedray.algorithms.fedfcm",
    "flacc": "fedray.algorithms.flacc",
    "fedavg": "fedray.algorithms.baselines",
    "local": "fedray.algorithms.baselines",
    "ifca": "fedray.algorithms.baselines",
    "cfl": "fedray.algorithms.baselines",
    "flhc": "fedray.algorithms.baselines",
    "fedcref": "fedray.algorithms.fedcref",
}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator adding an algorithm to the registry under ``cls.name`` and its aliases."""
    check_algorithm_class(cls, cls.__qualname__, key="register")
    _REGISTRY[cls.name] = cls
    for alias in cls.aliases:
        _REGISTRY[alias] = cls
    return cls


def _load_module(mod: str) -> None:
    import importlib
    import importlib.util

    if importlib.util.find_spec(mod) is not None:
        importlib.import_module(mod)


def available_algorithms() -> dict[str, type[Algorithm]]:
    """Every built-in and registered algorithm (imports the built-in modules; none imports torch).

    Installed plug-ins are listed by :func:`fedray.core.plugins.entry_points` and loaded on use.
    """
    for mod in dict.fromkeys(_BUILTIN_MODULES.values()):
        _load_module(mod)
    return dict(sorted(_REGISTRY.items()))


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class for ``name``: a registered or built-in key, ``package.module:ClassName``,
    or the name of an installed plug-in (entry-point group ``fedray.algorithms``).

    Raises
    ------
    ConfigError
        One line: unknown name (with the nearest known names), module not found,
        attribute missing, or not an :class:`Algorithm`.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"algorithm.name: expected a name or package.module:ClassName; got {name!r}")
    if name not in _REGISTRY and name in _BUILTIN_MODULES:
        _load_module(_BUILTIN_MODULES[name])
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        cls = load_algorithm(name)
        _REGISTRY[name] = cls
        return cls
    installed = entry_points()
    if name in installed:
        cls = load_entry_point(name)
        _REGISTRY[name] = cls
        return cls
    import difflib

    known = list(available_algorithms()) + sorted(installed)
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
    raise ConfigError(f"algorithm.name: unknown algorithm {name!r}{hint}; choose one of {', '.join(known)}, "
                      "or give your own class as package.module:ClassName")


def make_params(cls: type[Algorithm], params: Mapping[str, Any] | None) -> Params:
    """Validate ``params`` against ``cls.Params`` with a message naming the key."""
    from pydantic import ValidationError

    try:
        return cls.Params(**dict(params or {}))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"algorithm.params ({cls.name})")) from None


def check_algorithm_class(obj: Any, ref: str, key: str = "algorithm.name") -> type:
    """Return ``obj`` if it is a concrete :class:`fedray.Algorithm` subclass, else raise ConfigError."""
    if not (inspect.isclass(obj) and issubclass(obj, Algorithm)):
        what = type(obj).__name__ if not inspect.isclass(obj) else f"class {obj.__qualname__}"
        raise ConfigError(f"{key}: {ref!r} is not a fedray.Algorithm subclass (it is a {what})")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise ConfigError(f"{key}: {ref!r} does not implement the required method(s) {missing}")
    return obj


def load_algorithm(ref: str, key: str = "algorithm.name") -> type:
    """The algorithm class named by ``"package.module:ClassName"``."""
    return check_algorithm_class(load_reference(ref, key), ref, key)


def load_entry_point(name: str, key: str = "algorithm.name") -> type:
    """Load the entry point ``name`` of the group ``fedray.algorithms``."""
    ep = entry_points()[name]
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - any error of the installed package
        raise ConfigError(f"{key}: the installed plug-in {name!r} ({ep.value}) failed to load: "
                          f"{type(exc).__name__}: {_first_line(exc)}") from None
    return check_algorithm_class(obj, f"{name} = {ep.value}", key)


def plugin_modules(cfg: Any) -> list[str]:
    """Top-level modules, other than fedray, that the configuration's code comes from.

    The algorithm's class (by reference, entry point or registration) and a model
    factory reference in ``algorithm.params.model``. The runtime ships these to the
    processes that host clients and the server.
    """
    names: list[str] = [get_algorithm(cfg.algorithm.name).__module__]
    model = (cfg.algorithm.params or {}).get("model")
    if is_reference(model):
        names.append(model.partition(":")[0])
    tops = (n.split(".")[0] for n in names)
    return list(dict.fromkeys(t for t in tops if t not in ("fedray", "__main__")))
