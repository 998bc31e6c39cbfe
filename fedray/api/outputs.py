"""Output folders: claimed before any work, never mixed with an earlier run, emptied only of
what fedray wrote, and written even when a run fails.

A fedray output folder is one that holds fedray's marker, ``.fedray-output.json``: the run's
id, the process that is writing it (while it runs) and the list of files fedray wrote
there. File names never decide whether a folder is fedray's: a user's ``config.yaml`` or
``checkpoint/`` does not make it one.

* :func:`prepare` runs before Ray starts. It claims the folder by creating the marker
  with ``O_EXCL``, so of two runs started at the same moment into one new folder exactly
  one wins and the other fails in one line. A non-empty folder is refused unless
  ``overwrite`` (``--overwrite``, ``output.overwrite: true``); then it is emptied of the
  files its marker lists, and refused when it holds anything else, has no marker, is
  being written by a live run, or is the current folder, the home folder or the root.
* :func:`record` adds files fedray wrote to the marker.
* :func:`write_partial` saves what a failed run has (configuration, the history so
  far, failures and the error) so that nothing computed is lost.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import re
import secrets
import socket
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from fedray.core.errors import ConfigError, OutputError
from fedray.layers.failure_log import FailureLog
from fedray.layers.privacy.accountant import privacy_summary

log = logging.getLogger(__name__)

#: fedray's marker: a folder holding it is a fedray output folder.
MARKER = ".fedray-output.json"
_FORMAT = "fedray-output-1"


def _read(out: Path) -> dict[str, Any] | None:
    """The marker of ``out`` (None: no marker; raises when another run is writing it right now)."""
    try:
        doc = json.loads((out / MARKER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or not isinstance(doc.get("files"), list):
        raise ConfigError(f"output folder {str(out)!r}: its fedray marker {MARKER} is being written by another run "
                          "or is damaged; choose another folder")
    # only names inside the folder: an edited marker never makes fedray delete anything outside it
    doc["files"] = [f for f in doc["files"] if isinstance(f, str) and f and not Path(f).is_absolute()
                    and ".." not in Path(f).parts and f != MARKER]
    return doc


def _write(out: Path, doc: dict[str, Any]) -> None:
    """Replace the marker atomically (a temporary file renamed over it)."""
    tmp = out / f"{MARKER}.{secrets.token_hex(4)}.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / MARKER)


def _alive(doc: dict[str, Any]) -> bool:
    """Whether the run named in a marker is still writing (a process of this machine that lives)."""
    pid = doc.get("pid")
    if not pid or doc.get("host") != socket.gethostname():
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def _claim(out: Path, run_id: str | None) -> dict[str, Any]:
    """Create the marker with ``O_EXCL``: exactly one of two concurrent runs gets it."""
    doc = {"format": _FORMAT, "run_id": run_id or secrets.token_hex(16), "pid": os.getpid(),
           "host": socket.gethostname(), "files": []}
    data = json.dumps(doc, indent=1).encode()
    try:
        fd = os.open(out / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ConfigError(f"output folder {str(out)!r} was claimed by another fedray run at the same moment; "
                          "choose another folder") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return doc


def _protected(out: Path) -> str | None:
    """Why ``out`` may never be emptied (the current folder, the home folder, the root), or None."""
    real = out.resolve()
    if real == Path.cwd().resolve():
        return "the current folder"
    if real == Path.home().resolve():
        return "the home folder"
    if real == Path(real.anchor):
        return "the root folder"
    return None


#: the temporary names fedray writes a file under before moving it into place (a run killed meanwhile leaves one):
#: ``.tmp-<hex>-<name>`` (:func:`atomic_path`) and ``.<name>.<hex>.tmp`` (the checkpoint and its key)
_TEMPORARY = (re.compile(r"^\.tmp-[0-9a-f]{12}-(?P<name>.+)$"), re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{8,16}\.tmp$"))


def _leftovers(out: Path, doc: dict[str, Any]) -> list[str]:
    """Temporary copies of files the marker lists, left by a run killed while it wrote them."""
    files, found = set(doc["files"]), []
    for dirpath, _, filenames in os.walk(out):
        rel = Path(dirpath).relative_to(out)
        for f in filenames:
            for pattern in _TEMPORARY:
                m = pattern.match(f)
                if m and (rel / m.group("name")).as_posix() in files and not (Path(dirpath) / f).is_symlink():
                    found.append((rel / f).as_posix())
                    break
    return found


def _foreign(out: Path, doc: dict[str, Any]) -> list[str]:
    """Entries of ``out`` that fedray did not write (neither its marker lists them nor are they temporary
    copies of files it lists)."""
    files = set(doc["files"]) | set(_leftovers(out, doc))
    dirs = {str(Path(f).parent.as_posix()) for f in files}
    dirs |= {p.as_posix() for f in files for p in Path(f).parents}
    extra = []
    for dirpath, dirnames, filenames in os.walk(out):
        rel = Path(dirpath).relative_to(out)
        for d in sorted(dirnames):
            if (rel / d).as_posix() not in dirs or (Path(dirpath) / d).is_symlink():
                extra.append((rel / d).as_posix() + "/")
        dirnames[:] = [d for d in dirnames if (rel / d).as_posix() in dirs and not (Path(dirpath) / d).is_symlink()]
        for f in sorted(filenames):
            name = (rel / f).as_posix()
            if name not in files and not name.startswith(MARKER):  # the marker and its temporary copies
                extra.append(name)
    return extra


def _retire(out: Path, doc: dict[str, Any]) -> None:
    """Move the marker ``doc`` was read from out of the way; of concurrent runs doing so, one wins."""
    stale = out / f"{MARKER}.{secrets.token_hex(4)}.old"
    try:
        os.rename(out / MARKER, stale)
    except FileNotFoundError:
        raise ConfigError(f"output folder {str(out)!r} was claimed by another fedray run at the same moment; "
                          "choose another folder") from None
    try:
        moved = json.loads(stale.read_text())
    except (OSError, ValueError):
        moved = None
    if not isinstance(moved, dict) or moved.get("run_id") != doc.get("run_id"):  # another run's new claim
        try:
            os.link(stale, out / MARKER)  # give it back (never over a marker made meanwhile)
        except OSError:
            pass
        stale.unlink()
        raise ConfigError(f"output folder {str(out)!r} was claimed by another fedray run at the same moment; "
                          "choose another folder")
    stale.unlink()


def _empty(out: Path, doc: dict[str, Any]) -> None:
    """Retire the marker (so that one run only goes on), then delete the files it lists and the
    folders they leave empty."""
    leftovers = _leftovers(out, doc)
    _retire(out, doc)
    for name in [*doc["files"], *leftovers]:
        _remove_inside(out, name, os.unlink)
    for d in sorted({p for f in doc["files"] for p in Path(f).parents if p.parts}, key=lambda p: -len(p.parts)):
        _remove_inside(out, d.as_posix(), os.rmdir)


_NOFOLLOW_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def _remove_inside(out: Path, name: str, remove: Any) -> None:
    """``remove`` (``os.unlink`` / ``os.rmdir``) the entry ``name`` of ``out`` through directory
    descriptors: each folder on the way is opened without following links, so an entry swapped for a
    link meanwhile (``plots`` -> ``/etc``) stops the removal there instead of reaching outside. The
    last entry itself is removed, never what it links to."""
    parts = Path(name).parts
    if not parts or any(p in ("..", ".", "") for p in parts) or Path(name).is_absolute():
        return
    fds = [os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))]
    try:
        for part in parts[:-1]:
            fds.append(os.open(part, _NOFOLLOW_DIR, dir_fd=fds[-1]))
        st = os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False)
        if remove is os.unlink and stat.S_ISDIR(st.st_mode):
            return
        remove(parts[-1], dir_fd=fds[-1])
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            log.warning("not removing %s from %s: a folder on its way is a link", name, out)
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _take_over(out: Path, overwrite: bool, run_id: str | None) -> dict[str, Any]:
    """Claim an existing non-empty folder: it must be a finished fedray output (or this run's own claim)."""
    doc = _read(out)
    if doc is not None and _alive(doc) and doc.get("pid") == os.getpid() and not doc["files"] \
            and (run_id is None or run_id == doc["run_id"]) and not _foreign(out, doc):
        return doc  # claimed a moment ago by this run (fedray.run checks before the session writes)
    if doc is not None and not doc["files"] and not _alive(doc) and not _foreign(out, doc):
        _retire(out, doc)  # only the marker of a run that wrote nothing: the folder is empty
        return _claim(out, run_id)
    entries = [p.name for p in out.iterdir()]
    if not overwrite:
        raise ConfigError(f"output folder {str(out)!r} is not empty ({len(entries)} entries); choose another "
                          "folder, or pass --overwrite (output.overwrite: true) to replace its contents")
    if doc is None:
        raise ConfigError(
            f"output folder {str(out)!r} is not empty and does not look like a fedray output "
            f"folder (no {MARKER}, the marker fedray writes); refusing to empty it, choose another folder"
        )
    where = _protected(out)
    if where:
        raise ConfigError(f"--overwrite: output folder {str(out)!r} is {where}; fedray never empties it, "
                          "choose a folder of its own")
    if _alive(doc):
        raise ConfigError(f"output folder {str(out)!r} is being written by another fedray run (process "
                          f"{doc.get('pid')}); choose another folder")
    extra = _foreign(out, doc)
    if extra:
        raise ConfigError(f"--overwrite: output folder {str(out)!r} holds {len(extra)} entries fedray did not write "
                          f"({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''}); refusing to empty it, "
                          "choose another folder")
    _empty(out, doc)
    log.info("emptied output folder %s of the %d files fedray wrote there (overwrite)", out, len(doc["files"]))
    return _claim(out, run_id)


def prepare(directory: str | Path, overwrite: bool = False, *, resuming: bool = False,
            run_id: str | None = None) -> Path:
    """Check, create and claim the output folder before a run; returns its path.

    ``resuming``: the folder may hold the interrupted run's outputs (its marker must name
    ``run_id``, the checkpoint's run). ``run_id``: the run the folder is claimed for
    (default: a new random id).

    Raises
    ------
    ConfigError
        The path is a file, cannot be created or written, is claimed by another run, or is
        a non-empty folder (without ``overwrite``; with it, when it holds anything fedray
        did not write, or is the current folder, the home folder or the root).
    """
    if not isinstance(directory, (str, os.PathLike)) or not str(directory):
        raise ConfigError(f"output: expected the path of a folder (str or Path); got {type(directory).__name__} "
                          f"{directory!r:.60}")
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder {str(out)!r} is a file; choose a folder (--out)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        if resuming and _resume_into(out, run_id):
            return out
        if any(out.iterdir()):
            _take_over(out, overwrite, run_id)
        else:
            _claim(out, run_id)
    except OSError as exc:
        raise ConfigError(f"output folder {str(out)!r} cannot be written: {exc.strerror or exc}") from None
    return out


def _resume_into(out: Path, run_id: str | None) -> bool:
    """Adopt the interrupted run's own folder (True), or say that a new claim is needed (False)."""
    doc = _read(out)
    if doc is None:
        return False
    if run_id is not None and doc.get("run_id") != run_id:
        raise ConfigError(f"--resume: output folder {str(out)!r} belongs to another run than the checkpoint; "
                          "resume into the checkpoint's own folder, or give a new folder with --out")
    if _alive(doc) and doc.get("pid") != os.getpid():
        raise ConfigError(f"output folder {str(out)!r} is being written by another fedray run (process "
                          f"{doc.get('pid')}); choose another folder")
    links = _links_inside(out)
    if links:
        raise ConfigError(
            f"--resume: output folder {str(out)!r} holds links fedray did not make ({', '.join(links[:3])}"
            f"); a resumed run would write through them: remove them, or resume into a new --out"
        )
    _write(out, {**doc, "pid": os.getpid(), "host": socket.gethostname()})
    return True


def _links_inside(out: Path) -> list[str]:
    """Symbolic links anywhere in ``out``, and files with another hard link (fedray writes each file under
    a new name and moves it into place, so it makes neither: such a link was planted)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(out):  # links to folders are listed, not followed
        here = Path(dirpath)
        found += [(here / n).relative_to(out).as_posix() for n in dirnames + filenames if (here / n).is_symlink()]
        found += [(here / n).relative_to(out).as_posix() + " (hard link)" for n in filenames
                  if not (here / n).is_symlink() and (here / n).stat().st_nlink > 1]
    return sorted(found)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A fresh name beside ``path`` to write the file to; when the block ends it is moved onto ``path``
    (``os.replace``), so a link found at ``path``, symbolic or hard, is replaced and never written
    through, and a reader never sees a half-written file. A folder that is a symbolic link is refused."""
    path = Path(path)
    if path.parent.is_symlink():
        raise OutputError(f"output folder {str(path.parent)!r} is a symbolic link; fedray writes only into real "
                          "folders: remove the link, or choose another folder")
    tmp = path.with_name(f".tmp-{secrets.token_hex(6)}-{path.name}")  # the same suffix (np.savez keeps it)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with suppress(FileNotFoundError):
            tmp.unlink()


def write_text(path: str | Path, text: str) -> None:
    """``path``'s new content, written under a fresh name and moved into place (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)


def run_id_of(directory: str | Path) -> str | None:
    """The run id in a folder's marker (None: not a fedray output folder)."""
    try:
        doc = _read(Path(directory))
    except ConfigError:
        return None
    return None if doc is None else str(doc.get("run_id"))


def record(directory: str | Path, paths: Iterable[str | Path], *, run_id: str | None = None,
           rebind: bool = False) -> None:
    """Add files fedray wrote in ``directory`` to its marker (made now if the folder has none).

    Paths outside the folder are ignored. Without a marker (a folder not claimed by
    :func:`prepare`, e.g. one of ``select-k`` or ``sweep``), one is created that lists only
    these files, so that ``--overwrite`` later removes them and nothing else. ``rebind``:
    the folder now belongs to run ``run_id`` (a ``checkpoint.directory`` a new run writes to).
    """
    out = Path(directory)
    root = out.resolve()
    names = []
    for p in paths:
        try:
            names.append(Path(p).resolve().relative_to(root).as_posix())
        except ValueError:
            continue
    doc = _read(out)
    if doc is None:
        doc = {"format": _FORMAT, "run_id": run_id or secrets.token_hex(16), "pid": None, "host": None, "files": []}
    elif rebind and run_id:
        doc["run_id"] = run_id
    doc["files"] = sorted(set(doc["files"]) | set(names))
    _write(out, doc)


def release(directory: str | Path) -> None:
    """Mark the folder as no longer being written (the run ended, well or not)."""
    out = Path(directory)
    try:
        doc = _read(out)
        if doc is not None and doc.get("pid") == os.getpid():
            _write(out, {**doc, "pid": None, "host": None})
    except (OSError, ConfigError) as exc:
        log.warning("could not update the marker of output folder %s: %s", out, exc)


def write_partial(directory: str | Path, cfg: Any, state: dict[str, Any] | None, error: BaseException) -> Path:
    """Write what a failed run has: ``config.yaml``, ``rounds.parquet`` and ``failures.parquet``
    (the rounds done so far), and ``summary.json`` with ``status: failed`` and the error."""
    import pandas as pd

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    history = (state or {}).get("history") or []
    failures = (state or {}).get("failures") or []
    record(out, [out / n for n, wanted in (("config.yaml", True), ("summary.json", True),
                                           ("rounds.parquet", history), ("failures.parquet", failures)) if wanted])
    write_text(out / "config.yaml", cfg.to_yaml())
    if history:
        with atomic_path(out / "rounds.parquet") as tmp:
            pd.DataFrame(history).to_parquet(tmp, index=False)
    if failures:
        with atomic_path(out / "failures.parquet") as tmp:
            log_ = FailureLog.of(failures)
            cols = log_.columns()
            pd.DataFrame({**cols, "kind": cols["kind"].tolist(), "error": cols["error"].tolist()}).to_parquet(
                tmp, index=False)
    text = str(error).strip()
    summary = {"status": "failed", "error": f"{type(error).__name__}: {text.splitlines()[0] if text else ''}",
               "rounds": len(history), "algorithm": cfg.algorithm.name, "dataset": str(cfg.data.dataset),
               "config": cfg.to_dict()}
    account = ((state or {}).get("report") or {}).get("privacy")
    if account:  # what the server was shown before the failure, and what the release rule refused
        summary["privacy"] = privacy_summary(account)
    write_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
    return out
