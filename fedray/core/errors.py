"""Error and warning classes of fedray.

Every check a user can trigger raises a subclass of :class:`FedrayError`; the CLI
prints its message without a traceback. Degenerate but recoverable situations
(an empty cluster, a client that answered late) emit a :class:`FedrayWarning`.
"""
from __future__ import annotations

import difflib
import typing
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


class ReleaseRefusedError(RoundFailedError):
    """Secure aggregation refused to unmask a sum (its cohort is too small, or with it a combination of the
    sums released so far would single out fewer than ``privacy.min_cohort`` clients). Asking the clients
    again cannot help, so a round that meets it stops at once: the message names the run, the round, how
    many clients the sum would single out, and the settings that fix it."""


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


def format_validation_error(exc: Any, prefix: str = "", model: Any = None) -> str:
    """One line for all the problems: ``key: message; got value`` (several joined by `` | ``).

    With the pydantic ``model`` that was validated, an unknown key gets the closest names that
    model allows at that place (``did you mean 'n_clients'?``)."""
    lines = []
    for err in exc.errors():
        parts = tuple(err.get("loc", ()))
        loc = ".".join(str(p) for p in parts)
        key = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown parameter" + _near_field(model, parts)
        got = err.get("input")
        got_s = "" if isinstance(got, dict) else f"; got {got!r}"
        lines.append(f"{key}: {msg}{got_s}")
    return " | ".join(lines) if len(lines) == 1 else f"{len(lines)} invalid values: " + " | ".join(lines)


def _near_field(model: Any, loc: tuple[Any, ...]) -> str:
    """`` (did you mean 'x'?)`` for the field names of the sub-model of ``model`` at ``loc[:-1]``."""
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return ""
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        model = next((c for c in candidates if isinstance(c, type) and hasattr(c, "model_fields")), None)
    fields = getattr(model, "model_fields", None)
    if not fields or not loc:
        return ""
    names = [*fields, *(f.alias for f in fields.values() if f.alias)]
    near = difflib.get_close_matches(str(loc[-1]), names, n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
