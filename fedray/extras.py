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

import importlib.util
from typing import Any

from fedray.errors import ConfigError

# package -> extra of fedray that installs it
EXTRA_OF = {"torch": "nn"}


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
