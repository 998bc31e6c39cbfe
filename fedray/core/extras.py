"""Optional dependencies: which extra an algorithm needs, checked when the config is validated.

``pip install fedray`` runs every federated clustering method; the neural
methods (``flacc``, ``fedavg``, ``local``, ``ifca``, ``cfl``, ``flhc``,
``fedcref``) train torch networks and need ``pip install "fedray[nn]"``. An
algorithm declares what it needs with the class attribute
``requires = ("torch",)``; a supervised algorithm (``supervised = True``)
needs torch whether it says so or not. Missing packages fail at validation,
before Ray starts, with one line naming the extra.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
from collections.abc import Iterable
from typing import Any

from fedray.core.errors import ConfigError

log = logging.getLogger(__name__)

# package -> extra of fedray that installs it
EXTRA_OF = {"torch": "nn", "dp_accounting": "privacy"}
_PRELOADING: set[str] = set()
#: Optional libraries fedray imports when they are there: resolved before the working folder goes on
#: ``sys.path`` (:func:`block_absent_optionals`), so a file of that name there is never imported.
#: Every module outside the standard library that fedray imports, on first use or at start, and that a
#: dependency does not guarantee (tests/tools/test_optional_imports.py checks the source against it).
OPTIONAL_LIBRARIES = ["torch", "torchvision", "dp_accounting", "mlflow", "tensorboard", "tensorboardX",
                      "matplotlib", "psutil", "numba", "pyarrow", "hypothesis", "nbformat", "nbclient", "ray",
                      "grpc", "jsonschema", "PIL", "cycler"]


def block_absent_optionals() -> list[str]:
    """Mark each optional library not installed as absent in ``sys.modules`` (its import then fails as
    a missing package, whatever ``sys.path`` later holds); returns those names."""
    absent = [name for name in OPTIONAL_LIBRARIES if name not in sys.modules and missing((name,))]
    for name in absent:
        sys.modules[name] = None  # type: ignore[assignment]
    return absent


def requirements(cls: Any) -> tuple[str, ...]:
    """Packages an algorithm class needs beyond fedray's base install."""
    needs = list(cls.requires)
    if cls.supervised and "torch" not in needs:
        needs.append("torch")
    return tuple(needs)


def missing(packages: tuple[str, ...]) -> list[str]:
    """The packages that cannot be imported here."""
    out = []
    for p in packages:
        try:
            found = importlib.util.find_spec(p) is not None
        except (ImportError, ValueError):  # blocked in sys.modules, or a broken install
            found = False
        if not found:
            out.append(p)
    return out


def check_requirements(cls: Any) -> None:
    """Raise :class:`ConfigError` naming the extra when a package ``cls`` needs is not installed."""
    absent = missing(requirements(cls))
    if not absent:
        return
    extras = sorted({EXTRA_OF.get(p, p) for p in absent})
    spec = f"fedray[{','.join(extras)}]"
    raise ConfigError(f"algorithm.name: {cls.name!r} needs {', '.join(absent)}, which is "
                      f"not installed; install it with: pip install \"{spec}\" (or pip install torch first to "
                      "choose its build)")


def preload(packages: Iterable[str]) -> None:
    """Import ``packages`` in a background thread, once per process (torch takes 1-2 s).

    Client actors call it as soon as they start, for the packages of the session's algorithm
    (:func:`requirements`), and again before a run of an algorithm that needs others, so the
    import overlaps with building the shards and the driver's own work instead of holding
    up the first round. A failure is left for the real import to report where the package
    is used.
    """
    todo = [p for p in packages if p not in sys.modules and p not in _PRELOADING]
    if not todo:
        return
    _PRELOADING.update(todo)

    def load() -> None:
        for name in todo:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - reported by the import that needs it
                log.debug("preloading %s failed: %s", name, exc)

    threading.Thread(target=load, name="fedray-preload", daemon=True).start()
