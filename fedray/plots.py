"""Plots saved as PNG (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, ax: Any, path: str | Path, title: str) -> Path:
    """Legend, title and a tight layout; writes the PNG and closes the figure."""
    ax.legend(loc="best")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return Path(path)


def convergence(history: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Centre shift and objective per round (log scale where positive)."""
    plt = _plt()
    metrics = [c for c in ("center_shift", "objective", "accuracy", "loss", "n_clusters") if c in history.columns
               and history[c].notna().any()]
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(4.2 * max(1, len(metrics)), 3.4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        h = history[history[m].notna()]
        ax.plot(h["round"], h[m], marker="o", ms=3)
        if m in ("center_shift", "objective") and (h[m] > 0).all() and h[m].max() > 20 * h[m].min():
            ax.set_yscale("log")
        ax.set_xlabel("round")
        ax.set_title(m.replace("_", " "))
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def centers_2d(centers: np.ndarray, path: str | Path, density: Any = None, central: np.ndarray | None = None,
               title: str = "federated centres over the data density", axis_labels: tuple[str, str] = ("x0", "x1")) -> Path:
    """Centres over the summed 2-D histogram of all clients (no rows needed)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.set_xlabel(axis_labels[0])
    ax.set_ylabel(axis_labels[1])
    if density is not None:
        H, xe, ye = density
        ax.imshow(np.log1p(H.T), origin="lower", extent=(xe[0], xe[-1], ye[0], ye[-1]), aspect="auto", cmap="Greys")
    ax.scatter(centers[:, 0], centers[:, 1], c="tab:red", marker="X", s=90, label="federated", edgecolors="white")
    if central is not None:
        ax.scatter(central[:, 0], central[:, 1], facecolors="none", edgecolors="tab:blue", s=160, label="central")
    return _save(fig, ax, path, title)


def centers_1d(centers: np.ndarray, path: str | Path, density: Any = None, central: np.ndarray | None = None,
               title: str = "federated centres over the data density", axis_label: str = "x0") -> Path:
    """Centres of one-feature data as vertical lines over the summed histogram of all clients."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    ax.set_xlabel(axis_label)
    ax.set_ylabel("points")
    if density is not None:
        H, edges = density
        ax.stairs(H, edges, fill=True, color="0.8", label="all clients")
    for i, c in enumerate(np.asarray(centers)[:, 0]):
        ax.axvline(c, color="tab:red", lw=2, label="federated" if i == 0 else None)
    if central is not None:
        for i, c in enumerate(np.asarray(central)[:, 0]):
            ax.axvline(c, color="tab:blue", ls="--", lw=1.5, label="central" if i == 0 else None)
    return _save(fig, ax, path, title)
