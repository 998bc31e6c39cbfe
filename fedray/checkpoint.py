"""Checkpoints every N rounds, and resuming an interrupted run.

With ``checkpoint.every: N`` the driver saves, after every N-th round, one file
``<output>/checkpoint/checkpoint.pkl`` (or ``checkpoint.directory``) holding

* the validated configuration and the output folder;
* the server's state (:meth:`fedray.server.Server.snapshot`): the next round
  number, the history, per-client counters, the failures so far, the algorithm
  object with all its state (centres, phase, any generator it keeps), and what
  the executor layers recorded (message log, privacy account, injected faults);
* every client's ``state`` dict (for methods that keep client state).

Random streams need no saving: server and client generators are keyed by
(seed, round) and (seed, client id, round) (:mod:`fedray.seeding`), and the
shards are rebuilt from their recipes by the new session, with the same scaling.
The file is written to a temporary name and renamed, so an interruption while
saving leaves the previous checkpoint intact.

``fedray run --resume DIR`` (or :func:`resume`) rebuilds the session from the
saved configuration, restores the server and the clients and runs the remaining
rounds; the result is the one the uninterrupted run would have given (same
centres, same history apart from wall-clock columns), written to the same output
folder. Rounds after the last checkpoint are computed again.
"""
from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any, Callable

from fedray.errors import ConfigError

log = logging.getLogger(__name__)

FILENAME = "checkpoint.pkl"
VERSION = 1


def checkpoint_dir(cfg: Any, output: str | Path | None) -> Path:
    """Where checkpoints of this run go (raises ConfigError when there is nowhere)."""
    if cfg.checkpoint.directory:
        return Path(cfg.checkpoint.directory)
    if output:
        return Path(output) / "checkpoint"
    raise ConfigError(f"checkpoint.every={cfg.checkpoint.every} needs a folder: set output.directory, "
                      "checkpoint.directory, or pass output= / --out")


class Checkpointer:
    """Saves a checkpoint after every ``checkpoint.every``-th round (used by :meth:`fedray.session.Session.run`).

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

    def save(self, server_state: dict[str, Any]) -> Path:
        ids = list(range(self.session.info.n_clients))
        clients = self.session.executor.get_state(ids)
        blob = {"version": VERSION, "config": self.cfg.to_dict(), "output": self.output,
                "server": server_state, "clients": clients}
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / FILENAME
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(blob, fh, protocol=pickle.HIGHEST_PROTOCOL)
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
        with open(path, "rb") as fh:
            blob = pickle.load(fh)
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file
        raise ConfigError(f"--resume: {str(path)!r} is not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(blob, dict) or blob.get("version") != VERSION:
        raise ConfigError(f"--resume: {str(path)!r} is not a fedray checkpoint of version {VERSION}")
    blob["path"] = str(path)
    return blob


def resume(directory: str | Path, progress: bool | None = None, output: str | Path | None = None) -> Any:
    """Continue an interrupted run from its checkpoint; returns its :class:`~fedray.results.Result`.

    Parameters
    ----------
    directory : str or Path
        The run's output folder (or its checkpoint folder or file).
    progress : bool, optional
    output : str or Path, optional
        Where to write the outputs (default: the run's own output folder).
    """
    from fedray.config import make_config
    from fedray.results import peak_memory_mb
    from fedray.session import Session

    blob = load(directory)
    cfg = make_config(blob["config"])
    out = output or blob.get("output") or Path(blob["path"]).parent.parent
    done = int(blob["server"]["round"])
    log.info("resuming %s after round %d from %s", cfg.algorithm.name, done - 1, blob["path"])
    with Session(cfg) as session:
        result = session.run(output=out, progress=progress, resume_from=blob)
        result.peak_memory_mb = peak_memory_mb()
    return result
