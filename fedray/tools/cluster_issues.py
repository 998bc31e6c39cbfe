"""Findings of the offline cluster-file checks and the helpers both kinds of file share.

:class:`Issue` is one finding (an error or a warning at a dotted path in the file) and
``Report`` collects them, naming unknown keys with a close match when there is one. The
shared helpers read ``pip install`` requirements out of shell commands (``pip_targets``),
tell a requirement fetched from a package index from a path or URL (``from_index``), read
the Ray version of an image tag (``RAY_IMAGE_TAG``) and check worker counts. Used by
:mod:`fedray.tools.cluster_launcher` and :mod:`fedray.tools.cluster_kuberay`.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

CLIENT_RESOURCE = "fedray_client"

#: A ``pip install`` (or ``uv pip install``) in a shell command; group 1 is what follows it.
PIP_INSTALL = re.compile(r"(?:\buv\s+)?\bpip3?\s+install\b([^\n;&|]*)", re.IGNORECASE)
#: A Ray image (``rayproject/ray:2.9.0-py311``): ``version`` and the ``rest`` of its tag.
RAY_IMAGE_TAG = re.compile(r"(?:^|/)ray(?:-ml|-llm)?:(?P<version>\d+\.\d+\.\d+)(?:-(?P<rest>[\w.-]+))?$")


@dataclass(frozen=True)
class Issue:
    """One finding: ``level`` is ``"error"`` or ``"warning"``; ``where`` a dotted path in the file."""

    level: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.where}: {self.message}" if self.where else f"{self.level}: {self.message}"


class Report:
    """The issues of one file, in the order they were found (:meth:`error`, :meth:`warn`, :meth:`unknown_keys`)."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []

    def error(self, where: str, message: str) -> None:
        self.issues.append(Issue("error", where, message))

    def warn(self, where: str, message: str) -> None:
        self.issues.append(Issue("warning", where, message))

    def unknown_keys(self, where: str, mapping: Any, allowed: set[str]) -> None:
        if not isinstance(mapping, dict):
            self.error(where, f"must be a mapping; got {type(mapping).__name__}")
            return
        for key in mapping:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; allowed: {', '.join(sorted(allowed))}"
                self.error(f"{where}.{key}" if where else str(key), f"unknown key {key!r}{hint}")


def pip_targets(command: str) -> list[str]:
    """Requirement arguments of every ``pip install`` in a shell command (options dropped)."""
    out: list[str] = []
    for m in PIP_INSTALL.finditer(command):
        skip = False
        for tok in m.group(1).split():
            tok = tok.strip("'\"")
            if skip:
                skip = False
                continue
            if tok in ("-r", "-c", "-e", "--requirement", "--constraint", "-i", "--index-url", "--extra-index-url",
                       "-f", "--find-links", "--target", "-t", "--prefix", "--root", "--editable"):
                skip = tok not in ("-e", "--editable")  # -e takes the path that follows: keep it
                continue
            if tok.startswith("-") or not tok:
                continue
            out.append(tok)
    return out


def from_index(target: str) -> str | None:
    """The project name when ``target`` is a requirement fetched from a package index, else None."""
    if any(c in target for c in "/\\~$") or target.startswith(".") or "://" in target or target.endswith(
            (".whl", ".tar.gz", ".zip")):
        return None  # a path, a URL or an archive
    m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)", target)
    return m.group(1).lower().replace("_", "-") if m else None


def check_workers_count(r: Report, value: Any, where: str) -> None:
    """An error in ``r`` unless ``value`` (a worker count at ``where``) is absent or a non-negative integer."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        r.error(where, f"must be a non-negative integer; got {value!r}")
