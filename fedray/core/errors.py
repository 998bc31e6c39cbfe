"""Error and warning classes of fedray.

Every check a user can trigger raises a subclass of :class:`FedrayError`; the CLI
prints its message without a traceback. Degenerate but recoverable situations
(an empty cluster, a client that answered late) emit a :class:`FedrayWarning`.
"""
from __future__ import annotations

from typing import Any


class FedrayError(Exception):
    """Base class of every error fedray raises on purpose."""


class ConfigError(FedrayError, ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


class DataError(FedrayError, ValueError):
    """The data of the federation (or of one client) cannot be used."""


class DataTypeError(DataError, TypeError):
    """A value of the data is not a number (a dict, a string, an object in an object array).

    Both a :class:`DataError` (a ``ValueError``, as every unusable-data error of fedray) and a
    ``TypeError``, the class NumPy's ``float()`` conversion and scikit-learn's conventions use
    for a non-numeric object; ``except DataError`` and ``except TypeError`` both catch it.
    """


class RoundFailedError(FedrayError, RuntimeError):
    """Too few clients answered a round, or a client function failed."""


class PluginError(FedrayError, RuntimeError):
    """An algorithm's hook raised, or returned what the contract does not allow."""


class OutputError(FedrayError, OSError):
    """The output folder cannot be written (a full disk, a lost mount, no permission)."""


class FedrayWarning(UserWarning):
    """Base class of fedray's warnings."""


class EmptyClusterWarning(FedrayWarning):
    """A cluster received no points (or no membership mass) in a round."""


class SharedSamplesWarning(FedrayWarning):
    """Clients had to share samples because the data pool was too small."""


def format_validation_error(exc: Any, prefix: str = "") -> str:
    """One line per problem: ``key: message (got value)``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        key = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown parameter"
        got = err.get("input")
        got_s = "" if isinstance(got, dict) else f"; got {got!r}"
        lines.append(f"{key}: {msg}{got_s}")
    return "invalid configuration:\n  " + "\n  ".join(lines)
