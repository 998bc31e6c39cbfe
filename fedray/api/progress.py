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
"""
from __future__ import annotations

import importlib.util
import logging
import sys
import time
from typing import Any

log = logging.getLogger("fedray.api.progress")

#: Metrics shown per round, where the algorithm records them.
HEADLINE = ("phase", "clients_answered", "center_shift", "objective", "objective_sampled", "accuracy", "n_clusters")


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
    return f"{v:.4g}" if isinstance(v, float) else v


def _eta(seconds: float) -> str:
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
        self.mode = "off" if show is False else "lines"
        if show is not False and (sys.stderr.isatty() or (in_notebook() and _has_widgets())):
            if in_notebook():
                from tqdm.notebook import tqdm
            else:
                from tqdm import tqdm
            self.bar = tqdm(total=self.total, desc=name, unit="round", leave=True)
            self.mode = "bar"

    def update(self, row: dict[str, Any]) -> None:
        self.done += 1
        shown = {k: _fmt(row[k]) for k in HEADLINE if k in row and row[k] == row[k]}
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(shown)
        elif self.mode == "lines" and (self.done % self.every == 0 or self.done == 1):
            elapsed = time.perf_counter() - self.t0
            rate = elapsed / self.done
            left = max(0, self.total - self.done) * rate
            metrics = ", ".join(f"{k} {v}" for k, v in shown.items())
            log.info("%s: round %d/%d (%d%%), %.2f s/round, ETA %s (at most)%s", self.name, self.done, self.total,
                     100 * self.done // self.total, rate, _eta(left), f"; {metrics}" if metrics else "")

    def close(self, stopped_by: str = "") -> None:
        if self.bar is not None:
            if self.done < self.total:  # the algorithm stopped before the cap: a full bar would lie
                self.bar.total = self.done
                self.bar.refresh()
            self.bar.close()
        elif self.mode == "lines" and self.done % self.every:
            log.info("%s: %d rounds in %.1f s%s", self.name, self.done, time.perf_counter() - self.t0,
                     f" ({stopped_by})" if stopped_by else "")
