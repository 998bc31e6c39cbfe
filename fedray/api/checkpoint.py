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
The file is written to a temporary name and renamed, so an interruption while
saving leaves the previous checkpoint intact.

Checkpoints are authenticated: the file is ``MAGIC``, an HMAC-SHA256 tag and the
pickled state, and :func:`load` checks the tag with a secret key before it
unpickles anything, so a crafted or foreign file is refused instead of running
code. The key is ``$FEDRAY_CHECKPOINT_KEY`` (hex, 32 bytes or more) or a random
key made on first use in ``$XDG_CONFIG_HOME/fedray/checkpoint.key`` (default
``~/.config/fedray``), readable by its owner only. To resume on another machine,
copy that key file along (or set the variable on both).

``fedray run --resume DIR`` (or :func:`resume`) rebuilds the session from the
saved configuration, restores the server and the clients and runs the remaining
rounds; the result is the one the uninterrupted run would have given (same
centres, same history apart from wall-clock columns). Outputs go to ``--out`` or
else to the folder the user named (``DIR``, or the parent of a checkpoint folder
named directly), never to a path read from the file. Rounds after the last
checkpoint are computed again.
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

from fedray.core.errors import ConfigError, FedrayError

log = logging.getLogger(__name__)

FILENAME = "checkpoint.pkl"
VERSION = 2
MAGIC = b"FEDRAY-CHECKPOINT-2\n"
KEY_ENV = "FEDRAY_CHECKPOINT_KEY"
_TAG = 32  # bytes of an HMAC-SHA256 tag


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
        if len(key) < 32:
            raise ConfigError(f"${KEY_ENV}: needs at least 32 bytes (64 hex digits); got {len(key)}")
        return key
    path = _key_file()
    if path.is_file():
        return path.read_bytes()
    if not create:
        raise ConfigError(f"--resume: no checkpoint key on this machine ({str(path)!r} is missing and ${KEY_ENV} is "
                          "unset); copy the key file of the machine that wrote the checkpoint")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(32))
    return path.read_bytes()


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

    def __init__(self, cfg: Any, output: str | Path | None, session: Any) -> None:
        self.cfg = cfg
        self.every = int(cfg.checkpoint.every)
        self.output = None if output is None else str(output)
        self.directory = checkpoint_dir(cfg, output)
        self.session = session

    def after_round(self, round_: int, snapshot: Callable[[], dict[str, Any]]) -> Path | None:
        if (round_ + 1) % self.every:
            return None
        return self.save(snapshot())

    def save(self, server_state: dict[str, Any]) -> Path | None:
        ids = list(range(self.session.info.n_clients))
        try:
            clients = self.session.executor.get_state(ids)
        except FedrayError as exc:  # a stuck or dead actor: keep the previous checkpoint, go on
            log.warning("checkpoint after round %d skipped (the previous one stays): %s", server_state["round"] - 1, exc)
            return None
        blob = {"version": VERSION, "config": self.cfg.to_dict(),
                "server": server_state, "clients": clients}
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / FILENAME
        tmp = path.with_suffix(".tmp")
        payload = pickle.dumps(blob, protocol=pickle.HIGHEST_PROTOCOL)
        with open(tmp, "wb") as fh:
            fh.write(MAGIC + _tag(signing_key(create=True), payload) + payload)
        os.replace(tmp, path)
        log.info("checkpoint after round %d: %s", server_state["round"] - 1, path)
        return path


def find(directory: str | Path) -> Path:
    """The checkpoint file in an output folder, a checkpoint folder, or the file itself."""
    p = Path(directory)
    for cand in (p, p / FILENAME, p / "checkpoint" / FILENAME):
        if cand.is_file():
            return cand
    raise ConfigError(f"--resume {str(p)!r}: no {FILENAME} there nor in {str(p / 'checkpoint')!r}; "
                      "was the run started with checkpoint.every > 0?")


def load(directory: str | Path) -> dict[str, Any]:
    """Read a checkpoint (see :func:`find` for where it is looked for)."""
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
    blob["path"] = str(path)
    return blob


