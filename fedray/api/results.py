"""Results of a run: history, per-client table, model, summary, and the output folder.

Output folder layout::

    summary.json      config, final metrics, rounds, converged, wall time, failures, privacy account
    failures.parquet  one row per client that failed or was late in a round (see fedray.layers.faults)
    messages.parquet  every message, when ``output.messages`` is on (see fedray.layers.messages)
    rounds.parquet    one row a round (``wall_s`` = seconds of that round)
    clients.parquet   one row a client: samples, rounds_participated (rounds it answered a task of the
                      algorithm), rounds_evaluated (rounds it only evaluated the current model), bytes
                      sent, compute_share_s (the client's seconds of compute: its own for a call per client,
                      an equal share of its host's for a batched call); n_train and n_test where the
                      clients split their rows; accuracy, acc, cluster and true_group where the method has them
    model.npz         the model's arrays (``centers``; ``m`` where fuzzy)
    config.yaml       the validated configuration
    plots/*.png       convergence; centres over the data density (federated PCA beyond 2-D);
                      client clusters found (clustered FL)
"""
from __future__ import annotations

import importlib.metadata as md
import json
import logging
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedray.api.headlines import accuracy_account, accuracy_lines, simulated_account, simulated_lines
from fedray.api.outputs import atomic_path, record, write_text
from fedray.api.plotdata import PlotData
from fedray.api.scale import central_rows
from fedray.core.contract import Algorithm
from fedray.core.metrics import best_permutation_distance
from fedray.core.ops import assign
from fedray.core.registry import make_params
from fedray.layers.failure_log import FailureLog
from fedray.layers.faults import failures_table
from fedray.layers.messages import messages_table
from fedray.layers.privacy.accountant import privacy_summary
from fedray.plots import style as P
from fedray.plots.cfl import client_clusters
from fedray.plots.clock import clock_metric, sim_time

log = logging.getLogger(__name__)


def peak_memory_mb() -> float:
    """Resident memory of this process and its children (Ray workers included when local), in MB."""
    try:
        import psutil

        proc = psutil.Process(os.getpid())
        rss = proc.memory_info().rss
        for ch in proc.children(recursive=True):
            try:
                rss += ch.memory_info().rss
            except psutil.Error:
                pass
        return rss / 2**20
    except Exception:  # noqa: BLE001
        return float("nan")


#: Figures :meth:`Result.save` writes into ``plots/``.
_PLOTS = ("convergence.png", "centers.png", "clients.png")


@dataclass
class Result:
    """What a run produced.

    Attributes
    ----------
    config : ExperimentConfig
    history : DataFrame — one row per round
    clients : DataFrame — one row per client
    model : dict — arrays of the model (``centers`` for clustering)
    summary : dict — what ``summary.json`` holds
    output_dir : Path or None
    """

    config: Any
    history: pd.DataFrame
    clients: pd.DataFrame
    model: dict[str, Any]
    summary: dict[str, Any]
    algorithm_cls: Any = None
    scaler: tuple[np.ndarray, np.ndarray] | None = None
    output_dir: Path | None = None
    peak_memory_mb: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    # --- construction ---------------------------------------------------------
    @classmethod
    def build(cls, cfg: Any, alg: Any, session: Any, state: dict[str, Any], model: dict[str, Any],
              final: dict[str, Any], wall_s: float) -> Result:
        history = pd.DataFrame(state["history"])
        desc = session.descriptions
        cols = state.get("client_columns")
        if cols is None:  # a server of an earlier version: one row per client that answered
            cols = _columns_of_rows(state.get("client_rows", {}), len(desc))
        rows = pd.DataFrame({"client_id": desc.ids, "name": desc.all_names(), "n_samples": desc.n,
                             **_train_test_rows(alg, session, desc),
                             **{k: cols[k][desc.ids] for k in ("rounds_participated", "rounds_evaluated", "bytes_up")},
                             # a batched call on a host is timed once and shared equally by its clients
                             "compute_share_s": cols["compute_s"][desc.ids]})
        clients = _with_client_results(rows, model, final, session.info.extras or {})
        # Counted from the same rows as failures.parquet: every attempt of every round, and
        # the evaluation passes (negative rounds).
        fail_rows = FailureLog.of(state.get("failures"))
        failures, late = fail_rows.count("failed"), fail_rows.count("late")
        in_eval = fail_rows.count(evaluation=True)
        spill = fail_rows.count("late", contains="spill-over")
        summary = {
            "algorithm": alg.name,
            "dataset": str(cfg.data.dataset),  # arrays from Python: their description
            "n_clients": session.info.n_clients,
            "n_samples": session.info.total_samples,
            "n_features": session.info.n_features,
            "backend": cfg.runtime.backend,
            "seed": cfg.seed,
            "rounds": int(len(history)),
            "round_cap": cfg.federation.rounds,
            "converged": bool(state.get("converged", False)),
            "stop_reason": str(state.get("stop_reason", "")),
            "wall_time_s": float(wall_s),
            "startup_s": float(session.startup_s),
            # the session's start-up steps (Ray, client actors, data checks), shared by its runs
            "startup_steps": {k: round(float(v), 3) for k, v in getattr(session, "startup_stages", {}).items()},
            "rounds_s": float(history["wall_s"].sum()) if len(history) else 0.0,
            "evaluation_s": float(state.get("evaluation_s", 0.0)),
            "failures": {"failed": failures, "late": late, "late_spillover": spill, "in_evaluation": in_eval},
            "bytes": {"down": int(history["bytes_down"].sum()) if len(history) else 0,
                      "up": int(history["bytes_up"].sum()) if len(history) else 0},
            "final": _jsonable(final),
            "config": cfg.to_dict(),
            "versions": _versions(),
        }
        if session.executor.backend == "ray":
            summary["actors"] = session.executor.n_actors
        summary.update(accuracy_account(history, clients))
        if "sim_time_s" in history.columns:
            summary["simulated"] = simulated_account(history, cfg.federation, fail_rows)
        extras = _reliability_extras(state, summary)
        return cls(cfg, history, clients, model, summary, type(alg), session.scaler, extras=extras)

    @property
    def failures(self) -> pd.DataFrame:
        """One row per client that failed or was late in a round (``failures.parquet``)."""
        return self.extras["failures"]

    @property
    def messages(self) -> pd.DataFrame | None:
        """The message log (``messages.parquet``), when ``output.messages`` is on."""
        return self.extras.get("messages")

    # --- model access ------------------------------------------------------
    @property
    def centers(self) -> np.ndarray | None:
        """Centres in the original feature space (scaling undone)."""
        c = self.model.get("centers")
        if c is None or self.scaler is None:
            return c
        return c * self.scaler[1] + self.scaler[0]

    @property
    def final(self) -> dict[str, Any]:
        return self.summary["final"]

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        return X if self.scaler is None else (X - self.scaler[0]) / self.scaler[1]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Cluster of each row of ``X`` (original feature space)."""
        return self.algorithm_cls.predict(self.model, self._scaled(X))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Memberships of each row of ``X`` (original feature space), for fuzzy models."""
        return self.algorithm_cls.predict_proba(self.model, self._scaled(X))

    # --- central baseline ----------------------------------------------------
    def add_central_baseline(self, session: Any) -> None:
        """Run the central algorithm on the union of the shards from the same initial centres."""
        from sklearn.metrics import adjusted_rand_score


        start = self.model.get("initial_centers")
        if start is None or self.algorithm_cls.central is Algorithm.central:
            log.warning("%s has no central baseline", self.summary["algorithm"])
            return
        rows = central_rows(session.info.n_samples, self.config.evaluation.central_max_rows, self.config.seed)
        parts = session.executor.gather_data(labels=True, rows=rows)
        X = np.vstack([p[1] for p in parts])
        if rows is not None:
            log.warning("central baseline: on a uniform sample of %d of the union's %d rows "
                        "(evaluation.central_max_rows=%d)", len(X), session.info.total_samples, len(X))
        rounds = int((self.history["phase"] == "train").sum()) if len(self.history) else 1
        params = make_params(self.algorithm_cls, self.config.algorithm.params)
        C = self.algorithm_cls.central(X, start, params, max(1, rounds))
        if C is None:
            log.warning("%s has no central baseline", self.summary["algorithm"])
            return
        self.model["central_centers"] = C
        fin = self.summary["final"]
        fin["central_baseline_rows"] = {"rows": int(len(X)), "of_rows": int(session.info.total_samples),
                                        "subsampled": rows is not None}
        fin["center_distance_to_central"] = best_permutation_distance(C, self.model["centers"])
        if all(p[2] is not None for p in parts):
            y = np.concatenate([p[2] for p in parts])
            fin["central_ari"] = float(adjusted_rand_score(y, assign(X, C)[0]))

    # --- saving ---------------------------------------------------------------
    def save(self, directory: str | Path, plots: bool = True, plot_data: PlotData | None = None) -> Path:
        """Write the output folder (see module docstring); returns its path.

        ``plot_data`` holds the statistics gathered from the clients during the run (the data
        density under the centres); without it the centres plot is left out. Saving never calls
        clients."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        names = ["rounds.parquet", "clients.parquet", "model.npz", "config.yaml", "summary.json"]
        names += ["failures.parquet"] if "failures" in self.extras else []
        names += ["messages.parquet"] if self.extras.get("messages") is not None else []
        names += [f"plots/{n}" for n in _PLOTS] if plots else []
        names += ["plots/sim_time.png"] if plots and "simulated" in self.summary else []
        # fedray's marker lists what it writes (what --overwrite may delete) before writing, so that a
        # file half-written when the disk fills up is known as fedray's too
        record(out, [out / n for n in names])
        # each file is written under a fresh name and moved into place (outputs.atomic_path): a link
        # planted at its name is replaced, never written through
        tables = {"rounds.parquet": self.history, "clients.parquet": self.clients,
                  "failures.parquet": self.extras.get("failures"), "messages.parquet": self.extras.get("messages")}
        for name, table in tables.items():
            if table is not None:
                with atomic_path(out / name) as tmp:
                    table.to_parquet(tmp, index=False)
        arrays = {k: np.asarray(v) for k, v in self.model.items() if _is_arraylike(v)}
        if self.scaler is not None:
            arrays["scaler_shift"], arrays["scaler_scale"] = self.scaler
        with atomic_path(out / "model.npz") as tmp:
            np.savez(tmp, **arrays)
        write_text(out / "config.yaml", self.config.to_yaml())
        if self.peak_memory_mb is not None:
            self.summary["peak_memory_mb"] = self.peak_memory_mb
        write_text(out / "summary.json", json.dumps(_jsonable(self.summary), indent=2))
        if plots:
            self._save_plots(out / "plots", plot_data)
        self.output_dir = out
        log.info("outputs written to %s", out)
        return out

    def _save_plots(self, where: Path, data: PlotData | None) -> None:
        where.mkdir(exist_ok=True)
        with atomic_path(where / "convergence.png") as tmp:  # (refuses a plots folder that is a link)
            P.convergence(self.history, tmp, title=self.summary["algorithm"],
                          fraction=float(self.config.federation.fraction))
        C = self.model.get("centers")
        central = self.model.get("central_centers")
        if data is not None and isinstance(C, np.ndarray) and C.ndim == 2 and C.shape[1] == data.n_features == 1:
            name = (data.feature_names or ("x0",))[0]
            with atomic_path(where / "centers.png") as tmp:
                P.centers_1d(C, tmp, density=data.density_1d, central=central, axis_label=str(name))
        elif data is not None and data.projection is not None and isinstance(C, np.ndarray) and C.ndim == 2:
            mean, axes = data.projection
            def project(A: Any) -> np.ndarray:
                return (np.asarray(A) - mean) @ axes

            labels = ("x0", "x1") if C.shape[1] == 2 else ("PC 1", "PC 2")
            with atomic_path(where / "centers.png") as tmp:
                P.centers_2d(project(C), tmp, density=data.density_2d,
                             central=None if central is None else project(central), axis_labels=labels,
                             title="federated centres over the data density" + ("" if C.shape[1] == 2 else
                                                                               " (federated PCA)"))
        metric = clock_metric(self.history, self.config.federation.target) if "simulated" in self.summary else None
        if metric is not None:
            with atomic_path(where / "sim_time.png") as tmp:
                sim_time(self.history, tmp, metric, self.config.federation.target,
                         title=f"{self.summary['algorithm']}: {metric} on the simulated clock")
        if self.model.get("assignment") is not None:  # clustered FL: which clients ended up together
            groups = data.true_groups if data is not None else None
            with atomic_path(where / "clients.png") as tmp:
                client_clusters(self.model["assignment"], groups, self.clients["n_samples"].to_numpy(),
                                tmp, title=f"client clusters found by {self.summary['algorithm']}")

    def table(self, color: bool = False) -> str:
        """A short text table of the final metrics (``color``: an incomplete evaluation in red)."""
        fin = self.summary["final"]
        keys = [k for k in ("ari", "nmi", "acc", "davies_bouldin", "objective", "central_ari",
                            "center_distance_to_central", "accuracy") if k in fin]
        lines = [f"{'algorithm':<28}{self.summary['algorithm']}",
                 f"{'dataset':<28}{self.summary['dataset']}",
                 f"{'clients / samples':<28}{self.summary['n_clients']} / {self.summary['n_samples']}",
                 f"{'rounds (stopped by)':<28}{self.summary['rounds']} ({self.summary.get('stop_reason') or '-'})",
                 *_time_lines(self.summary), *simulated_lines(self.summary)]
        lines += [f"{k:<28}{fin[k]:.4f}" for k in keys if isinstance(fin[k], (int, float)) and k != "accuracy"]
        lines += accuracy_lines(self.summary)
        sample = fin.get("central_baseline_rows") or {}
        if sample.get("subsampled"):
            lines.append(f"{'central baseline on':<28}a uniform sample of {sample['rows']} of {sample['of_rows']} rows "
                         "(evaluation.central_max_rows)")
        cov = fin.get("evaluation_coverage")
        if cov:
            text = (f"{'evaluated':<28}{cov['clients']} of {cov['of_clients']} clients, "
                    f"{cov['samples']} of {cov['of_samples']} samples")
            rows = (self.summary.get("accuracy_measured_on") or {}).get("test_rows")
            if rows is not None:  # the evaluation pass covers the clients; accuracy reads their test rows
                text += f" (accuracy on their {rows} test rows)"
            if cov["clients"] < cov["of_clients"]:
                text += " (INCOMPLETE)"
                if color:
                    text = f"\033[31m{text}\033[0m"
            lines.append(text)
        return "\n".join(lines)


def _train_test_rows(alg: Any, session: Any, desc: Any) -> dict[str, np.ndarray]:
    """``n_train`` and ``n_test`` per client for methods that train on a split of each client's rows
    (the federation's own split where it fixes one, as FEMNIST's writers, else the algorithm's
    ``test_fraction`` as :func:`fedray.nn.split.split_rows` draws it); nothing for the others."""
    if not getattr(type(alg), "supervised", False):
        return {}
    fraction = float(getattr(getattr(alg, "params", None), "test_fraction", 0.15))
    specs = session.federation.specs
    n_test = []
    for cid, n in zip(np.asarray(desc.ids).tolist(), np.asarray(desc.n).tolist()):
        fixed = specs[cid].meta.get("n_test") if cid < len(specs) else None
        if fixed is not None:
            n_test.append(int(fixed))
        else:
            t = int(round(fraction * n))
            n_test.append(min(max(t, 1), n - 1) if n >= 2 else 0)
    tests = np.asarray(n_test, dtype=np.int64)
    return {"n_train": np.asarray(desc.n, dtype=np.int64) - tests, "n_test": tests}


def _time_lines(summary: dict[str, Any]) -> list[str]:
    """Start-up (Ray, client actors, data checks; once per session) apart from the run itself."""
    steps = summary.get("startup_steps") or {}
    slow = "; ".join(f"{k} {v:.1f} s" for k, v in steps.items() if v >= 0.5)
    lines = [f"{'start-up (once a session)':<28}{summary.get('startup_s', 0.0):.2f} s" + (f" ({slow})" if slow else "")]
    rounds_s = summary.get("rounds_s")
    run = f"{summary['wall_time_s']:.2f} s"
    if rounds_s is not None:
        run += f" (rounds {rounds_s:.2f} s, final evaluation {summary.get('evaluation_s', 0.0):.2f} s)"
    return lines + [f"{'run':<28}{run}"]


def _columns_of_rows(rows: dict[Any, dict[str, Any]], n: int) -> dict[str, np.ndarray]:
    """Per-client counters as arrays indexed by client id, from the per-client rows of a saved state."""
    n = max([n] + [int(k) + 1 for k in rows])
    out = {"rounds_participated": np.zeros(n, dtype=np.int64), "rounds_evaluated": np.zeros(n, dtype=np.int64),
           "bytes_up": np.zeros(n, dtype=np.int64), "compute_s": np.zeros(n)}
    for k, v in rows.items():
        c = int(k)
        out["rounds_participated"][c] = int(v.get("rounds", 0))
        out["rounds_evaluated"][c] = int(v.get("evaluated", 0))
        out["bytes_up"][c] = int(v.get("bytes_up", 0))
        out["compute_s"][c] = float(v.get("compute_s", 0.0))
    return out


def _with_client_results(clients: pd.DataFrame, model: dict[str, Any], final: dict[str, Any],
                         extras: dict[str, Any]) -> pd.DataFrame:
    """Per-client results next to the per-client counters: ``accuracy`` (each client's model on
    its own test split), ``acc`` (Hungarian-matched accuracy of the client's own clusters, where the
    method clusters each client's data: FedCRef), ``cluster`` (the cluster or community found for
    it), ``true_group`` (the federation's hidden group, where known; for evaluation only)."""
    n = len(clients)

    def column(values: Any) -> np.ndarray | None:
        if values is None:
            return None
        arr = np.asarray(values)
        return arr if arr.ndim == 1 and arr.shape[0] == n else None

    for name, values in (("accuracy", final.get("client_accuracy", model.get("client_accuracy"))),
                         ("acc", final.get("client_acc")),
                         ("cluster", model.get("assignment", final.get("assignment"))),
                         ("true_group", extras.get("true_groups", model.get("true_groups")))):
        col = column(values)
        if col is not None:
            clients[name] = col
    return clients


def _reliability_extras(state: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """Failures table, message log and privacy account from the server's state (see fedray.layers.faults,
    fedray.layers.messages, fedray.layers.privacy); adds the privacy account to ``summary``."""

    report = state.get("report") or {}
    extras: dict[str, Any] = {"failures": failures_table(state.get("failures", []), report.get("faults", []))}
    if "messages" in report:

        extras["messages"] = messages_table(report["messages"])
        if "payloads" in report:
            extras["payloads"] = report["payloads"]
    if "privacy" in report:

        summary["privacy"] = privacy_summary(report["privacy"])
        extras["releases"] = list(report["privacy"].get("releases", []))  # the sums the server held
    if report.get("faults"):
        summary["failures"]["injected"] = len(report["faults"])
    if report.get("layers"):  # what the user's layers reported (fedray.layers.base), by layer name
        extras["layers"] = dict(report["layers"])
    return extras


def _is_arraylike(v: Any) -> bool:
    return isinstance(v, (np.ndarray, float, int, np.generic)) or (
        isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, (int, float, np.generic)) for x in v))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("fedray", "ray", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
