"""Addresses as they may be recorded or shown: without user info, query string or fragment.

A tracking URI can carry credentials (``https://user:token@host/``, ``?token=...``); fedray
writes the address it uses into ``config.yaml``, ``summary.json``, checkpoints, the tracking
state and the MLflow run, and names it in errors: always through :func:`redact_uri`.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit


def redact_uri(uri: str) -> str:
    """``uri`` without ``user:password@``, ``?query`` and ``#fragment`` (unchanged when it has none)."""
    try:
        parts = urlsplit(str(uri))
    except ValueError:
        return "<unparsable URI>"
    netloc = parts.netloc.rpartition("@")[2]
    if netloc == parts.netloc and not parts.query and not parts.fragment:
        return str(uri)
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def redact_config(d: dict[str, Any]) -> dict[str, Any]:
    """A config's plain data with its tracking URI redacted (in place; returned)."""
    out = d.get("output")
    if isinstance(out, dict) and out.get("mlflow_tracking_uri"):
        out["mlflow_tracking_uri"] = redact_uri(out["mlflow_tracking_uri"])
    return d


def secrets_of(uri: str) -> list[str]:
    """The user info and query string of ``uri`` (what :func:`redact_uri` drops), for scrubbing messages."""
    try:
        parts = urlsplit(str(uri))
    except ValueError:
        return []
    user = parts.netloc.rpartition("@")[0]
    return [s for s in (user, parts.query, parts.fragment) if s]
