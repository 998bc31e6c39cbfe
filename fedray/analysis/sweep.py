"""Sweeps: run one experiment over a grid of configuration values and measure each run.

``fedray sweep CONFIG --grid federation.n_clients=10,100,1000 --grid runtime.backend=local,ray``
runs the Cartesian product of the grid, reusing one Ray instance between the runs
that need it, and writes one Parquet table (one row a run) plus a plot:

=================  ==========================================================
column             meaning
=================  ==========================================================
``<grid keys>``    the value of each grid key in that run
``algorithm``, ``dataset``, ``n_clients``, ``backend``, ``clients_per_actor``
``rounds``         rounds the run took (initialisation rounds included)
``round_s``        mean seconds of a training round (initialisation excluded)
``round_s_median`` median of the same
``init_s``         seconds of the initialisation rounds (0 when there are none)
``startup_s``      seconds to build the clients (actors, shards, data checks)
``ray_init_s``     seconds to start Ray, on the first run that started it (else 0)
``peak_mem_mb``    peak memory of all processes (driver, Ray's node processes and
                   workers; the driver alone for a local run), as the sum of
                   their proportional set sizes (PSS): a shared page counts
                   once, split between its users
``peak_rss_mb``    the same as a sum of resident set sizes (counts shared pages
                   once per process: an upper bound)
``bytes_down``, ``bytes_up``  bytes sent to and received from clients, all rounds
``actors``         client actors (ray runtime)
``wall_s``         seconds of the whole run (rounds and evaluation)
``eval_s``         seconds of the final evaluation passes over every client
``objective``      final objective; ``error`` — why a run failed (else empty)
=================  ==========================================================

Memory is sampled every ``interval`` seconds over the process tree of the driver
(an embedded Ray instance is started by the driver, so its node processes and
workers are its descendants) and over the node processes of a Ray instance the
driver connected to on this machine.
"""
from __future__ import annotations

import argparse
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import yaml

from fedray.api.config import ExperimentConfig, make_config
from fedray.api.outputs import prepare, record, release
from fedray.api.overrides import parse_override
from fedray.api.progress import Activity, clock
from fedray.api.session import Session
from fedray.api.settings import ship_settings
from fedray.core.errors import ConfigError, FedrayError
from fedray.plots.style import grid_size, new_figure, panel_grid, save_figure, styled
from fedray.runtime.ray_executor import ensure_ray

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

_RAY_NODE_NAMES = ("raylet", "gcs_server")


# --- memory of all processes ------------------------------------------------
def _ray_node_roots() -> list[Any]:
    """Node processes of the Ray instance this driver is connected to, if they run on this machine."""
    import psutil

    try:
        import ray

        if not ray.is_initialized():
            return []
        session_dir = ray._private.worker._global_node.get_session_dir_path()  # noqa: SLF001
    except Exception:  # noqa: BLE001 - no Ray, or a client connection
        return []
    roots = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if p.info["name"] in _RAY_NODE_NAMES and any(session_dir in a for a in (p.info["cmdline"] or ())):
                roots.append(p)
        except psutil.Error:
            continue
    return roots


def process_tree(include_ray: bool = True, pid: int | None = None) -> list[Any]:
    """A process and its descendants (default: this process, with the local Ray node processes and theirs).

    With ``include_ray=False`` and no ``pid``: this process only.
    """
    import psutil

    me = psutil.Process(pid or os.getpid())
    procs = {me.pid: me}
    if not include_ray and pid is None:
        return [me]
    roots = [me] + (_ray_node_roots() if include_ray and pid is None else [])
    for root in roots:
        procs.setdefault(root.pid, root)
        try:
            for ch in root.children(recursive=True):
                procs.setdefault(ch.pid, ch)
        except psutil.Error:
            continue
    return list(procs.values())


def memory_of(procs: Iterable[Any]) -> tuple[float, float, int]:
    """(sum of PSS, sum of RSS, number of processes read) in MB. PSS falls back to RSS where unreadable."""
    import psutil

    pss = rss = 0.0
    n = 0
    for p in procs:
        try:
            info = p.memory_full_info()
            pss += getattr(info, "pss", info.rss)
            rss += info.rss
            n += 1
        except psutil.AccessDenied:
            try:
                r = p.memory_info().rss
                pss += r
                rss += r
                n += 1
            except psutil.Error:
                pass
        except psutil.Error:
            pass
    return pss / 2**20, rss / 2**20, n


#: The largest share of one core :class:`PeakMemory`'s sampler takes (see its ``interval``).
MAX_SHARE = 0.1


class PeakMemory:
    """Context manager sampling the memory of all processes of a run in a background thread.

    Parameters
    ----------
    interval : float
        Seconds between samples. The process list is refreshed at every sample,
        so actors started during the run are counted. Reading a process's PSS
        walks its page tables (about 2 ms for a 100 MiB actor), so with hundreds
        of processes one sample takes longer than ``interval``; the sampler then
        waits ``1 / MAX_SHARE - 1`` times as long as its last sample took, so that
        it takes at most ``MAX_SHARE`` of one core from the run it measures.
    include_ray : bool
        Count Ray's processes (False: this process only, e.g. for a local run
        while an idle Ray instance kept for later runs is up).
    pid : int, optional
        Measure this process and its descendants instead.

    Attributes
    ----------
    peak_pss_mb, peak_rss_mb : float
        Largest sums seen (MB).
    max_processes : int
    """

    def __init__(self, interval: float = 0.25, include_ray: bool = True, pid: int | None = None) -> None:
        self.interval = float(interval)
        self.include_ray = bool(include_ray)
        self.pid = pid
        self.peak_pss_mb = 0.0
        self.peak_rss_mb = 0.0
        self.max_processes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        pss, rss, n = memory_of(process_tree(self.include_ray, self.pid))
        self.peak_pss_mb = max(self.peak_pss_mb, pss)
        self.peak_rss_mb = max(self.peak_rss_mb, rss)
        self.max_processes = max(self.max_processes, n)

    def _loop(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            t0 = time.perf_counter()
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sampler must never break the run
                log.debug("memory sample failed", exc_info=True)
            wait = max(self.interval, (time.perf_counter() - t0) * (1 / MAX_SHARE - 1))

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="fedray-peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


# --- one measured run ---------------------------------------------------------
def measure_run(config: ExperimentConfig, *, memory_interval: float = 0.25) -> dict[str, Any]:
    """Run ``config`` once and return one row of measurements (see the module docstring).

    Ray, when the run needs it and none is running, is started here and left
    running (its start-up time is ``ray_init_s``); the caller shuts it down.
    """

    cfg = config
    row: dict[str, Any] = {"algorithm": cfg.algorithm.name, "dataset": str(cfg.data.dataset),
                           "n_clients": cfg.federation.n_clients, "backend": cfg.runtime.backend,
                           "clients_per_actor": str(cfg.runtime.clients_per_actor), "fraction": cfg.federation.fraction}
    with PeakMemory(memory_interval, include_ray=cfg.runtime.backend == "ray") as mem:
        t0 = time.perf_counter()
        ray_init_s = 0.0
        if cfg.runtime.backend == "ray":
            with Activity("start-up", cfg.runtime.progress) as act:
                act.stage("starting Ray" if not cfg.runtime.address else f"connecting to Ray at {cfg.runtime.address}")
                if ensure_ray(ship=ship_settings(cfg)):
                    ray_init_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        with Session(cfg) as session:
            startup_s = time.perf_counter() - t1
            result = session.run(output=False, progress=False)
            actors = session.executor.n_actors
        wall_s = time.perf_counter() - t0
    h = result.history
    train = h[h["phase"] != "init"] if "phase" in h else h
    init = h[h["phase"] == "init"] if "phase" in h else h.iloc[0:0]
    steady = train.iloc[1:] if len(train) > 1 else train
    row.update({
        "rounds": int(len(h)),
        # Steady state: the first training round also pays one-off costs (imports and
        # caches in fresh workers), reported apart as ``first_round_s``.
        "round_s": float(steady["wall_s"].mean()) if len(steady) else float("nan"),
        "round_s_median": float(train["wall_s"].median()) if len(train) else float("nan"),
        "first_round_s": float(train["wall_s"].iloc[0]) if len(train) else float("nan"),
        "init_s": float(init["wall_s"].sum()) if len(init) else 0.0,
        "eval_s": float(result.summary.get("evaluation_s", float("nan"))),
        "startup_s": float(startup_s),
        "ray_init_s": float(ray_init_s),
        "peak_mem_mb": float(mem.peak_pss_mb),
        "peak_rss_mb": float(mem.peak_rss_mb),
        "processes": int(mem.max_processes),
        "bytes_down": int(h["bytes_down"].sum()) if len(h) else 0,
        "bytes_up": int(h["bytes_up"].sum()) if len(h) else 0,
        "actors": int(actors),
        "wall_s": float(wall_s),
        "objective": float(result.summary["final"].get("objective", float("nan"))),
        "error": "",
    })
    return row


# --- grids --------------------------------------------------------------------
def parse_grid(items: Iterable[str]) -> dict[str, list[Any]]:
    """``["federation.n_clients=10,100", "runtime.backend=local,ray"]`` -> ``{key: [values]}`` (values parsed
    as YAML)."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--grid {item!r}: expected KEY=V1,V2,..., e.g. federation.n_clients=10,100,1000")
        key, _, values = item.partition("=")
        key = key.strip()
        vals = [parse_override(f"{key}={v.strip()}")[1] for v in values.split(",") if v.strip() != ""]
        if not vals:
            raise ConfigError(f"--grid {item!r}: no values for {key}")
        if key in grid:
            raise ConfigError(f"--grid: {key} given twice")
        grid[key] = vals
    return grid


def expand_grid(grid: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """All combinations of the grid, the last key varying fastest."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def sweep(config: Any = None, grid: Mapping[str, list[Any]] | None = None, *, out: str | Path | None = None,
          overrides: list[str] | dict[str, Any] | None = None, repeats: int = 1, plot: bool = True,
          stop_on_error: bool = False, memory_interval: float = 0.25) -> pd.DataFrame:
    """Run ``config`` for every combination of ``grid`` and return one row per run.

    Parameters
    ----------
    config : ExperimentConfig, mapping, path to a YAML file, or None
    grid : mapping of dotted keys to lists of values, e.g. ``{"federation.n_clients": [10, 100]}``
    out : folder for ``sweep.parquet``, ``sweep.csv`` and ``sweep.png`` (nothing written if None)
    overrides : applied to ``config`` before the grid
    repeats : runs per combination (column ``repeat``)
    plot : write ``sweep.png`` when ``out`` is given
    stop_on_error : raise on the first failed run instead of recording its error

    Returns
    -------
    DataFrame
        One row a run; columns as in the module docstring.

    Notes
    -----
    Every combination is validated before anything runs. Ray is started once,
    by the first run that needs it, and reused; it is restarted only when
    ``runtime.address`` or ``runtime.num_cpus`` changes between runs.
    """
    grid = dict(grid or {})
    base = make_config(config, overrides=overrides)
    combos = expand_grid(grid) if grid else [{}]
    cfgs = [make_config(base, overrides={k: v for k, v in combo.items()}) for combo in combos]
    if out is not None:  # claimed before any run, as a run claims its folder (output.overwrite: replace ours)
        prepare(out, overwrite=base.output.overwrite)
    try:
        rows = _run_all(combos, cfgs, repeats, stop_on_error, memory_interval)
    finally:
        if out is not None:
            release(out)
    df = pd.DataFrame(rows)
    for key, values in grid.items():  # e.g. clients_per_actor = 1 and "auto": one type per Parquet column
        if key in df.columns and len({type(v) for v in values}) > 1:
            df[key] = df[key].astype(str)
    if out is not None:
        _write_sweep(df, Path(out), base, grid, plot)
    return df


def _run_all(combos: list[dict[str, Any]], cfgs: list[Any], repeats: int, stop_on_error: bool,
             memory_interval: float) -> list[dict[str, Any]]:
    """Run every configuration ``repeats`` times; one row a run (a failed run's row holds its error).

    Ray, when a run starts it, is reused by the next runs, restarted when ``runtime.address`` or
    ``runtime.num_cpus`` changes, and shut down at the end.
    """
    rows: list[dict[str, Any]] = []
    started_here = False
    ray_key: tuple[Any, Any] | None = None
    act = Activity("sweep", None)  # which run, with the elapsed seconds and an ETA
    total = len(cfgs) * int(repeats)
    try:
        for i, (combo, cfg) in enumerate(zip(combos, cfgs)):
            if cfg.runtime.backend == "ray":
                key = (cfg.runtime.address, cfg.runtime.num_cpus)
                if ray_key is not None and key != ray_key and started_here:
                    import ray

                    ray.shutdown()
                    started_here = False
                ray_key = key
            for rep in range(int(repeats)):
                log.info("sweep run %d/%d %s (repeat %d)", i + 1, len(cfgs), combo, rep)
                n = len(rows)
                eta = f", ETA {clock(act.elapsed / n * (total - n))}" if n else ""
                act.stage(f"run {n + 1} of {total} ({', '.join(f'{k}={v}' for k, v in combo.items())}){eta}",
                          f"run {n + 1}")
                try:
                    was_up = _ray_up()
                    row = measure_run(cfg, memory_interval=memory_interval)
                    started_here = started_here or (not was_up and _ray_up())
                except FedrayError as exc:
                    if stop_on_error:
                        raise
                    row = {"algorithm": cfg.algorithm.name, "n_clients": cfg.federation.n_clients,
                           "backend": cfg.runtime.backend, "error": f"{type(exc).__name__}: {exc}"}
                    log.warning("sweep run %s failed: %s", combo, exc)
                rows.append({**{k: _cell(v) for k, v in combo.items()}, "repeat": rep, **row})
    finally:
        act.close(f"{len(rows)} runs in {act.elapsed:.1f} s")
        if started_here:
            import ray

            ray.shutdown()
    return rows


def _write_sweep(df: pd.DataFrame, folder: Path, base: Any, grid: dict[str, list[Any]], plot: bool) -> None:
    """Write ``sweep.parquet``, ``sweep.csv``, ``grid.yaml`` and (``plot``) ``sweep.png`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    df.to_parquet(folder / "sweep.parquet", index=False)
    df.to_csv(folder / "sweep.csv", index=False)
    (folder / "grid.yaml").write_text(_grid_yaml(base, grid))
    if plot:
        plot_sweep(df, folder / "sweep.png", grid_keys=list(grid))
    record(folder, [folder / n for n in ("sweep.parquet", "sweep.csv", "grid.yaml", "sweep.png")
                    if (folder / n).is_file()])  # what --overwrite may delete later


def _ray_up() -> bool:
    try:
        import ray

        return bool(ray.is_initialized())
    except ImportError:  # pragma: no cover
        return False


def _cell(v: Any) -> Any:
    """A grid value as a Parquet-friendly cell."""
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)


def _grid_yaml(base: ExperimentConfig, grid: Mapping[str, list[Any]]) -> str:
    return yaml.safe_dump({"config": base.to_dict(), "grid": {k: [_cell(v) for v in vs] for k, vs in grid.items()}},
                          sort_keys=False)


# --- plot -----------------------------------------------------------------------
#: Panels of ``sweep.png``: (column, panel title, y-axis label, factor applied to the column).
SWEEP_PANELS: tuple[tuple[str, str, str, float], ...] = (
    ("round_s", "time per training round", "round time (s)", 1.0),
    ("startup_s", "start-up", "start-up time (s)", 1.0),
    ("peak_mem_mb", "peak memory, all processes", "peak memory (MB)", 1.0),
    ("bytes_per_round", "traffic per round", "bytes per round, down + up (MB)", 1e-6),
)


@styled
def sweep_figure(df: pd.DataFrame, grid_keys: list[str] | None = None, x: str = "n_clients") -> Figure:
    """Round time, start-up, peak memory and bytes against ``x`` (2 x 2 panels); one line per other grid value.

    Parameters
    ----------
    df : DataFrame, one row a run
        ``sweep()``'s table; runs with an ``error`` are left out, repeats averaged.
    grid_keys : list of str or None
        Grid keys; every one but ``x`` splits the runs into lines.
    x : str
        Column on the x axis (log scale when it spans more than two positive values).

    Returns
    -------
    Figure
    """
    ok = df[df.get("error", pd.Series([""] * len(df))).fillna("") == ""] if len(df) else df
    series_keys = [k for k in (grid_keys or []) if k in ok.columns and k != x and k != "federation.n_clients"]
    ok = ok.copy()
    if len(ok):
        ok["bytes_per_round"] = (ok["bytes_down"] + ok["bytes_up"]) / ok["rounds"].clip(lower=1)
    fig = new_figure(grid_size(len(SWEEP_PANELS), panel=(4.6, 3.4)))
    axes = panel_grid(fig, len(SWEEP_PANELS))
    groups = ok.groupby(series_keys, dropna=False) if series_keys else [((), ok)]
    for name, g in groups:
        label = ", ".join(
            f"{k.split('.')[-1]}={v}" for k, v in zip(series_keys, name if isinstance(name, tuple) else (name,))
        )
        g = g.groupby(x, as_index=False)[[c for c, *_ in SWEEP_PANELS]].mean().sort_values(x)
        for ax, (col, _, _, factor) in zip(axes, SWEEP_PANELS):
            ax.plot(g[x], g[col] * factor, marker="o", label=label or None)
    for ax, (_, title, ylabel, _) in zip(axes, SWEEP_PANELS):
        ax.set_xlabel(x.replace("_", " ").replace("n clients", "clients"))
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if len(ok) and ok[x].nunique() > 2 and np.nanmin(ok[x]) > 0:
            ax.set_xscale("log")
    if series_keys:
        axes[0].legend(loc="best")
    return fig


def plot_sweep(df: pd.DataFrame, path: str | Path, grid_keys: list[str] | None = None,
               x: str = "n_clients") -> Path:
    """Save :func:`sweep_figure` as PNG (creating the folder); returns the path."""
    return save_figure(sweep_figure(df, grid_keys=grid_keys, x=x), path)


# --- command line ---------------------------------------------------------------
def cmd_sweep(args: argparse.Namespace) -> int:
    grid = parse_grid(args.grid or [])
    out = Path(args.out or Path("fedray-output") / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    df = sweep(args.config, grid, out=out, overrides=args.set or [], repeats=args.repeats, plot=not args.no_plot,
               stop_on_error=args.stop_on_error)
    cols = [c for c in list(grid) + ["rounds", "round_s", "startup_s", "peak_mem_mb", "bytes_up", "error"]
            if c in df.columns]
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(df[cols].to_string(index=False))
    print(f"outputs: {out} (sweep.parquet, sweep.csv{'' if args.no_plot else ', sweep.png'})")
    return 0 if (df.get("error", pd.Series(dtype=str)).fillna("") == "").all() else 1


def add_cli(subparsers: Any) -> None:
    """Add ``fedray sweep`` to the command line."""
    s = subparsers.add_parser("sweep", help="run a grid of configurations and tabulate time, memory and bytes")
    s.add_argument("config", nargs="?", help="YAML config (optional; defaults apply)")
    s.add_argument("--grid", action="append", metavar="KEY=V1,V2,...",
                   help="values of one key, e.g. federation.n_clients=10,100,1000 (repeat for more keys)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override applied before the grid")
    s.add_argument("--out", help="output folder (default: fedray-output/sweep-TIMESTAMP)")
    s.add_argument("--repeats", type=int, default=1, help="runs per combination")
    s.add_argument("--no-plot", action="store_true", help="do not write sweep.png")
    s.add_argument("--stop-on-error", action="store_true", help="stop at the first failed run")
    s.set_defaults(func=cmd_sweep)
