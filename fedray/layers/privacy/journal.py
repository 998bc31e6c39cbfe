"""The release log that outlives a run: one per federation, in this process and on disk.

A server that lives longer than one run keeps every sum it was ever given, so the release rule
(:mod:`fedray.layers.privacy.release`) must weigh a new sum against the sums of earlier runs over the
same clients (a seed loop, a sweep, K selection, Tune trials) and against the sums a resumed run
released after its checkpoint. Two stores keep them:

* **in this process**: :func:`~fedray.layers.privacy.release.shared_log` hands every privacy layer
  of a federation (its :func:`federation_fingerprint`) the same
  :class:`~fedray.layers.privacy.release.ReleaseLog`, whichever session built the layer;
* **on disk**: a :class:`Journal`, ``releases-<fingerprint>.jsonl`` in the run's release-log folder
  (``privacy.release_log``, by default ``release_log/`` inside the run's output folder). A run reads
  it when it starts, writes into it what the process already knew, and appends each sum *before* it
  is unmasked (write-ahead: a run killed after unmasking has it on disk). It is re-read before every
  decision, under an exclusive lock held until the sum is recorded, so processes sharing one folder
  (Tune trials) decide against each other's sums too.

The fingerprint is a SHA-256 over the clients' names, their sample counts, the number of features
and the exact secure sums of the set-up moments (column sums and sums of squares): what the server
holds already, so it discloses nothing more. Two federations with the same fingerprint share one
log (that can only refuse more); the same clients with other data are another federation.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import OutputError

log = logging.getLogger(__name__)

def federation_fingerprint(names: Sequence[str], n_samples: Any, n_features: int, sums: Sequence[Any]) -> str:
    """A 32-hex-digit fingerprint of a federation: its clients (names and sample counts), their number
    of features and ``sums`` (the exact set-up moments the server was given)."""
    h = hashlib.sha256(b"fedray-federation/1")
    h.update(json.dumps([str(n) for n in names]).encode())
    h.update(np.ascontiguousarray(np.asarray(n_samples, dtype=np.float64)).tobytes())
    h.update(str(int(n_features)).encode())
    for s in sums:
        h.update(np.ascontiguousarray(np.asarray(s, dtype=np.float64)).tobytes())
    return h.hexdigest()[:32]


class Journal:
    """``releases-<fingerprint>.jsonl`` in ``folder``: one JSON row per released sum, appended.

    Kept as a path and a read offset only (a layer's copy travels to a server actor by pickling).
    The folder is made 0700 and the file 0600; a journal that is a symbolic link or has other hard
    links is refused (a write through it would land outside the folder).
    """

    def __init__(self, folder: str | Path, fingerprint: str) -> None:
        self.folder = Path(folder)
        self.path = self.folder / f"releases-{fingerprint}.jsonl"
        self.offset = 0  # bytes read so far

    def _open(self) -> int:
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise OutputError(f"privacy.release_log: the release journal {str(self.path)!r} cannot be opened "
                              f"({exc.strerror or exc}); it must be a plain file in a writable folder") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            raise OutputError(f"privacy.release_log: the release journal {str(self.path)!r} is not a plain file "
                              f"of its own ({st.st_nlink} links); remove it or choose another folder")
        return fd

    @contextmanager
    def locked(self) -> Iterator[int]:
        """The journal open and locked (exclusive) for a decision and its record."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def read_new(self, fd: int) -> list[dict[str, Any]]:
        """Rows appended since the last read (by any process); a torn last line is left for later."""
        size = os.fstat(fd).st_size
        if size <= self.offset:
            return []
        raw = os.pread(fd, size - self.offset, self.offset)
        end = raw.rfind(b"\n") + 1
        self.offset += end
        rows = []
        for line in raw[:end].splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                log.warning("release journal %s: an unreadable line is skipped", self.path)
        return rows

    def append(self, fd: int, rows: list[dict[str, Any]]) -> None:
        """Write ``rows`` at the end and flush them to the disk."""
        if not rows:
            return
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
        before = os.fstat(fd).st_size
        os.write(fd, data)
        os.fsync(fd)
        if self.offset == before:  # everything before was read: these rows need no reading back
            self.offset += len(data)
