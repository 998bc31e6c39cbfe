"""Output folders: checked before any work, never mixed with an earlier run, and written
even when a run fails.

* :func:`prepare` runs before Ray starts: the folder must be creatable and writable,
  and an existing non-empty folder is refused unless ``overwrite`` (``--overwrite``,
  ``output.overwrite: true``), in which case it is emptied first, but only when it
  looks like a fedray output folder, so a mistyped path never empties a folder of
  the user's own files.
* :func:`write_partial` saves what a failed run has (configuration, the history so
  far, failures and the error) so that nothing computed is lost.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from fedray.core.errors import ConfigError

log = logging.getLogger(__name__)

#: Files and folders a fedray run writes; a folder holding one of them is a fedray output.
MARKERS = ("summary.json", "config.yaml", "rounds.parquet", "clients.parquet", "model.npz", "checkpoint",
           "k_selection.parquet", "sweep.parquet")


def prepare(directory: str | Path, overwrite: bool = False, *, resuming: bool = False) -> Path:
    """Check (and create) the output folder before a run; returns its path.

    Raises
    ------
    ConfigError
        The path is a file, cannot be created or written, or is a non-empty folder
        (without ``overwrite``; with it, when it does not look like a fedray output).
    """
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder {str(out)!r} is a file; choose a folder (--out)")
    if out.is_dir() and not resuming:
        entries = [p.name for p in out.iterdir()]
        if entries:
            if not overwrite:
                raise ConfigError(f"output folder {str(out)!r} is not empty ({len(entries)} entries); choose another "
                                  "folder, or pass --overwrite (output.overwrite: true) to replace its contents")
            if not any(m in entries for m in MARKERS):
                raise ConfigError(f"output folder {str(out)!r} is not empty and does not look like a fedray output "
                                  f"folder (no {', '.join(MARKERS[:3])}); refusing to empty it, choose another folder")
            for p in out.iterdir():
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            log.info("emptied output folder %s (overwrite)", out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".fedray-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"output folder {str(out)!r} cannot be written: {exc.strerror or exc}") from None
    return out


def write_partial(directory: str | Path, cfg: Any, state: dict[str, Any] | None, error: BaseException) -> Path:
    """Write what a failed run has: ``config.yaml``, ``rounds.parquet`` and ``failures.parquet``
    (the rounds done so far), and ``summary.json`` with ``status: failed`` and the error."""
    import pandas as pd

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(cfg.to_yaml())
    history = (state or {}).get("history") or []
    failures = (state or {}).get("failures") or []
    if history:
        pd.DataFrame(history).to_parquet(out / "rounds.parquet", index=False)
    if failures:
        pd.DataFrame(failures).to_parquet(out / "failures.parquet", index=False)
    text = str(error).strip()
    summary = {"status": "failed", "error": f"{type(error).__name__}: {text.splitlines()[0] if text else ''}",
               "rounds": len(history), "algorithm": cfg.algorithm.name, "dataset": str(cfg.data.dataset),
               "config": cfg.to_dict()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return out
