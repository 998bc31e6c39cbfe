"""Progress of a run: a bar on a terminal or in a notebook, log lines otherwise.

* On a terminal (stderr is a TTY): a tqdm bar with the round total (the round cap,
  or the algorithm's own budget when smaller), the rate and an ETA, and a postfix
  with the round's headline metrics (phase, clients answered, centre shift,
  objective, accuracy, clusters).
* In a Jupyter notebook: the notebook widget of tqdm (``ipywidgets``, in the
  ``notebooks`` extra); without ipywidgets, log lines.
* Anywhere else (a pipe, a CI log, a file): one log line on the ``fedray.api.progress``
  logger about every 5 % of the total (about 20 lines a run) and the last round,
  with the same metrics and an ETA. The CLI shows these lines unless ``-q``.

Steps whose length is not known in advance (Ray start-up, placement-group waits, building
the clients, the final evaluation, each K of ``select-k``, each run of a sweep) show an
:class:`Activity`: on a terminal one line redrawn in place with the elapsed seconds, elsewhere a
line when the step starts and another every ``Activity.every`` seconds while it lasts.
Activities nest: an inner one (a session started by ``select-k``) writes into the line of the
outer one. Where no logging handler shows fedray's INFO lines (a plain Python script or a
notebook), the lines go to standard error; ``progress=False`` (``-q``) silences all of it, and
:func:`showing` sets that default for everything started inside it.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("fedray.api.progress")

#: Metrics shown per round, where the algorithm records them.
HEADLINE = ("phase", "clients_trained", "clients_evaluated", "clients_answered", "center_shift", "objective",
            "objective_sampled", "accuracy", "n_clusters")


#: The default of ``show`` for progress started inside :func:`showing` (None: decide by the output).
_SHOW: contextvars.ContextVar[bool | None] = contextvars.ContextVar("fedray_progress", default=None)


@contextlib.contextmanager
def showing(show: bool | None) -> Iterator[None]:
    """Progress started inside is shown (True), silenced (False) or decided by the output (None)."""
    token = _SHOW.set(show if show is not None else _SHOW.get())
    try:
        yield
    finally:
        _SHOW.reset(token)


def _resolve(show: bool | None) -> bool | None:
    return _SHOW.get() if show is None else show


def emit(message: str) -> None:
    """One progress line: through the ``fedray.api.progress`` logger where a handler shows its INFO
    lines (the CLI, an application's logging set-up), else on standard error."""
    if log.isEnabledFor(logging.INFO) and log.hasHandlers():
        log.info("%s", message)
    else:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def in_notebook() -> bool:
    """True inside a Jupyter kernel."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def _has_widgets() -> bool:
    return importlib.util.find_spec("ipywidgets") is not None


def _fmt(v: Any) -> Any:
    return f"{v:.4g}" if isinstance(v, float) else v  # a count kept as a float (clients_trained) shows as 4


def clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """Reports rounds as they finish.

    Parameters
    ----------
    name : str
        The algorithm's name.
    total : int
        Rounds expected at most.
    show : bool or None
        True: a bar (a terminal or notebook bar where possible, else lines); False:
        nothing; None: a bar on a terminal or in a notebook, log lines otherwise.
    """

    def __init__(self, name: str, total: int, show: bool | None = None) -> None:
        self.name, self.total = name, max(1, int(total))
        self.every = max(1, round(self.total / 20))
        self.done = 0
        self.t0 = time.perf_counter()
        self.bar = None
        show = _resolve(show)
        self.mode = "off" if show is False else "lines"
        if show is not False and (sys.stderr.isatty() or (in_notebook() and _has_widgets())):
            if in_notebook():
                from tqdm.notebook import tqdm
            else:
                from tqdm import tqdm
            self.bar = tqdm(total=self.total, desc=name, unit="round", leave=True)
            self.mode = "bar"
        elif self.mode == "lines":
            emit(f"{name}: running, up to {self.total} rounds")

    def update(self, row: dict[str, Any]) -> None:
        self.done += 1
        shown = {k: _fmt(row[k]) for k in HEADLINE if k in row and row[k] == row[k]}
        if "clients_evaluated" in shown:  # trained and evaluated apart say it: answered is their union
            shown.pop("clients_answered", None)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(shown)
        elif self.mode == "lines" and (self.done % self.every == 0 or self.done == 1):
            elapsed = time.perf_counter() - self.t0
            rate = elapsed / self.done
            left = max(0, self.total - self.done) * rate
            metrics = ", ".join(f"{k} {v}" for k, v in shown.items())
            emit(f"{self.name}: round {self.done}/{self.total} ({100 * self.done // self.total}%), {rate:.2f} s/round, "
                 f"ETA {clock(left)} (at most)" + (f"; {metrics}" if metrics else ""))

    def close(self, stopped_by: str = "") -> None:
        if self.mode == "closed":
            return
        mode, self.mode = self.mode, "closed"
        if self.bar is not None:
            if self.done < self.total:  # the algorithm stopped before the cap: a full bar would lie
                self.bar.total = self.done
                self.bar.refresh()
            self.bar.close()
        elif mode == "lines" and self.done % self.every:
            emit(f"{self.name}: {self.done} rounds in {time.perf_counter() - self.t0:.1f} s"
                 + (f" ({stopped_by})" if stopped_by else ""))


#: The activities open in this process, outermost first (an inner one writes into the outermost's line).
_OPEN: list[Activity] = []
_LOCK = threading.Lock()


class Activity:
    """A step of unknown length, shown with its elapsed time while it runs.

    Parameters
    ----------
    title : str
        What runs, e.g. ``"start-up"`` or ``"select-k"``.
    show : bool or None
        As for :class:`Progress` (None: the default of :func:`showing`, else a line redrawn on a
        terminal and log lines otherwise).
    every : float
        Seconds between the "still ..." lines where no line can be redrawn.

    Use :meth:`stage` to say what it does now (each stage's seconds are kept in :attr:`stages`)
    and :meth:`close` (or ``with``) at the end.
    """

    every = 10.0

    def __init__(self, title: str, show: bool | None = None, lazy: bool = False) -> None:
        show = _resolve(show)
        self.lazy = lazy  # lines mode: a step's line only once it has lasted a second (short steps say nothing)
        self._pending = ""
        self.title, self.text, self._key, self.t0 = title, "", "", time.perf_counter()
        self.stages: dict[str, float] = {}
        self._stage_t0 = self.t0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_line = self.t0
        self._width = 0
        with _LOCK:
            self.outer = _OPEN[0] if _OPEN else None  # the outermost: its line shows every inner step
            if show is False:
                self.mode = "off"
            elif self.outer is not None:
                self.mode, self._before = "inner", self.outer.text
            else:
                self.mode = "tty" if sys.stderr.isatty() and not in_notebook() else "lines"
            if self.mode != "off":
                _OPEN.append(self)
        if self.mode in ("tty", "lines"):
            self._thread = threading.Thread(target=self._redraw, name="fedray-progress", daemon=True)
            self._thread.start()

    def stage(self, text: str, key: str | None = None) -> None:
        """Start the step ``text`` (the previous one's seconds go to :attr:`stages` under its ``key``,
        by default its text)."""
        now = time.perf_counter()
        self._keep(now)
        self._key, self._stage_t0 = key or text, now
        self.text = text
        if self.mode == "inner":
            self.outer._set(f"{self._before} · {self.title}: {text}" if self._before else f"{self.title}: {text}")
        elif self.mode in ("tty", "lines"):
            self._set(text)

    def _keep(self, now: float) -> None:
        if self._key:
            self.stages[self._key] = self.stages.get(self._key, 0.0) + now - self._stage_t0

    def _set(self, text: str) -> None:
        self.text = text
        if self.mode == "lines":
            self._last_line = time.perf_counter()
            if self.lazy:
                self._pending = text
            else:
                emit(f"{self.title}: {text} ...")
        elif self.mode == "tty" and not self.lazy:
            self._write(self._line())

    def _line(self) -> str:
        return f"{self.title}: {self.text} ... {self.elapsed:.0f} s"

    def _redraw(self) -> None:
        """The thread: the terminal line four times a second, or a "still ..." line every :attr:`every` s."""
        while not self._stop.wait(0.25):
            waited = time.perf_counter() - self._last_line
            if self.mode == "tty":
                if not self.lazy or self.elapsed >= 1.0:
                    self._write(self._line())
            elif self._pending and self._pending == self.text and waited >= 1.0:
                self._pending = ""
                emit(f"{self.title}: {self.text} ...")
            elif self.text and waited >= self.every:
                self._last_line = time.perf_counter()
                emit(f"{self.title}: still {self.text} ({self.elapsed:.0f} s)")

    def _write(self, line: str, end: str = "") -> None:
        with _LOCK:
            pad = " " * max(0, self._width - len(line))
            sys.stderr.write("\r" + line + pad + (end or ("\r" + line if pad else "")))
            sys.stderr.flush()
            self._width = 0 if end else len(line)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def close(self, done: str = "") -> None:
        """End the activity; ``done`` is its last line (terminal and lines; nothing for an inner one)."""
        self._keep(time.perf_counter())
        self._key = self.text = ""
        if self.mode == "off":
            return
        with _LOCK:
            if self in _OPEN:
                _OPEN.remove(self)
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.mode == "inner":
            self.outer._set(self._before)
        elif self.mode == "tty":
            self._write(f"{self.title}: {done}" if done else "", end="\n" if done else "")
        elif done:
            emit(f"{self.title}: {done}")
        self.mode = "off"

    def __enter__(self) -> Activity:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def startup_line(seconds: float, stages: dict[str, float]) -> str:
    """``ready in 17.2 s (starting Ray on this machine 15.1 s, ...)``: the steps of 0.5 s or more."""
    slow = [f"{k} {v:.1f} s" for k, v in stages.items() if v >= 0.5]
    return f"ready in {seconds:.1f} s" + (f" ({'; '.join(slow)})" if slow else "")
