"""Experiment tracking: a run's curves, configuration, summary and plots in TensorBoard and MLflow.

``output.trackers: [tensorboard, mlflow]`` (the ``tracking`` extra) sends, with the
libraries' own writers:

* every round's numeric history columns, as scalars / metrics at step = the round;
* the configuration: TensorBoard hyperparameters (the HParams dashboard) and the YAML as
  text; MLflow parameters (dotted keys, ``algorithm.params.n_clusters``);
* the final summary: the final metrics as ``final/NAME`` scalars / ``final.NAME`` metrics,
  and ``summary.json`` (text in TensorBoard, an artefact in MLflow);
* the plots: images in TensorBoard, artefacts under ``plots/`` in MLflow.

TensorBoard: event files in ``<output>/tensorboard``, written with ``tensorboard``'s own
event-file writer (no torch, no TensorFlow). MLflow: the tracking URI is
``output.mlflow_tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else a local ``file:`` store
``./mlruns`` (MLflow 3 keeps file stores in maintenance mode behind
``MLFLOW_ALLOW_FILE_STORE``; fedray sets it for a ``file:`` URI it is asked to use); the
experiment is ``output.mlflow_experiment``.

A resumed run (``fedray run --resume``) continues the same TensorBoard run (same folder) and
the same MLflow run (its id is kept in ``<output>/tracking.json``, written when the trackers
open and again when they close, with the last round sent); rounds the resumed run computes
again (after its last checkpoint) are not sent twice. A run killed without the chance to close
(SIGKILL, a lost machine) leaves the round of the opening there: its resumed run sends the
rounds after its last checkpoint again, at the same steps. A tracker that fails during a
run (its server gone) is named in a warning and left out; the run goes on.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import struct
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fedray.api.uris import redact_uri, secrets_of
from fedray.core.errors import ConfigError
from fedray.core.extras import missing

log = logging.getLogger(__name__)

#: tracker name -> (the package it needs, the extra that installs it)
TRACKERS = {"tensorboard": ("tensorboard", "tracking"), "mlflow": ("mlflow", "tracking")}
STATE_FILE = "tracking.json"
TB_FOLDER = "tensorboard"
#: While a tracker opens, MLflow tries an HTTP tracking server this many times, this many seconds each
#: (its defaults retry a server that is not there for about four minutes); a user's own setting wins.
# (tracking URI, experiment) pairs whose store answered in this process: fedray.run checks before its
# session is built and Session.run before it writes, so the store is probed once, not twice, per run.
_REACHED: set[tuple[str, str]] = set()
OPEN_REQUESTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def check_available(names: Iterable[str]) -> None:
    """Raise :class:`ConfigError` (one line, with the pip command) when a tracker's package is missing."""
    absent = [n for n in names if missing((TRACKERS[n][0],))]
    if absent:
        extras = sorted({TRACKERS[n][1] for n in absent})
        raise ConfigError(f"output.trackers: {', '.join(absent)} asked for but not installed; install it with: "
                          f"pip install \"fedray[{','.join(extras)}]\"")


def numeric_items(row: dict[str, Any]) -> dict[str, float]:
    """The real-number entries of a history row or summary (booleans and text left out)."""
    out = {}
    for k, v in row.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            continue
        try:
            out[str(k)] = float(v)
        except (TypeError, ValueError):
            continue
    return out


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists and other leaves kept as they are)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG from its IHDR chunk."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        return 0, 0
    return struct.unpack(">II", data[16:24])


class TensorBoardTracker:
    """Writes one run's event file(s) in ``folder`` with tensorboard's event-file writer."""

    def __init__(self, folder: Path) -> None:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._pb = event_pb2
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        # A resumed run adds an event file to the same folder: the same run for TensorBoard. No
        # SessionLog.START marker: TensorBoard would drop the steps from the resumed round on that the
        # first file holds, and the rounds already sent are not sent again (Trackers.log_round).
        self.writer = EventFileWriter(str(folder), flush_secs=5)

    def _add(self, step: int, **kw: Any) -> None:
        self.writer.add_event(self._pb.Event(wall_time=time.time(), step=int(step), **kw))

    def _summary(self, step: int, values: list[Any]) -> None:
        from tensorboard.compat.proto import summary_pb2

        self._add(step, summary=summary_pb2.Summary(value=values))

    def _scalars(self, step: int, metrics: dict[str, float], prefix: str = "") -> None:
        from tensorboard.compat.proto import summary_pb2

        self._summary(step, [summary_pb2.Summary.Value(tag=prefix + k, simple_value=v) for k, v in metrics.items()])

    def _text(self, step: int, tag: str, text: str) -> None:
        from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2

        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
        tensor = tensor_pb2.TensorProto(dtype=7, string_val=[text.encode()],  # 7: DT_STRING
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
        self._summary(step, [summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])

    def start(self, params: dict[str, Any], config_yaml: str) -> None:
        """The configuration as hyperparameters (HParams dashboard) and as text."""
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.plugins.hparams import plugin_data_pb2

        info = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
        for k, v in params.items():
            if isinstance(v, bool):
                info.hparams[k].bool_value = v
            elif isinstance(v, (int, float)):
                info.hparams[k].number_value = float(v)
            else:
                info.hparams[k].string_value = str(v)
        content = plugin_data_pb2.HParamsPluginData(session_start_info=info, version=0).SerializeToString()
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name="hparams", content=content))
        self._summary(0, [summary_pb2.Summary.Value(tag="_hparams_/session_start_info", metadata=meta)])
        self._text(0, "config", "```\n" + config_yaml + "\n```")

    def log_round(self, step: int, metrics: dict[str, float]) -> None:
        self._scalars(step, metrics)

    def finish(self, step: int, final: dict[str, float], summary_json: str, plots: list[Path]) -> None:
        from tensorboard.compat.proto import summary_pb2

        self._scalars(step, final, prefix="final/")
        self._text(step, "summary", "```\n" + summary_json + "\n```")
        for png in plots:
            data = png.read_bytes()
            w, h = _png_size(data)
            image = summary_pb2.Summary.Image(encoded_image_string=data, width=w, height=h, colorspace=4)
            self._summary(step, [summary_pb2.Summary.Value(tag=f"plots/{png.stem}", image=image)])

    def close(self, status: str) -> None:
        self.writer.flush()
        self.writer.close()


def _metric_key(k: str) -> str:
    """MLflow keys take letters, digits, ``_ - . / space``; anything else becomes ``_``."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in k)


@contextlib.contextmanager
def _quick_requests() -> Iterator[None]:
    """MLflow's HTTP retries set to :data:`OPEN_REQUESTS` inside the block (where not set by the user)."""
    added = [k for k in OPEN_REQUESTS if k not in os.environ]
    os.environ.update({k: OPEN_REQUESTS[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


class MLflowTracker:
    """Logs one run to MLflow with :class:`mlflow.tracking.MlflowClient` (no global active run)."""

    def __init__(self, uri: str, experiment: str, run_name: str, run_id: str | None) -> None:
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(uri)
        self.uri = uri
        with _quick_requests():  # an unreachable server fails in seconds, not after minutes of retries
            if run_id is not None:  # a resumed run goes on in the run it started
                self.run_id = run_id
                self.client.update_run(run_id, status="RUNNING")
                return
            exp = self.client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(experiment)
            self.run_id = self.client.create_run(exp_id, run_name=run_name, tags={"fedray": "1"}).info.run_id

    def _metrics(self, step: int, metrics: dict[str, float], prefix: str = "") -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        rows = [Metric(_metric_key(prefix + k), v, ts, int(step)) for k, v in metrics.items()]
        for i in range(0, len(rows), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=rows[i:i + 1000])

    def start(self, params: dict[str, Any], config_yaml: str) -> None:
        from mlflow.entities import Param

        rows = [Param(_metric_key(k)[:250], str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(rows), 100):  # MLflow's batch limit for parameters
            self.client.log_batch(self.run_id, params=rows[i:i + 100])
        self.client.log_text(self.run_id, config_yaml, "config.yaml")

    def log_round(self, step: int, metrics: dict[str, float]) -> None:
        self._metrics(step, metrics)

    def finish(self, step: int, final: dict[str, float], summary_json: str, plots: list[Path]) -> None:
        self._metrics(step, final, prefix="final.")
        self.client.log_text(self.run_id, summary_json, "summary.json")
        for png in plots:
            self.client.log_artifact(self.run_id, str(png), "plots")

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status)


def probe_mlflow(uri: str, experiment: str) -> None:
    """Ask the MLflow store at ``uri`` for ``experiment`` (creating no run): MLflow's own error when
    the URI is bad or its server unreachable."""
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    with _quick_requests():
        MlflowClient(uri).get_experiment_by_name(experiment)


@contextlib.contextmanager
def _uri_error(uri: str) -> Iterator[None]:
    """MLflow's errors inside the block (a bad URI, an unreachable server) as one :class:`ConfigError` line."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - MLflow's own errors, of many classes
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        first = first.replace(uri, redact_uri(uri))
        for secret in secrets_of(uri):
            first = first.replace(secret, "***")
        raise ConfigError(f"output.mlflow_tracking_uri: MLflow cannot use {redact_uri(uri)!r}: {first}") from None


def mlflow_uri(option: str | None) -> str:
    """``output.mlflow_tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else ``file:`` + ``./mlruns`` (absolute)."""
    if option:
        return option
    return os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()


class Trackers:
    """The trackers of one run (``output.trackers``); a run calls :meth:`start`, :meth:`log_round`,
    :meth:`finish` and :meth:`close`. With no tracker asked for, every call does nothing. Building
    one checks the options (an output folder, the packages); :meth:`start` opens the writers.

    Parameters
    ----------
    cfg : ExperimentConfig
        The run's configuration (with the round cap it has).
    output : str, Path or None
        The run's output folder (needed: the TensorBoard files and ``tracking.json`` go there).
    resume_round : int or None
        The first round a resumed run computes (None: a new run).
    """

    def __init__(self, cfg: Any, output: str | Path | None, resume_round: int | None = None) -> None:
        self.names = list(cfg.output.trackers)
        self.items: list[Any] = []
        self.last_round = -1
        self.cfg, self.resume_round = cfg, resume_round
        self.state: dict[str, Any] = {}
        self._written: int | None = None  # the last_round that tracking.json holds
        if not self.names:
            return
        if not output:
            raise ConfigError(f"output.trackers: {self.names} need an output folder: set output.directory or pass "
                              "output= / --out")
        check_available(self.names)
        self.out = Path(output)

    def _open(self) -> None:
        """Open the writers: a new TensorBoard event file, a new MLflow run or the resumed one."""
        self.out.mkdir(parents=True, exist_ok=True)
        state = self._read_state() if self.resume_round is not None else {}
        self.last_round = int(state.get("last_round", -1))
        self.state = {"last_round": self.last_round}
        self.new = self.resume_round is None or not state
        if "tensorboard" in self.names:
            self.items.append(TensorBoardTracker(self.out / TB_FOLDER))
        if "mlflow" in self.names:
            uri = mlflow_uri(self.cfg.output.mlflow_tracking_uri)
            with _uri_error(uri):
                tracker = MLflowTracker(uri, self.cfg.output.mlflow_experiment, self.out.name or
                                        self.cfg.algorithm.name, None if self.new else state.get("mlflow_run_id"))
            self.state.update(mlflow_run_id=tracker.run_id, mlflow_tracking_uri=redact_uri(uri))
            self.items.append(tracker)
        self._write_state()

    def check(self) -> None:
        """Reach the MLflow tracking store (reading only) before the run writes anything or builds
        its clients: a bad URI or an unreachable server is the run's first and only error."""
        if "mlflow" not in self.names:
            return
        uri = mlflow_uri(self.cfg.output.mlflow_tracking_uri)
        key = (uri, self.cfg.output.mlflow_experiment)
        if key in _REACHED:
            return
        with _uri_error(uri):
            probe_mlflow(*key)
        _REACHED.add(key)

    def _read_state(self) -> dict[str, Any]:
        try:
            return json.loads((self.out / STATE_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def _write_state(self) -> None:
        (self.out / STATE_FILE).write_text(json.dumps(self.state, indent=2))
        self._written = self.state.get("last_round")

    def _each(self, method: str, *args: Any) -> None:
        """Call ``method`` on every tracker; one that fails (a tracking server gone, a full disk) is
        named in a warning and left out for the rest of the run, which goes on."""
        for t in list(self.items):
            try:
                getattr(t, method)(*args)
            except Exception as exc:  # noqa: BLE001 - a tracker must not end a long run
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                log.warning("output.trackers: %s failed (%s: %s); the run goes on without it", type(t).__name__,
                            type(exc).__name__, first)
                self.items.remove(t)

    def start(self) -> None:
        """Open the trackers, and send the configuration (a new run only: a resumed run's are there)."""
        if not self.names:
            return
        self._open()
        if not self.new:
            return
        params = {k: (v if isinstance(v, (bool, int, float, str)) else json.dumps(v))
                  for k, v in flatten(self.cfg.to_dict()).items()}
        self._each("start", params, self.cfg.to_yaml())

    def log_round(self, row: dict[str, Any]) -> None:
        """One history row, at step = its round (rounds already sent before a resume are skipped)."""
        if not self.items or int(row["round"]) <= self.last_round:
            return
        step = int(row["round"])
        metrics = {k: v for k, v in numeric_items(row).items() if k != "round"}
        self._each("log_round", step, metrics)
        self.last_round = self.state["last_round"] = step

    def finish(self, result: Any) -> None:
        """The final metrics, ``summary.json`` and the plots of the output folder."""
        if not self.items:
            return
        final = {k: v for k, v in numeric_items(result.final).items() if math.isfinite(v) or math.isnan(v)}
        summary_json = json.dumps(result.summary, indent=2, default=str)
        plots = sorted((self.out / "plots").glob("*.png"))
        self._each("finish", max(self.last_round, 0), final, summary_json, plots)

    def close(self, status: str = "FINISHED") -> None:
        """``FINISHED``, ``FAILED`` or ``KILLED`` (an interrupted run); ``tracking.json`` gets the last
        round sent, which a resumed run does not send again."""
        if self.state and self.state.get("last_round") != self._written:
            with contextlib.suppress(OSError):  # the run's own outcome comes first
                self._write_state()
        for t in self.items:
            try:
                t.close(status)
            except Exception as exc:  # noqa: BLE001 - closing must not hide the run's own outcome
                log.warning("could not close the %s tracker: %s", type(t).__name__, exc)
        self.items = []
