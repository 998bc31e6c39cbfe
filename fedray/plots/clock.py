"""A metric against the simulated clock of a deployment (``plots/sim_time.png``; docs/clock.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedray.plots.style import new_figure, save_figure, styled

#: Metrics drawn against simulated time when no target names one, first recorded wins.
METRICS = ("test_accuracy", "accuracy", "objective", "objective_sampled", "train_loss", "center_shift")


def clock_metric(history: pd.DataFrame, target: Any = None) -> str | None:
    """The metric to draw: the target's when recorded, else the first of :data:`METRICS` recorded."""
    names = ([target.metric] if target is not None else []) + list(METRICS)
    return next((m for m in names if m in history.columns and history[m].notna().any()), None)


@styled
def sim_time_figure(history: pd.DataFrame, metric: str, target: Any = None, title: str = "") -> Any:
    """``metric`` of each round against the simulated time at its end (hours past 2 h, else seconds),
    with the target's value and the time it was first reached, when given."""
    t = history["sim_time_s"].to_numpy(float)
    hours = t.size and t.max() > 7200
    x = t / 3600 if hours else t
    y = pd.to_numeric(history[metric], errors="coerce").to_numpy(float)
    fig = new_figure((5.0, 3.4))
    ax = fig.add_subplot()
    keep = np.isfinite(y)
    ax.plot(x[keep], y[keep], marker="o", markersize=3)
    ax.set_xlabel("simulated time (h)" if hours else "simulated time (s)")
    ax.set_ylabel(metric)
    if target is not None and target.metric == metric:
        ax.axhline(target.value, color="0.4", linestyle="--", linewidth=1, label=f"target {target.value:g}")
        ax.legend(loc="best")
    ax.set_title(title or f"{metric} on the simulated clock")
    return fig


def sim_time(history: pd.DataFrame, path: str | Path, metric: str, target: Any = None, title: str = "") -> Path:
    """Save :func:`sim_time_figure` as PNG; returns the path."""
    return save_figure(sim_time_figure(history, metric, target, title), path)
