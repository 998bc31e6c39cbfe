"""Every figure fedray draws has labelled axes, the shared style and a legible layout.

Each figure type is drawn from small synthetic inputs; the Figure objects are
inspected with matplotlib (no run, no Ray).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch
from matplotlib.text import Text

from fedray.analysis.kselect import KSelection, k_selection_figure, plot_k_selection
from fedray.analysis.sweep import plot_sweep, sweep_figure
from fedray.plots import cfl as plots_cfl
from fedray.plots import style as plots


# --- synthetic inputs ----------------------------------------------------------------
def _history(n: int = 12, supervised: bool = False) -> pd.DataFrame:
    r = np.arange(n)
    h = pd.DataFrame({"round": r, "phase": ["init"] + ["train"] * (n - 1), "clients_sampled": 10,
                      "clients_answered": 10, "bytes_down": 100, "bytes_up": 100, "wall_s": 0.01})
    if supervised:
        h["train_loss"] = 2.0 / (1 + r)
        h["test_loss"] = 2.2 / (1 + r)
        h["accuracy"] = np.where(r % 3 == 2, 0.5 + r / (3 * n), np.nan)  # evaluated every third round
        h["ari"] = np.where(r % 3 == 2, r / n, np.nan)
        h["nmi"] = np.where(r % 3 == 2, 0.9 * r / n, np.nan)
        h["n_clusters"] = np.minimum(1 + r, 4).astype(float)
    else:
        h["center_shift"] = np.r_[np.nan, 10.0 ** -np.arange(n - 1)]
        h["objective"] = np.r_[np.nan, 100 + 50 * (np.arange(n - 1) % 2)]  # sampled clients: it jumps
    return h


def _kselection(local: int = 2) -> KSelection:
    k = np.arange(2, 7)
    t = pd.DataFrame({"k": k, "federated": (k - 4.0) ** 2 + 0.5, "central": (k - 4.0) ** 2 + 0.4})
    for i in range(local):
        t[f"local:{i}"] = (k - 3.0 - i) ** 2 + 0.6
    return KSelection(t, {"federated": 4, "central": 4}, "min", "fuzzy-db", "federated-fcm")


def _sweep_table() -> pd.DataFrame:
    rows = []
    for backend in ("local", "ray"):
        for n in (10, 100, 1000):
            rows.append({"n_clients": n, "runtime.backend": backend, "round_s": 0.001 * n, "startup_s": 0.5,
                         "peak_mem_mb": 200 + n / 10, "bytes_down": 1000 * n, "bytes_up": 1000 * n, "rounds": 5,
                         "error": ""})
    return pd.DataFrame(rows)


def _clients(n: int, n_groups: int, n_found: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n_groups, n)
    found = np.arange(n) % n_found
    return found, groups, rng.integers(20, 400, n)


def _figures() -> dict[str, Figure]:
    """One figure of every type fedray draws."""
    c2 = np.array([[0.0, 0.0], [3.0, 3.0]])
    H, xe, ye = np.histogram2d(np.r_[np.zeros(50), 3 * np.ones(50)], np.r_[np.zeros(50), 3 * np.ones(50)], bins=8)
    H1, e1 = np.histogram(np.r_[np.zeros(50), 3 * np.ones(50)], bins=10)
    a, g, s = _clients(20, 4, 5)
    curves = {f"federation {i}": {"ifca": _history(8, True), "runs": np.array([[0.1, 0.5, 0.6], [0.2, 0.6, 0.7]])}
              for i in range(4)}
    return {
        "convergence (clustering)": plots.convergence_figure(_history(), title="kmeans"),
        "convergence (supervised)": plots.convergence_figure(_history(supervised=True), title="ifca"),
        "centres 2-D": plots.centers_2d_figure(c2, density=(H, xe, ye), central=c2 + 0.1),
        "centres 1-D": plots.centers_1d_figure(c2[:, :1], density=(H1, e1), central=c2[:, :1] + 0.1),
        "clients": plots_cfl.client_clusters_figure(a, g, s),
        "accuracy over rounds": plots_cfl.accuracy_over_rounds_figure(curves),
        "k selection": k_selection_figure(_kselection()),
        "sweep": sweep_figure(_sweep_table(), grid_keys=["federation.n_clients", "runtime.backend"]),
    }


def _data_axes(fig: Figure) -> list:
    """Axes that show data on visible axes (the clients figure draws its own boxes, axes off)."""
    return [ax for ax in fig.axes if ax.axison and ax.has_data()]


def _texts(fig: Figure) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


# --- every figure type ---------------------------------------------------------------
@pytest.mark.parametrize("name", list(_figures()))
def test_every_axes_with_data_has_x_and_y_labels(name):
    """Each axis is labelled (today convergence.png has no y-axis label on any panel)."""
    fig = _figures()[name]
    axes = _data_axes(fig)
    if name != "clients":
        assert axes, f"{name}: no axes with data"
    for ax in axes:
        assert ax.get_xlabel().strip(), f"{name}: panel {ax.get_title()!r} has no x label"
        assert ax.get_ylabel().strip(), f"{name}: panel {ax.get_title()!r} has no y label"


@pytest.mark.parametrize("name", list(_figures()))
def test_every_figure_uses_the_shared_style(name):
    """Fonts and grid come from plots.STYLE in every module (today each plot has its own sizes)."""
    fig = _figures()[name]
    for ax in _data_axes(fig):
        sizes = {t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()}
        assert sizes <= {plots.STYLE["xtick.labelsize"]}, f"{name}: tick label sizes {sizes}"
        assert ax.xaxis.label.get_fontsize() == plots.STYLE["axes.labelsize"]
    assert min(t.get_fontsize() for t in _texts(fig)) >= plots.MIN_FONT_PT


def test_drawing_leaves_pyplot_and_rc_params_alone():
    """Figures are built without pyplot (nothing left open, no backend switched) and the style is not global."""
    code = ("import matplotlib; b = matplotlib.get_backend(); rc = dict(matplotlib.rcParams)\n"
            "import tests.plots.test_plots as t; t._figures()\n"
            "import matplotlib.pyplot as plt\n"
            "assert plt.get_fignums() == [], plt.get_fignums()\n"
            "assert matplotlib.rcParams['font.size'] == rc['font.size'] and matplotlib.get_backend() == b\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_saved_pngs_are_written(tmp_path):
    """The saving functions keep their signatures and write a PNG at plots.DPI."""
    c2 = np.array([[0.0, 0.0], [1.0, 1.0]])
    paths = [plots.convergence(_history(), tmp_path / "convergence.png"),
             plots.centers_2d(c2, tmp_path / "centers2.png"),
             plots.centers_1d(c2[:, :1], tmp_path / "centers1.png"),
             plots_cfl.client_clusters(*_clients(6, 2, 2), tmp_path / "sub" / "clients.png"),
             plots_cfl.accuracy_over_rounds({"ifca": _history(5, True)}, tmp_path / "acc.png"),
             plot_k_selection(_kselection(), tmp_path / "k.png"),
             plot_sweep(_sweep_table(), tmp_path / "sweep.png", grid_keys=["runtime.backend"])]
    for p in paths:
        assert p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 5_000, p


# --- convergence ---------------------------------------------------------------------
def test_convergence_plots_ari_nmi_and_accuracy_where_recorded():
    """ARI/NMI share a panel, training and test loss another, accuracy one in %, when recorded.

    Today ARI is not drawn, nor ``train_loss``/``test_loss`` (the columns supervised methods record).
    """
    fig = plots.convergence_figure(_history(supervised=True))
    by_label = {ax.get_ylabel(): ax for ax in _data_axes(fig)}
    assert "ARI / NMI" in by_label and "mean client accuracy (%)" in by_label
    assert sorted(line.get_label() for line in by_label["ARI / NMI"].get_lines()) == ["ARI", "NMI"]
    assert [line.get_label() for line in by_label["loss"].get_lines()] == ["training", "test"]
    acc = by_label["mean client accuracy (%)"].get_lines()[0].get_ydata()
    assert len(acc) == 4 and 50 <= acc.min() and acc.max() <= 100  # evaluated rounds only, in %
    without = plots.convergence_figure(_history())
    assert {ax.get_ylabel() for ax in _data_axes(without)} == {"centre shift (feature units)", "objective"}


def test_convergence_panels_form_a_grid():
    """Five panels sit in rows of at most three (today: one row of 21 x 3.4 inches)."""
    fig = plots.convergence_figure(_history(supervised=True))
    assert len(_data_axes(fig)) == 4  # loss, accuracy, ARI/NMI, clusters
    w, h = fig.get_size_inches()
    assert w / h <= 2.0
    rows = {round(ax.get_position().y0, 2) for ax in _data_axes(fig)}
    assert len(rows) == 2


@pytest.mark.parametrize("fraction, sampled", [(0.3, True), (1.0, False)])
def test_objective_says_sampled_clients_when_fraction_below_one(fraction, sampled):
    """With federation.fraction < 1 the per-round objective covers only the sampled clients, and says so."""
    fig = plots.convergence_figure(_history(), fraction=fraction)
    labels = [ax.get_ylabel() for ax in _data_axes(fig)]
    assert ("objective (sampled clients)" in labels) is sampled
    assert ("objective" in labels) is not sampled


def test_an_objective_sampled_column_is_labelled_sampled_clients_by_itself():
    """Histories of runs with a partial cohort name the column objective_sampled; its panel says so at
    any fraction passed (the column name alone decides), and draws the same values."""
    h = _history().rename(columns={"objective": "objective_sampled"})
    by_label = {ax.get_ylabel(): ax for ax in _data_axes(plots.convergence_figure(h, fraction=1.0))}
    assert "objective (sampled clients)" in by_label and "objective" not in by_label
    np.testing.assert_array_equal(by_label["objective (sampled clients)"].get_lines()[0].get_ydata(),
                                  h["objective_sampled"].dropna().to_numpy())


def test_result_save_passes_the_fraction(tmp_path, monkeypatch):
    """Result.save draws convergence.png with the run's own federation.fraction."""
    import fedray

    seen: dict = {}
    draw = plots.convergence

    def spy(history, path, title="", fraction=1.0):
        seen["fraction"] = fraction
        return draw(history, path, title=title, fraction=fraction)

    monkeypatch.setattr(plots, "convergence", spy)
    res = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 2, "max_rounds": 3}},
                     data={"dataset": "blobs", "options": {"points_per_client": 30, "n_centers": 2}},
                     federation={"n_clients": 6, "fraction": 0.5, "rounds": 3},
                     runtime={"backend": "local", "progress": False}, output=str(tmp_path / "o"))
    assert seen == {"fraction": 0.5}
    assert (res.output_dir / "plots" / "convergence.png").stat().st_size > 5_000


# --- clients.png ---------------------------------------------------------------------
@pytest.mark.parametrize("n, n_groups, n_found", [(4, 2, 2), (20, 4, 20), (200, 4, 20), (200, 10, 1), (200, 20, 200)])
def test_clients_figure_is_legible_at_any_count(tmp_path, n, n_groups, n_found):
    """A sane aspect ratio and no text under 6 pt for 4 to 200 clients (today 20 clusters give a 1980x297 strip)."""
    a, g, s = _clients(n, n_groups, n_found)
    path = plots_cfl.client_clusters(a, g, s, tmp_path / "clients.png")
    h, w = matplotlib.image.imread(path).shape[:2]
    assert 0.5 <= w / h <= 3, (w, h)
    fig = plots_cfl.client_clusters_figure(a, g, s)
    assert min(t.get_fontsize() for t in _texts(fig)) >= 6
    assert max(fig.get_size_inches()) <= 16


def test_clients_figure_has_one_box_per_found_cluster_and_a_legend_of_true_groups():
    """Boxes are the found clusters (unknown: its own box), circles the clients, the legend the true groups."""
    a, g, s = _clients(20, 3, 4)
    a[0] = -1
    fig = plots_cfl.client_clusters_figure(a, g, s, group_names=["A", "B", "C"])
    ax = fig.axes[0]
    assert sum(isinstance(p, FancyBboxPatch) for p in ax.patches) == 5
    assert len(ax.collections[0].get_paths()) == 20
    texts = {t.get_text() for t in ax.texts}
    assert {"cluster 0", "cluster 1", "cluster 2", "cluster 3", "no cluster"} == texts
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["A", "B", "C"]
