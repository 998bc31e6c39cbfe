"""A session: one federation's clients, built once, reused by any number of runs.

``Session(cfg)`` builds the client recipes, starts the runtime (an embedded Ray
instance if needed), builds the shards where the clients live, checks the data
through per-client summaries and applies scaling computed from those summaries.
:meth:`Session.run` then runs an algorithm on the same clients; K selection and
sweeps run many algorithms on one session without rebuilding shards.
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
from fedray.api.checkpoint import Checkpointer
from fedray.api.config import ExperimentConfig, make_config
from fedray.api.drivers import LocalDriver, RayDriver
from fedray.api.federation_config import build_clock
from fedray.api.outputs import prepare, release, run_id_of, write_partial
from fedray.api.progress import Activity, Progress, startup_line
from fedray.api.results import Result
from fedray.api.scale import all_answered, feature_box, total_in_parts
from fedray.api.tracking import Trackers
from fedray.core import calls
from fedray.core.calls import Call
from fedray.core.contract import Algorithm, FederationInfo, Task
from fedray.core.errors import DataError, OutputError
from fedray.core.extras import requirements
from fedray.core.registry import algorithm_reference, check_algorithm_class, get_algorithm, make_params
from fedray.core.stats import Stats
from fedray.data.checks import Descriptions, check_descriptions, check_magnitude, column_moments
from fedray.data.federation import Federation, build_federation, check_memory, shard_residency
from fedray.layers.privacy import PrivacyLayer
from fedray.layers.stack import begin_private_run, build_stack, cohort_blocks, find_layer, join_federation, secure_layer
from fedray.loop.server import round_cap
from fedray.loop.settings import ServerSettings
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
        self._preloaded = requirements(self.algorithm_cls)
        check_memory(cfg)
        rt = cfg.runtime
        self._started_ray = False
        self._spare_server: Any = None  # the first run's server actor, started ahead (ray)
        self.runtime_env: dict[str, Any] | None = None  # given to every actor (fedray.runtime.shipping)
        act = Activity("start-up", rt.progress)  # what start-up does, with its seconds, while it runs
        try:
            n = cfg.federation.n_clients
            act.stage(f"reading {cfg.data.dataset}" + (f" into {n} clients" if n else ""), "data")
            self.federation: Federation = build_federation(cfg.data, cfg.federation.n_clients, cfg.seed)
            if rt.backend == "ray":
                act.stage(f"connecting to Ray at {rt.address}" if rt.address else "starting Ray on this machine",
                          "Ray")
                self._started_ray = ensure_ray(rt.address, rt.num_cpus, cfg=cfg)
                self.runtime_env = actor_runtime_env(cfg)
                self._prestart_server()  # the first run's: its process starts while the shards are built
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
                                                    rt, runtime_env=self.runtime_env, preload=self._preloaded,
                                                    resident=self.resident)
            # The one layer stack every call to clients goes through (training, evaluation, set-up,
            # K selection, validation, plots); each run starts its records afresh.
            self.layers: Executor = build_stack(self.executor, cfg, self.disclosures)
            self._secure: PrivacyLayer | None = None
            self.fingerprint: str | None = None  # of the federation, once its set-up moments are summed
            act.stage("checking the data (per-client summaries)", "data checks")
            self.descriptions: Descriptions = (self.executor.describe(private=True) if cfg.privacy.active
                                               else self.executor.describe())
            self.info, self.scaler = self._check_and_scale(self.descriptions)
            self.descriptions.drop_moments()  # summed already; per client they would stay for nothing
        except BaseException:
            act.close()
            self.close()
            raise
        self.startup_s = time.perf_counter() - t0
        act.close(startup_line(self.startup_s, act.stages))
        self.startup_stages: dict[str, float] = act.stages  # seconds of each start-up step (summary.json)
        log.info("session ready: %d clients on %s in %.2f s", self.info.n_clients, rt.backend, self.startup_s)

    # --- data checks and scaling --------------------------------------------
    def _check_and_scale(self, desc: Descriptions) -> tuple[FederationInfo, tuple[np.ndarray, np.ndarray] | None]:
        names = self.federation.feature_names
        n_features = check_descriptions(desc)
        n = desc.n
        N = float(n.sum())
        if self.config.privacy.active:
            s, ss, lo, hi = self._private_moments(n_features, N, names)
        else:  # per-client moments as rows, summed over clients in id order
            s, ss, lo, hi = desc.totals()
            check_magnitude(lo, hi, N, names)
        scaler = None
        mode = self.config.data.scale
        # the federation's release log (fedray.layers.stack.join_federation), shared by its sessions
        self.fingerprint = join_federation([sp.name for sp in self.federation.specs], n, n_features, (s, ss),
                                           (find_layer(self.layers, PrivacyLayer), self._secure))
        if self.config.privacy.feature_bounds is not None:  # the user's box, also for random starts and plots
            lo, hi = feature_box(self.config.privacy.feature_bounds, n_features)
        if mode == "standard":
            mean = s / N
            std = np.sqrt(np.maximum(ss / N - mean ** 2, 0.0))
            scaler = (mean, np.where(std > 0, std, 1.0))
        elif mode == "minmax":
            rng = hi - lo
            scaler = (lo, np.where(rng > 0, rng, 1.0))
        if scaler is not None:
            self.executor.apply_scaler(*scaler)
            lo, hi = (lo - scaler[0]) / scaler[1], (hi - scaler[0]) / scaler[1]
        n_classes = self.federation.n_classes or (int(desc.classes.max()) + 1 if desc.classes.size else None)
        info = FederationInfo(n_clients=len(desc), n_features=n_features, sample_shape=self.federation.sample_shape,
                              n_samples=n, feature_min=lo, feature_max=hi, n_classes=n_classes,
                              has_labels=self.federation.has_labels,
                              extras={**self.federation.extras, "feature_names": names})
        return info, scaler

    def _private_moments(self, n_features: int, N: float, names: Any) -> tuple[np.ndarray, ...]:
        """Column sums and sums of squares through secure aggregation (no per-client moment or
        extreme reaches the server), and a box for the federation: ``privacy.feature_bounds`` if
        given, else mean +- 3 standard deviations (not the data's extremes)."""
        p = self.config.privacy
        tasks = dict.fromkeys(range(len(self.federation.specs)), Task(column_moments, None, None))
        if self._can_secure_sum():
            t = self._secure_layer().secure_sum(calls.setup("moments"), tasks)
        else:  # too few clients for a secure sum: per-client moments reach the server (counted)
            res = self.call(calls.setup("moments"), tasks)
            t = sum((r.update for r in res.replies[1:]), start=res.replies[0].update)
            self.disclosures["setup_moments"] = len(res.replies)
        s, ss = t["s"], t["ss"]
        with np.errstate(over="ignore", invalid="ignore"):
            big = np.sqrt(ss)  # bounds every |x| of the union
        check_magnitude(-big, big, N, names)
        if p.feature_bounds is not None:
            lo, hi = feature_box(p.feature_bounds, n_features)
        else:
            mean = s / N
            std = np.sqrt(np.maximum(ss / N - mean ** 2, 0.0))
            lo, hi = mean - 3 * std, mean + 3 * std
        return s, ss, lo, hi

    def _can_secure_sum(self) -> bool:
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

    def _preload_for(self, algorithm: Any) -> None:
        """Start importing what the run's algorithm needs (torch) in the clients' processes, beside the
        driver's own work; an unknown name is left for :meth:`make_algorithm` to report."""
        try:
            cls = (type(algorithm) if isinstance(algorithm, Algorithm) else algorithm if isinstance(algorithm, type)
                   else get_algorithm(algorithm) if algorithm else self.algorithm_cls)
            packages = requirements(cls)
        except Exception:  # noqa: BLE001 - make_algorithm raises the one-line error
            return
        if packages and packages != self._preloaded:
            self.executor.preload(packages)
            self._preloaded = packages

    def run(self, algorithm: str | type[Algorithm] | Algorithm | None = None, params: dict[str, Any] | None = None, *,
            output: str | Path | None | bool = None, progress: bool | None = None,
            central_baseline: bool | None = None, resume_from: dict[str, Any] | None = None,
            on_round: Sequence[Callable[[dict[str, Any]], None]] = ()) -> Result:
        """Run one algorithm on this session's clients and return its :class:`Result`.

        ``resume_from`` is a checkpoint loaded by :func:`fedray.api.checkpoint.load` (used by
        :func:`fedray.api.run.resume`): the run continues after its last saved round.
        ``on_round``: functions called with each round's history row, after the round's
        checkpoint (when one is due) is saved (e.g. :mod:`fedray.analysis.tune` reports to Tune).
        """
        t0 = time.perf_counter()
        if self.config.runtime.backend == "ray":
            self._prestart_server()  # a later run's server process starts beside this run's set-up
        self._preload_for(algorithm)
        if resume_from is not None:
            alg = resume_from["server"]["algorithm"]
        else:
            alg = algorithm if isinstance(algorithm, Algorithm) else self.make_algorithm(algorithm, params)
        cfg, settings, cap, budget = self._run_config(alg, resume_from)
        out = cfg.output.directory if output is None else (None if output is False else output)
        Trackers(cfg, out).check()  # a bad tracking URI fails before the folder is written
        if out:
            prepare(out, cfg.output.overwrite, resuming=resume_from is not None,
                    run_id=None if resume_from is None else resume_from.get("run_id"))
        try:
            return self._run(alg, cfg, settings, cap, budget, out, progress, central_baseline, resume_from, t0,
                             on_round)
        finally:
            if out:
                release(out)

    def _run(self, alg: Algorithm, cfg: ExperimentConfig, settings: ServerSettings, cap: int, budget: int | None,
             out: Any, progress: bool | None, central_baseline: bool | None, resume_from: dict[str, Any] | None,
             t0: float, on_round: Sequence[Callable[[dict[str, Any]], None]] = ()) -> Result:
        """The run itself, in the output folder ``out`` claimed for it."""
        checkpoint = Checkpointer(cfg, out, self, None if resume_from is None else resume_from.get("run_id")) \
            if cfg.checkpoint.every else None
        begin_private_run(self.layers, alg.name, cfg, out, (checkpoint.run_id if checkpoint is not None else None)
                          or (resume_from or {}).get("run_id") or (run_id_of(out) if out else None))
        if resume_from is not None and resume_from.get("clients"):
            self.executor.set_state(resume_from["clients"])
        self._stash_outside_records()
        show = progress if progress is not None else cfg.runtime.progress
        bar = Progress(alg.name, min(cap, budget) if budget else cap, show)
        ending = None
        trackers = Trackers(cfg, out, None if resume_from is None else int(resume_from["server"]["round"]))
        driver = self._driver(alg, settings, resume_from)
        try:
            trackers.start()
            driver.begin()
            while (row := driver.step()) is not None:
                if checkpoint is not None:
                    checkpoint.after_round(row["round"], driver.snapshot)
                bar.update(row)
                trackers.log_round(row)
                for fn in on_round:
                    fn(row)
            bar.close()
            ending = Activity(alg.name, show, lazy=True)  # said only when it lasts (a large federation)
            ending.stage("final evaluation")
            final, model, state = driver.finish()
            for note in state.get("notes", ()):  # the server's warnings, here rather than tagged with its actor
                log.warning("%s", note)
            self._remember_releases(state)
        except BaseException as exc:
            if ending is not None:
                ending.close()
            trackers.close("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
            if out:
                self._save_partial(out, exc, driver.state, cfg)
            raise
        finally:
            bar.close()
            driver.close()  # also when the run fails or is interrupted
            self.layers.reset_records()  # the run's records are in its state (its Result)
            if (own := find_layer(self.layers, PrivacyLayer)) is not None:
                own.end_run()
        status = "FAILED"
        try:
            ending.stage("central baseline and outputs")
            result = self._complete(cfg, alg, state, model, final, t0, out, central_baseline)
            trackers.finish(result)
            status = "FINISHED"
        finally:
            ending.close()
            trackers.close(status)
        return result

    def _run_config(self, alg: Algorithm, resume_from: dict[str, Any] | None
                    ) -> tuple[ExperimentConfig, ServerSettings, int, int | None]:
        """The run's config (with the round cap it has), the round loop's settings, the cap and the budget."""
        fed = self.config.federation
        budget = alg.round_budget()
        if resume_from is not None:  # the cap the interrupted run had
            cap = int(resume_from["server"].get("max_rounds") or round_cap(fed.rounds, budget))
        else:
            cap = round_cap(fed.rounds, budget)
        if fed.rounds is None:
            log.debug("%s: round cap %d (federation.rounds unset; the algorithm's budget is %s)", alg.name, cap, budget)
        # the run's config says which cap it had, and which algorithm (config.yaml, summary.json, checkpoints)
        update: dict[str, Any] = {"federation": fed.model_copy(update={"rounds": cap})}
        if resume_from is None:
            update["algorithm"] = self._algorithm_entry(alg)
        cfg = self.config.model_copy(update=update)
        fed = cfg.federation
        settings = ServerSettings(seed=cfg.seed, fraction=fed.fraction, max_rounds=cap, min_clients=fed.min_clients,
                                  round_timeout=cfg.runtime.round_timeout, round_retries=fed.round_retries,
                                  blocks=cohort_blocks(cfg, len(self.federation.specs), self.layers),
                                  clock=build_clock(cfg, self.info, alg))
        return cfg, settings, cap, budget

    def _algorithm_entry(self, alg: Algorithm) -> Any:
        """The ``algorithm`` section of a run's config: the session's own, or the algorithm and parameters
        this run was given (``run("flacc", ...)`` on a session configured for another)."""
        own = self.config.algorithm
        if type(alg) is self.algorithm_cls and alg.params == make_params(self.algorithm_cls, own.params):
            return own
        ref = algorithm_reference(type(alg))
        if ref is None:  # a class no name reaches: resuming takes it from the checkpoint's state
            log.debug("%s: no importable name; the run's config keeps algorithm %r", type(alg).__qualname__, own.name)
            return own
        return own.model_copy(update={"name": ref, "params": alg.params.model_dump()})

    def _driver(self, alg: Algorithm, settings: ServerSettings, resume_from: dict[str, Any] | None) -> Any:
        """Where the run's round loop lives: here, or in a server actor (the one started ahead)."""
        if self.config.runtime.backend != "ray":
            return LocalDriver(alg, self.layers, settings, resume_from)
        actor, self._spare_server = self._spare_server, None  # started ahead (_prestart_server)
        return RayDriver(alg, self.layers, settings, resume_from, actor, self._new_server_actor)

    def _complete(self, cfg: ExperimentConfig, alg: Algorithm, state: dict[str, Any], model: dict[str, Any],
                  final: dict[str, Any], t0: float, out: Any, central_baseline: bool | None) -> Result:
        """The run's :class:`Result`, its central baseline and its output folder."""
        cov = final.get("evaluation_coverage")
        if cov and cov["clients"] < cov["of_clients"]:
            log.warning("evaluation covers %d of %d clients (%d of %d samples): the final metrics describe only "
                        "those; missing clients: %s", cov["clients"], cov["of_clients"], cov["samples"],
                        cov["of_samples"], cov["missing"][:20])
        result = Result.build(cfg, alg, self, state, model, final, time.perf_counter() - t0)
        if central_baseline if central_baseline is not None else cfg.evaluation.central_baseline:
            result.add_central_baseline(self)
        if out:
            plots = cfg.output.plots
            data = plotdata.gather(self._plot_total, self.info, result.model) if plots else None
            try:
                result.save(out, plots=plots, plot_data=data)
            except OSError as exc:  # a full disk, a lost mount: one line naming the folder and the cause
                raise OutputError(f"output folder {str(out)!r} cannot be written: {exc.strerror or exc} "
                                  f"({Path(exc.filename).name if exc.filename else 'outputs'}); the run itself "
                                  "finished, free space and run it again") from None
        return result

    def _save_partial(self, out: str | Path, exc: BaseException, state_of: Any, cfg: Any = None) -> None:
        """Write what a failed run has (see :func:`fedray.api.outputs.write_partial`)."""
        try:
            state = state_of()
        except Exception:  # noqa: BLE001 - the server itself may be gone
            state = None
        try:
            write_partial(out, cfg if cfg is not None else self.config, state, exc)
            log.warning("the run failed after %d round(s); wrote what it had (config, history, failures) to %s",
                        len((state or {}).get("history") or []), out)
        except OSError as err:
            log.warning("the run failed and its partial outputs could not be written to %s: %s", out, err)

    # --- calls outside a run ------------------------------------------------------
    def _stash_outside_records(self) -> None:
        """Keep what the layers recorded of calls outside runs (set-up, K selection, validation,
        plots) in :attr:`outside_messages`, and start the run's records afresh."""
        self.outside_messages.extend(self.layers.report().get("messages", []))
        self.layers.reset_records()

    def _remember_releases(self, state: dict[str, Any]) -> None:
        """Fold the sums a run released (on Ray, by the server actor's copy of the layers) into the
        session's privacy layer, so that the release rule compares later calls with them too."""
        own = find_layer(self.layers, PrivacyLayer)
        rows = ((state.get("report") or {}).get("privacy") or {}).get("releases", [])
        if own is not None and rows:
            own.remember(rows)

    def outside_records(self) -> dict[str, Any]:
        """The message-log rows of every call outside runs so far (``messages``; with
        ``output.messages``), the disclosures counted outside runs (``disclosures``) and the
        statistics released to the server by them (``releases``, rows as in a run's account)."""
        layers = {id(x): x for x in (find_layer(self.layers, PrivacyLayer), self._secure) if x is not None}
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
            layer = self._secure_layer()
            if len(tasks) < layer.cfg.min_cohort:
                raise DataError(f"{call.label()}: a secure sum needs at least privacy.min_cohort="
                                f"{layer.cfg.min_cohort} clients; the federation has {len(tasks)}")
            return layer.secure_sum(call, tasks)
        return total_in_parts(lambda part: all_answered(call, part, self.call(call, part)), tasks)  # bounded memory

    def _secure_layer(self) -> PrivacyLayer:
        if self._secure is None:
            self._secure = secure_layer(self.layers, self.config)
            if self.fingerprint is not None:
                self._secure.join_federation(self.fingerprint)
        return self._secure

    def _plot_total(self, fn: Any, shared: Any) -> Stats | None:
        """The plots' sums (None under privacy when the federation is too small for a secure sum)."""
        if self.config.privacy.active and not self._can_secure_sum():
            return None
        return self.total(calls.adhoc("plots"), dict.fromkeys(range(self.info.n_clients), Task(fn, None, shared)))

    def projection_2d(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean (d,) and top-2 principal axes (d, 2) of the union (:func:`fedray.api.plotdata.projection_2d`)."""
        return plotdata.projection_2d(self._plot_total, self.info)

    def density_2d(self, bins: int | None = None, projection: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Summed 2-D histogram of the union (:func:`fedray.api.plotdata.density_2d`)."""
        return plotdata.density_2d(self._plot_total, self.info, bins, projection)

    def density_1d(self, bins: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """Summed histogram of a one-feature union (:func:`fedray.api.plotdata.density_1d`)."""
        return plotdata.density_1d(self._plot_total, self.info, bins)

    def _new_server_actor(self) -> Any:
        """An empty :class:`ServerActor` with this session's runtime environment (a run hands it
        its algorithm with ``start``)."""
        from fedray.actors.server_actor import ServerActor

        return ServerActor.options(runtime_env=self.runtime_env or None).remote()

    def _prestart_server(self) -> None:
        """Start a run's server actor ahead (its process starts and imports in the background, about 1 s):
        for the first run beside the client actors, for a later run when it is asked for, so no actor is
        started for a run that never comes. A failure here only means the run starts its own."""
        if self._spare_server is not None:
            return
        try:
            self._spare_server = self._new_server_actor()
        except Exception as exc:  # noqa: BLE001 - Ray may be going down; the next run starts its own
            log.debug("could not start a server actor ahead: %s", exc)
            self._spare_server = None

    def close(self) -> None:
        spare, self._spare_server = self._spare_server, None
        with suppress(Exception):  # Ray may be going down already
            if spare is not None:
                import ray

                ray.kill(spare)
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

