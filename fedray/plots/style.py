"""Plots saved as PNG: one figure style for every plot of fedray.

Every plotting function of fedray (this module, :mod:`fedray.plots.cfl`, and the
plots of :mod:`fedray.analysis.kselect` and :mod:`fedray.analysis.sweep`) draws inside
:data:`STYLE` (font sizes, grid, colour cycle; applied by :func:`styled`), builds
its figure with :func:`new_figure` and writes it with :func:`save_figure` at
:data:`DPI`. Each plot comes in two parts: ``*_figure`` returns the
:class:`matplotlib.figure.Figure` (to show in a notebook, restyle or test), and
the plain name saves it as PNG and returns the path.

matplotlib only, headless: figures are built without pyplot, so no backend is
chosen or changed and no figure is left open; no torch.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Resolution of every saved PNG (dots per inch).
DPI = 150
#: Okabe–Ito colours: distinguishable with colour-vision deficiency and in greyscale print.
COLORS: tuple[str, ...] = ("#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
#: Colour of the federated result and of the central baseline in every plot.
FEDERATED, CENTRAL = "#D55E00", "#0072B2"
#: Smallest font in any figure (points).
MIN_FONT_PT = 7.0

#: matplotlib settings shared by all plots (applied with :func:`styled`).
STYLE: dict[str, Any] = {
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 9.0,
    "xtick.labelsize": 8.0,
    "ytick.labelsize": 8.0,
    "legend.fontsize": 8.0,
    "legend.title_fontsize": 8.0,
    "figure.titlesize": 11.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.6,
    "lines.markersize": 4.0,
    "legend.frameon": False,
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
}

F = TypeVar("F", bound=Callable[..., Any])


def _style() -> dict[str, Any]:
    from cycler import cycler

    return {**STYLE, "axes.prop_cycle": cycler(color=list(COLORS))}


def styled(fn: F) -> F:
    """Decorator: run ``fn`` with :data:`STYLE` in force (a ``matplotlib.rc_context``).

    Artists take their fonts, grid and colours from the settings in force when
    they are created, so the whole drawing function runs inside the style.
    """
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context(_style()):
            return fn(*args, **kwargs)

    return cast(F, wrapper)


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure with constrained layout, not registered with pyplot (nothing to close)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG at :data:`DPI` (creating the folder); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=DPI)
    return p


def panel_grid(fig: Figure, n: int, max_cols: int = 3) -> list[Axes]:
    """``n`` axes in rows of at most ``max_cols`` (4 panels: 2 x 2); extra cells are left empty."""
    n = max(1, n)
    cols = n if n <= max_cols else (2 if n == 4 else max_cols)
    rows = math.ceil(n / cols)
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.remove()
    return axes[:n]


def grid_size(n: int, max_cols: int = 3, panel: tuple[float, float] = (4.0, 3.0)) -> tuple[float, float]:
    """Figure size (inches) of :func:`panel_grid` for ``n`` panels of size ``panel``."""
    n = max(1, n)
    cols = n if n <= max_cols else (2 if n == 4 else max_cols)
    return panel[0] * cols, panel[1] * math.ceil(n / cols) + 0.3


def integer_rounds(ax: Axes) -> None:
    """Round numbers on the x axis: integer ticks, labelled ``round``."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")


# --- convergence ----------------------------------------------------------------
#: Panels of ``convergence.png``: (history columns, panel title, y-axis label, factor).
#: A panel is drawn when one of its columns is recorded in some round.
CONVERGENCE_PANELS: tuple[tuple[tuple[str, ...], str, str, float], ...] = (
    (("center_shift",), "centre shift", "centre shift (feature units)", 1.0),
    (("objective", "objective_sampled"), "objective", "objective", 1.0),
    (("train_loss", "test_loss", "loss"), "loss", "loss", 1.0),
    (("accuracy",), "accuracy", "mean client accuracy (%)", 100.0),
    (("ari", "nmi"), "agreement with the true groups", "ARI / NMI", 1.0),
    (("n_clusters",), "clusters found", "clusters", 1.0),
)


_LEGEND = {"ari": "ARI", "nmi": "NMI", "train_loss": "training", "test_loss": "test", "loss": "loss",
           "objective": "all clients", "objective_sampled": "sampled clients"}


def _recorded(history: pd.DataFrame, col: str) -> bool:
    return col in history.columns and bool(pd.to_numeric(history[col], errors="coerce").notna().any())


@styled
def convergence_figure(history: pd.DataFrame, title: str = "", fraction: float = 1.0) -> Figure:
    """Per-round metrics of a run, one panel each, in a grid of at most three columns.

    Parameters
    ----------
    history : DataFrame, one row a round
        ``Result.history``: ``round`` and any of ``center_shift``, ``objective``
        (or ``objective_sampled``, the name the round loop gives it when a round samples
        fewer than all clients), ``train_loss``, ``test_loss`` and ``loss`` (one panel),
        ``accuracy`` (a fraction; drawn in %), ``ari`` and ``nmi`` (one panel),
        ``n_clusters``. Columns never recorded are left out.
    title : str
        Figure title (the algorithm's name).
    fraction : float
        ``federation.fraction``, for histories that name the objective ``objective``
        whatever the cohort: below 1 it is read as a sum over the sampled clients.
        An ``objective_sampled`` column says so by itself; either way the panel
        says "sampled clients".

    Returns
    -------
    Figure
    """
    panels = [p for p in CONVERGENCE_PANELS if any(_recorded(history, c) for c in p[0])]
    fig = new_figure(grid_size(len(panels)))
    axes = panel_grid(fig, len(panels))
    if not panels:
        integer_rounds(axes[0])
        axes[0].set_ylabel("value")
        axes[0].text(0.5, 0.5, "no per-round metrics recorded", ha="center", va="center", transform=axes[0].transAxes)
    for ax, (cols, name, ylabel, factor) in zip(axes, panels):
        drawn = [c for c in cols if _recorded(history, c)]
        for c in drawn:
            y = pd.to_numeric(history[c], errors="coerce")
            keep = y.notna().to_numpy()
            ax.plot(history["round"].to_numpy()[keep], y.to_numpy(float)[keep] * factor, marker="o",
                    label=_LEGEND.get(c, c) if len(cols) > 1 else None)
        if cols[0] == "objective" and (fraction < 1 or drawn == ["objective_sampled"]):
            ylabel = "objective (sampled clients)"
            name = "objective over the sampled clients" + (f" (fraction {fraction:g})" if fraction < 1 else "")
        if cols[0] in ("center_shift", "objective"):
            y = pd.to_numeric(history[drawn[0]], errors="coerce").dropna()
            if len(y) and (y > 0).all() and y.max() > 20 * y.min():
                ax.set_yscale("log")
        if cols[0] == "n_clusters":
            from matplotlib.ticker import MaxNLocator

            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            top = float(pd.to_numeric(history["n_clusters"], errors="coerce").max())
            ax.set_ylim(0, top + max(1.0, 0.1 * top))
        if len(drawn) > 1:
            ax.legend(loc="best")
        integer_rounds(ax)
        ax.set_ylabel(ylabel)
        ax.set_title(name)
    if title:
        fig.suptitle(title)
    return fig


def convergence(history: pd.DataFrame, path: str | Path, title: str = "", fraction: float = 1.0) -> Path:
    """Save :func:`convergence_figure` as PNG; returns the path."""
    return save_figure(convergence_figure(history, title=title, fraction=fraction), path)


# --- centres ----------------------------------------------------------------------
def _finish(fig: Figure, ax: Axes, title: str) -> Figure:
    ax.legend(loc="best")
    ax.set_title(title)
    return fig


@styled
def centers_2d_figure(centers: np.ndarray, density: Any = None, central: np.ndarray | None = None,
                      title: str = "federated centres over the data density",
                      axis_labels: tuple[str, str] = ("x0", "x1")) -> Figure:
    """Centres over the summed 2-D histogram of all clients (no rows needed).

    Parameters
    ----------
    centers : ndarray, shape (k, 2)
        Federated centres (projected where the data have more than two features).
    density : tuple (H, x_edges, y_edges) or None
        Summed 2-D histogram of all clients, ``H`` of shape (nx, ny).
    central : ndarray, shape (k, 2), or None
        Centres of the central baseline.
    axis_labels : the two axes' names (features or principal components).
    """
    from matplotlib.patches import Patch

    fig = new_figure((5.5, 5.0))
    ax = fig.subplots()
    ax.set_xlabel(axis_labels[0])
    ax.set_ylabel(axis_labels[1])
    ax.grid(False)
    if density is not None:
        H, xe, ye = density
        ax.imshow(np.log1p(H.T), origin="lower", extent=(xe[0], xe[-1], ye[0], ye[-1]), aspect="auto", cmap="Greys")
        ax.add_artist(ax.legend(handles=[Patch(color="0.55", label="all clients' points (log density)")],
                                loc="lower right"))
    C = np.asarray(centers)
    ax.scatter(C[:, 0], C[:, 1], c=FEDERATED, marker="X", s=90, label="federated", edgecolors="white")
    if central is not None:
        ax.scatter(central[:, 0], central[:, 1], facecolors="none", edgecolors=CENTRAL, s=160, label="central")
    return _finish(fig, ax, title)


def centers_2d(
    centers: np.ndarray,
    path: str | Path,
    density: Any = None,
    central: np.ndarray | None = None,
    title: str = "federated centres over the data density",
    axis_labels: tuple[str, str] = ("x0", "x1"),
) -> Path:
    """Save :func:`centers_2d_figure` as PNG; returns the path."""
    return save_figure(centers_2d_figure(centers, density=density, central=central, title=title,
                                         axis_labels=axis_labels), path)


@styled
def centers_1d_figure(centers: np.ndarray, density: Any = None, central: np.ndarray | None = None,
                      title: str = "federated centres over the data density", axis_label: str = "x0") -> Figure:
    """Centres of one-feature data as vertical lines over the summed histogram of all clients.

    Parameters
    ----------
    centers : ndarray, shape (k, 1)
    density : tuple (H, edges) or None
        Summed histogram of all clients, ``H`` of shape (n_bins,), ``edges`` (n_bins + 1,).
    central : ndarray, shape (k, 1), or None
    axis_label : the feature's name.
    """
    fig = new_figure((6.5, 3.6))
    ax = fig.subplots()
    ax.set_xlabel(axis_label)
    ax.set_ylabel("points per bin")
    if density is not None:
        H, edges = density
        ax.stairs(H, edges, fill=True, color="0.8", label="all clients")
    for i, c in enumerate(np.asarray(centers)[:, 0]):
        ax.axvline(c, color=FEDERATED, lw=2, label="federated" if i == 0 else None)
    if central is not None:
        for i, c in enumerate(np.asarray(central)[:, 0]):
            ax.axvline(c, color=CENTRAL, ls="--", lw=1.5, label="central" if i == 0 else None)
    return _finish(fig, ax, title)


def centers_1d(centers: np.ndarray, path: str | Path, density: Any = None, central: np.ndarray | None = None,
               title: str = "federated centres over the data density", axis_label: str = "x0") -> Path:
    """Save :func:`centers_1d_figure` as PNG; returns the path."""
    return save_figure(centers_1d_figure(centers, density=density, central=central, title=title,
                                         axis_label=axis_label), path)


def legend_columns(labels: Sequence[str], width_in: float, fontsize: float = 8.0) -> int:
    """How many legend entries of ``labels`` fit side by side in ``width_in`` inches."""
    # text, then handle (2 em), pad (0.8 em) and column spacing (2 em), with a margin
    widest = (max((len(s) for s in labels), default=1) * 0.6 + 4.8) * fontsize / 72 + 0.1
    return max(1, min(len(labels), int(width_in // widest)))
