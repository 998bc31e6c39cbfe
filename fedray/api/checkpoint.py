"""Checkpoints every N rounds, and resuming an interrupted run.

With ``checkpoint.every: N`` the driver saves, after every N-th round, one file
``<output>/checkpoint/checkpoint.pkl`` (or ``checkpoint.directory``) holding

* the validated configuration and the output folder;
* the server's state (:meth:`fedray.loop.server.Server.snapshot`): the next round
  number, the history, per-client counters, the failures so far, the algorithm
  object with all its state (centres, phase, any generator it keeps), and what
  the executor layers recorded (message log, privacy account, injected faults);
* every client's ``state`` dict (for methods that keep client state).

Random streams need no saving: server and client generators are keyed by
(seed, round) and (seed, client id, round) (:mod:`fedray.core.seeding`), and the
shards are rebuilt from their recipes by the new session, with the same scaling.
The file is written to a temporary name (mode 0600) and renamed, so an
interruption while saving leaves the previous checkpoint intact.

Checkpoints are authenticated: the file is ``MAGIC``, an HMAC-SHA256 tag and the
pickled state, and :func:`load` checks the tag with a secret key before it
unpickles anything, so a crafted or foreign file is refused instead of running
code. The key is ``$FEDRAY_CHECKPOINT_KEY`` (hex, 32 bytes or more) or a random
key made on first use in ``$XDG_CONFIG_HOME/fedray/checkpoint.key`` (default
``~/.config/fedray``), readable by its owner only, written whole and linked into
place so that concurrent first uses agree on one key; a key shorter than 32 bytes
is refused. To resume on another machine, copy that key file along (or set the
variable on both).

Each checkpoint holds, under its tag, the id of its run, which fedray's marker of
the output folder (:mod:`fedray.api.outputs`) also records: a checkpoint copied
into another run's folder is refused. The marker is not signed, so this binding
guards against mix-ups only: whoever can edit the marker can make any checkpoint
signed with the key resumable there (the signature, not the binding, is what keeps
foreign files from being unpickled).

``fedray run --resume DIR`` (or :func:`resume`) rebuilds the session from the
saved configuration, restores the server and the clients and runs the remaining
rounds; the result is the one the uninterrupted run would have given (same
centres, same history apart from wall-clock columns). Outputs go to ``--out`` or
else to the folder the user named (``DIR``, or the parent of a checkpoint folder
named directly), never to a path read from the file; so do the resumed run's
checkpoints (``<output>/checkpoint``). Rounds after the last checkpoint are
computed again.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import pickle
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedray.api.outputs import MARKER, record, run_id_of
from fedray.core.errors import ConfigError, FedrayError, OutputError

log = logging.getLogger(__name__)

FILENAME = "checkpoint.pkl"
VERSION = 3
MAGIC = b"FEDRAY-CHECKPOINT-3\n"
KEY_ENV = "FEDRAY_CHECKPOINT_KEY"
_TAG = 32  # bytes of an HMAC-SHA256 tag
MIN_KEY = 32  # bytes of the shortest key accepted


def _key_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "fedray" / "checkpoint.key"


def signing_key(create: bool = False) -> bytes:
    """The secret key that authenticates checkpoints (never derived from the experiment seed).

    ``$FEDRAY_CHECKPOINT_KEY`` (hex) if set, else the key file, made with a random key
    (mode 0600) when ``create`` and it does not exist yet.
    """
    env = os.environ.get(KEY_ENV)
    if env:
        try:
            key = bytes.fromhex(env.strip())
        except ValueError:
            raise ConfigError(f"${KEY_ENV}: must be hexadecimal (e.g. from `python -c \"import secrets; "
                              "print(secrets.token_hex(32))\"`)") from None
        if len(key) < MIN_KEY:
            raise ConfigError(f"${KEY_ENV}: needs at least 32 bytes (64 hex digits); got {len(key)}")
        return key
    path = _key_file()
    if not path.is_file():
        if not create:
            raise ConfigError(f"--resume: no checkpoint key on this machine ({str(path)!r} is missing and ${KEY_ENV} "
                              "is unset); copy the key file of the machine that wrote the checkpoint")
        _make_key_file(path)
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"checkpoint key file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if len(key) < MIN_KEY:
        raise ConfigError(
            f"checkpoint key file {str(path)!r} holds {len(key)} bytes, fewer than {MIN_KEY}: a short key "
            "lets anyone forge checkpoints; delete it (a new one is made on the next run) or set "
            f"${KEY_ENV}"
        )
    return key


def _make_key_file(path: Path) -> None:
    """Create the key file atomically: a complete temporary file (mode 0600) linked into place.

    Of processes creating it at the same moment, one links its file and the others read that one;
    nobody ever reads an empty or partial key.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # fails if another process made the key first: then theirs is used
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: rename (the last writer's key wins)
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _tag(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()


def checkpoint_dir(cfg: Any, output: str | Path | None) -> Path:
    """Where checkpoints of this run go (raises ConfigError when there is nowhere)."""
    if cfg.checkpoint.directory:
        return Path(cfg.checkpoint.directory)
    if output:
        return Path(output) / "checkpoint"
    raise ConfigError(f"checkpoint.every={cfg.checkpoint.every} needs a folder: set output.directory, "
                      "checkpoint.directory, or pass output= / --out")


class Checkpointer:
    """Saves a checkpoint after every ``checkpoint.every``-th round (used by :meth:`fedray.api.session.Session.run`).

    Parameters
    ----------
    cfg : ExperimentConfig
    output : str, Path or None
        The run's output folder.
    session : Session
        Gives the clients' state.
    """

    def __init__(self, cfg: Any, output: str | Path | None, session: Any, run_id: str | None = None) -> None:
        self.cfg = cfg
        self.every = int(cfg.checkpoint.every)
        self.output = None if output is None else str(output)
        self.directory = checkpoint_dir(cfg, output)
        self.session = session
        self.run_id = run_id or (run_id_of(output) if output else None) or secrets.token_hex(16)

    def after_round(self, round_: int, snapshot: Callable[[], dict[str, Any]]) -> Path | None:
        if (round_ + 1) % self.every:
            return None
        return self.save(snapshot())

    def save(self, server_state: dict[str, Any]) -> Path | None:
        ids = list(range(self.session.info.n_clients))
        try:
            clients = self.session.executor.get_state(ids)
        except FedrayError as exc:  # a stuck or dead actor: keep the previous checkpoint, go on
            log.warning(
                "checkpoint after round %d skipped (the previous one stays): %s", server_state["round"] - 1, exc
            )
            return None
        blob = {"version": VERSION, "run_id": self.run_id, "config": self.cfg.to_dict(),
                "server": server_state, "clients": clients}
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / FILENAME
        payload = pickle.dumps(blob, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._record(path)
            _write_private(path, MAGIC + _tag(signing_key(create=True), payload) + payload)
        except OSError as exc:  # a full disk: the run stops in one line; the previous checkpoint stays
            raise OutputError(f"checkpoint after round {server_state['round'] - 1} cannot be written to "
                              f"{str(self.directory)!r}: {exc.strerror or exc}; free space and resume from the "
                              "previous checkpoint (fedray run --resume)") from None
        log.info("checkpoint after round %d: %s", server_state["round"] - 1, path)
        return path

    def _record(self, path: Path) -> None:
        """List the checkpoint in the marker of the output folder (or of ``checkpoint.directory``)."""
        if self.output and _inside(path, Path(self.output)):
            record(self.output, [path])
        else:
            record(self.directory, [path], run_id=self.run_id, rebind=True)


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (mode 0600), through a temporary file
    renamed into place, so an interruption leaves the previous file intact."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def find(directory: str | Path) -> Path:
    """The checkpoint file in an output folder, a checkpoint folder, or the file itself."""
    p = Path(directory)
    for cand in (p, p / FILENAME, p / "checkpoint" / FILENAME):
        if cand.is_file():
            return cand
    raise ConfigError(f"--resume {str(p)!r}: no {FILENAME} there nor in {str(p / 'checkpoint')!r}; "
                      "was the run started with checkpoint.every > 0?")


def load(directory: str | Path, *, bound: bool = True) -> dict[str, Any]:
    """Read a checkpoint (see :func:`find` for where it is looked for).

    ``bound``: the checkpoint must sit in the output folder of its own run (see
    :func:`_check_run`). Only a caller that keeps its own record of which checkpoint
    belongs to which run (:mod:`fedray.analysis.tune`: Ray Tune's checkpoints) passes False;
    the signature is checked either way.
    """
    path = find(directory)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--resume: {str(path)!r} is not a readable checkpoint ({exc.strerror})") from None
    if not raw.startswith(MAGIC) or len(raw) < len(MAGIC) + _TAG:
        raise ConfigError(f"--resume: {str(path)!r} is not a readable checkpoint (not a fedray checkpoint of "
                          f"version {VERSION}); nothing was loaded from it")
    tag, payload = raw[len(MAGIC): len(MAGIC) + _TAG], raw[len(MAGIC) + _TAG:]
    if not hmac.compare_digest(tag, _tag(signing_key(), payload)):
        raise ConfigError(f"--resume: {str(path)!r} was not written with this machine's checkpoint key (altered, "
                          f"or from another machine: copy its key file or set ${KEY_ENV}); nothing was loaded")
    try:
        blob = pickle.loads(payload)  # authenticated above: written by fedray with this key
    except Exception as exc:  # noqa: BLE001 - a damaged file with a valid tag cannot happen; be safe
        raise ConfigError(f"--resume: {str(path)!r} is not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(blob, dict) or blob.get("version") != VERSION:
        raise ConfigError(f"--resume: {str(path)!r} is not a fedray checkpoint of version {VERSION}")
    if bound:
        _check_run(path, blob)
    blob["path"] = str(path)
    return blob


def _check_run(path: Path, blob: dict[str, Any]) -> None:
    """Refuse a checkpoint that is not the one of the run whose folder holds it.

    The run id is in the signed checkpoint and in fedray's marker of the output folder (or of
    ``checkpoint.directory``): a checkpoint copied in from another run is refused.
    """
    for folder in (path.parent, path.parent.parent):
        if (folder / MARKER).exists():
            theirs = run_id_of(folder)
            if theirs is None or theirs != blob.get("run_id"):
                raise ConfigError(f"--resume: {str(path)!r} is a checkpoint of another run than the one of "
                                  f"{str(folder)!r}; nothing was resumed (resume each run from its own folder)")
            return
    raise ConfigError(f"--resume: {str(path)!r} is not inside a fedray output folder (no {MARKER} beside it); resume "
                      "from the run's output folder, copied whole")


