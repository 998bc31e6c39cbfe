"""A session: one federation's clients, built once, reused by any number of runs.

``Session(cfg)`` builds the client recipes, starts the runtime (an embedded Ray
instance if needed), builds the shards where the clients live, checks the data
through per-client summaries and applies scaling computed from those summaries
(:mod:`fedray.api.data_scaling`). :meth:`Session.run` then runs an algorithm on the
same clients (:mod:`fedray.api.runner`: the run, resuming, the server actor, partial
saves); K selection and sweeps run many algorithms on one session without rebuilding
shards. Calls outside runs (set-up sums, K selection, validation, plots) go through
the same layers (:meth:`Session.call`, :meth:`Session.total`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

from fedray.api import plotdata
from fedray.api.config import ExperimentConfig, make_config
from fedray.api.data_scaling import check_and_scale
from fedray.api.progress import Activity, startup_line
from fedray.api.results import Result
from fedray.api.runner import Runner
from fedray.api.scale import all_answered, total_in_parts
from fedray.api.settings import privacy_settings, runtime_settings, ship_settings, stack_layers
from fedray.core import calls
from fedray.core.calls import Call
from fedray.core.contract import Algorithm, Task
from fedray.core.errors import DataError
from fedray.core.extras import requirements
from fedray.core.registry import check_algorithm_class, get_algorithm, make_params
from fedray.core.stats import Stats
from fedray.data.checks import Descriptions
from fedray.data.federation import Federation, build_federation, check_memory, shard_residency
from fedray.layers.privacy import PrivacyLayer
from fedray.layers.stack import build_stack, find_layer, secure_layer
from fedray.runtime.backends import make_executor
from fedray.runtime.executor import ExecResult, Executor
from fedray.runtime.ray_executor import ensure_ray
from fedray.runtime.shipping import actor_runtime_env

log = logging.getLogger(__name__)


class Session:
    """Clients of one federation, ready to run algorithms.

    Parameters
    ----------
    config : ExperimentConfig or anything :func:`fedray.api.config.make_config` accepts
    **kwargs
        Passed to :func:`~fedray.api.config.make_config`.
    """

    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        own = kwargs or not isinstance(config, ExperimentConfig)
        self.config: ExperimentConfig = make_config(config, **kwargs) if own else config
        cfg = self.config
        self.algorithm_cls = get_algorithm(cfg.algorithm.name)
        # torch for the neural methods: the client actors import it while they build their shards
        self.preloaded = requirements(self.algorithm_cls)
        check_memory(cfg)
        rt = cfg.runtime
        self._started_ray = False
        self.runner = Runner(self)  # runs algorithms; owns the server actor started ahead (ray)
        self.runtime_env: dict[str, Any] | None = None  # given to every actor (fedray.runtime.shipping)
        act = Activity("start-up", rt.progress)  # what start-up does, with its seconds, while it runs
        try:
            n = cfg.federation.n_clients
            act.stage(f"reading {cfg.data.dataset}" + (f" into {n} clients" if n else ""), "data")
            self.federation: Federation = build_federation(cfg.data, cfg.federation.n_clients, cfg.seed)
            if rt.backend == "ray":
                act.stage(f"connecting to Ray at {rt.address}" if rt.address else "starting Ray on this machine",
                          "Ray")
                self._started_ray = ensure_ray(ship=(ship := ship_settings(cfg)))
                self.runtime_env = actor_runtime_env(ship)
                self.runner.prestart()  # the first run's server: its process starts while the shards are built
        except BaseException:
            act.close()
            raise
        # Disclosures outside the protected path, counted for the privacy summary (fedray.layers.privacy).
        self.disclosures: dict[str, int] = {}
        self.outside_messages: list[dict[str, Any]] = []  # message-log rows of calls outside runs
        try:
            self.resident = shard_residency(cfg, self.federation.specs)
            act.stage(f"starting the client actors of {len(self.federation.specs)} clients" if rt.backend == "ray"
                      else f"building {len(self.federation.specs)} clients", "client actors" if rt.backend == "ray"
                      else "clients")
            if not self.resident and rt.resident == "auto":
                log.info("the shards would take more than half of the memory available: they are generated again "
                         "whenever clients run (runtime.resident: auto)")
            self.executor: Executor = make_executor(rt.backend, self.federation.specs, cfg.seed,
                                                    self.algorithm_cls.supervised, self.federation.sample_shape,
                                                    runtime_settings(cfg), runtime_env=self.runtime_env,
                                                    preload=self.preloaded, resident=self.resident)
            # The one layer stack every call to clients goes through (training, evaluation, set-up,
            # K selection, validation, plots); each run starts its records afresh.
            self.layers: Executor = build_stack(self.executor, stack_layers(cfg, self.disclosures))
            self.secure: PrivacyLayer | None = None  # the layer secure sums go through, once one is asked for
            self.fingerprint: str | None = None  # of the federation, once its set-up moments are summed
            act.stage("checking the data (per-client summaries)", "data checks")
            self.descriptions: Descriptions = (self.executor.describe(private=True) if cfg.privacy.active
                                               else self.executor.describe())
            self.info, self.scaler = check_and_scale(self, self.descriptions)
            self.descriptions.drop_moments()  # summed already; per client they would stay for nothing
        except BaseException:
            act.close()
            self.close()
            raise
        self.startup_s = time.perf_counter() - t0
        act.close(startup_line(self.startup_s, act.stages))
        self.startup_stages: dict[str, float] = act.stages  # seconds of each start-up step (summary.json)
        log.info("session ready: %d clients on %s in %.2f s", self.info.n_clients, rt.backend, self.startup_s)

    def can_secure_sum(self) -> bool:
        """Whether the federation has clients enough for a secure sum (``privacy.min_cohort``)."""
        return len(self.federation.specs) >= self.config.privacy.min_cohort

    # --- running ----------------------------------------------------------------
    def make_algorithm(self, name: str | type[Algorithm] | None = None,
                       params: dict[str, Any] | None = None) -> Algorithm:
        """An algorithm on this session's federation: a name (or ``package.module:ClassName``),
        an :class:`Algorithm` subclass, or None for the configured one."""
        cfg = self.config
        if isinstance(name, type):
            cls = check_algorithm_class(name, name.__qualname__, key="algorithm")
        else:
            cls = get_algorithm(name) if name else self.algorithm_cls
        p = make_params(cls, cfg.algorithm.params if params is None else params)
        return cls(p, self.info, cfg.seed)

    def run(self, algorithm: str | type[Algorithm] | Algorithm | None = None, params: dict[str, Any] | None = None, *,
            output: str | Path | None | bool = None, progress: bool | None = None,
            central_baseline: bool | None = None, resume_from: dict[str, Any] | None = None,
            on_round: Sequence[Callable[[dict[str, Any]], None]] = ()) -> Result:
        """Run one algorithm on this session's clients and return its :class:`Result` (:mod:`fedray.api.runner`).

        ``resume_from`` is a checkpoint loaded by :func:`fedray.api.checkpoint.load` (used by
        :func:`fedray.api.run.resume`): the run continues after its last saved round.
        ``on_round``: functions called with each round's history row, after the round's
        checkpoint (when one is due) is saved (e.g. :mod:`fedray.analysis.tune` reports to Tune).
        """
        return self.runner.run(algorithm, params, output=output, progress=progress,
                               central_baseline=central_baseline, resume_from=resume_from, on_round=on_round)

    @property
    def _spare_server(self) -> Any:
        """The server actor started ahead for the next run (:attr:`Runner.spare`), None if none."""
        return self.runner.spare

    def _preload_for(self, algorithm: Any) -> None:
        """What ``run(algorithm)`` does first (:meth:`Runner.preload_for`)."""
        self.runner.preload_for(algorithm)

    # --- calls outside a run ------------------------------------------------------
    def outside_records(self) -> dict[str, Any]:
        """The message-log rows of every call outside runs so far (``messages``; with
        ``output.messages``), the disclosures counted outside runs (``disclosures``) and the
        statistics released to the server by them (``releases``, rows as in a run's account)."""
        layers = {id(x): x for x in (find_layer(self.layers, PrivacyLayer), self.secure) if x is not None}
        releases = [r for x in layers.values() for r in x.outside_releases()]
        return {"messages": self.outside_messages + list(self.layers.report().get("messages", [])),
                "disclosures": dict(self.disclosures), "releases": releases}

    def call(self, call: Call, tasks: dict[int, Task]) -> ExecResult:
        """Run ``tasks`` on clients as ``call`` (a set-up or ad-hoc call) through the session's layers.

        Raises :class:`DataError` (one line) when a client function fails on the user's data."""
        res = self.layers.execute(call, tasks, None)
        if res.user_errors:
            raise DataError(res.user_errors[min(res.user_errors)])
        return res

    def total(self, call: Call, tasks: dict[int, Task], secure: bool = False) -> Stats:
        """The sum of every task's :class:`Stats` over the clients, through the session's layers.

        Under privacy, or when ``secure``, the sum is secure (the server sees masked vectors and
        their total only); that needs ``privacy.min_cohort`` clients (one-line error otherwise).
        Every client must answer (one-line error naming how many did not)."""
        if secure or self.config.privacy.active:
            layer = self.secure_sum_layer()
            if len(tasks) < layer.cfg.min_cohort:
                raise DataError(f"{call.label()}: a secure sum needs at least privacy.min_cohort="
                                f"{layer.cfg.min_cohort} clients; the federation has {len(tasks)}")
            return layer.secure_sum(call, tasks)
        return total_in_parts(lambda part: all_answered(call, part, self.call(call, part)), tasks)  # bounded memory

    def secure_sum_layer(self) -> PrivacyLayer:
        """The privacy layer secure sums go through (:func:`fedray.layers.stack.secure_layer`), made on first use."""
        if self.secure is None:
            self.secure = secure_layer(self.layers, privacy_settings(self.config), self.config.seed)
            if self.fingerprint is not None:
                self.secure.join_federation(self.fingerprint)
        return self.secure

    def plot_total(self, fn: Any, shared: Any) -> Stats | None:
        """The plots' sums (None under privacy when the federation is too small for a secure sum)."""
        if self.config.privacy.active and not self.can_secure_sum():
            return None
        return self.total(calls.adhoc("plots"), dict.fromkeys(range(self.info.n_clients), Task(fn, None, shared)))

    def projection_2d(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean (d,) and top-2 principal axes (d, 2) of the union (:func:`fedray.api.plotdata.projection_2d`)."""
        return plotdata.projection_2d(self.plot_total, self.info)

    def density_2d(self, bins: int | None = None, projection: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Summed 2-D histogram of the union (:func:`fedray.api.plotdata.density_2d`)."""
        return plotdata.density_2d(self.plot_total, self.info, bins, projection)

    def density_1d(self, bins: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """Summed histogram of a one-feature union (:func:`fedray.api.plotdata.density_1d`)."""
        return plotdata.density_1d(self.plot_total, self.info, bins)

    def close(self) -> None:
        self.runner.close()
        with suppress(Exception):
            self.executor.shutdown()
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

