"""Running algorithms on a session's clients: one run, a resumed run, the server actor, partial saves.

A :class:`Runner` belongs to one :class:`~fedray.api.session.Session` (its ``runner``) and does what
:meth:`Session.run <fedray.api.session.Session.run>` asks: it builds the run's config and the round
loop's :class:`~fedray.loop.settings.ServerSettings`, claims the output folder, drives the round loop
(in this process, or in a server actor on Ray), saves checkpoints and, when a run fails, what it had.

The runner owns the spare server actor: on Ray, a run's server actor is started ahead (its process
starts and imports in the background, about 1 s), for the first run beside the client actors and for a
later run when that run is asked for, never for a run nobody asks for.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from fedray.api import plotdata
from fedray.api.checkpoint import Checkpointer
from fedray.api.config import ExperimentConfig
from fedray.api.drivers import LocalDriver, RayDriver
from fedray.api.federation_config import build_clock
from fedray.api.outputs import prepare, release, run_id_of, write_partial
from fedray.api.progress import Activity, Progress
from fedray.api.results import Result
from fedray.api.settings import privacy_settings
from fedray.api.tracking import Trackers
from fedray.core.contract import Algorithm
from fedray.core.errors import OutputError
from fedray.core.extras import requirements
from fedray.core.registry import algorithm_reference, get_algorithm, make_params
from fedray.layers.privacy import PrivacyLayer
from fedray.layers.stack import begin_private_run, cohort_blocks, find_layer
from fedray.loop.server import round_cap
from fedray.loop.settings import ServerSettings

log = logging.getLogger(__name__)

#: Functions called with each round's history row (``Session.run(on_round=...)``).
OnRound = Sequence[Callable[[dict[str, Any]], None]]


class Runner:
    """Runs algorithms on ``session``'s clients, through its layers (see the module doc)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.spare: Any = None  # a run's server actor, started ahead (ray)

    # --- the server actor ------------------------------------------------------------
    def new_server_actor(self) -> Any:
        """An empty :class:`ServerActor` with the session's runtime environment (a run hands it
        its algorithm with ``start``)."""
        from fedray.actors.server_actor import ServerActor

        return ServerActor.options(runtime_env=self.session.runtime_env or None).remote()

    def prestart(self) -> None:
        """Start a run's server actor ahead (see the module doc). A failure here only means the run starts
        its own."""
        if self.spare is not None:
            return
        try:
            self.spare = self.new_server_actor()
        except Exception as exc:  # noqa: BLE001 - Ray may be going down; the next run starts its own
            log.debug("could not start a server actor ahead: %s", exc)
            self.spare = None

    def close(self) -> None:
        """Kill the server actor started ahead that no run took."""
        spare, self.spare = self.spare, None
        with suppress(Exception):  # Ray may be going down already
            if spare is not None:
                import ray

                ray.kill(spare)

    def driver(self, alg: Algorithm, settings: ServerSettings, resume_from: dict[str, Any] | None) -> Any:
        """Where the run's round loop lives: here, or in a server actor (the one started ahead)."""
        if self.session.config.runtime.backend != "ray":
            return LocalDriver(alg, self.session.layers, settings, resume_from)
        actor, self.spare = self.spare, None
        return RayDriver(alg, self.session.layers, settings, resume_from, actor, self.new_server_actor)

    # --- records of calls outside runs -------------------------------------------------
    def stash_outside_records(self) -> None:
        """Keep what the layers recorded of calls outside runs (set-up, K selection, validation,
        plots) in the session's ``outside_messages``, and start the run's records afresh."""
        s = self.session
        s.outside_messages.extend(s.layers.report().get("messages", []))
        s.layers.reset_records()

    def remember_releases(self, state: dict[str, Any]) -> None:
        """Fold the sums a run released (on Ray, by the server actor's copy of the layers) into the
        session's privacy layer, so that the release rule compares later calls with them too."""
        own = find_layer(self.session.layers, PrivacyLayer)
        rows = ((state.get("report") or {}).get("privacy") or {}).get("releases", [])
        if own is not None and rows:
            own.remember(rows)

    # --- one run -----------------------------------------------------------------------
    def preload_for(self, algorithm: Any) -> None:
        """Start importing what the run's algorithm needs (torch) in the clients' processes, beside the
        driver's own work; an unknown name is left for ``make_algorithm`` to report."""
        s = self.session
        try:
            cls = (type(algorithm) if isinstance(algorithm, Algorithm) else algorithm if isinstance(algorithm, type)
                   else get_algorithm(algorithm) if algorithm else s.algorithm_cls)
            packages = requirements(cls)
        except Exception:  # noqa: BLE001 - make_algorithm raises the one-line error
            return
        if packages and packages != s.preloaded:
            s.executor.preload(packages)
            s.preloaded = packages

    def run(self, algorithm: str | type[Algorithm] | Algorithm | None = None, params: dict[str, Any] | None = None,
            *, output: str | Path | None | bool = None, progress: bool | None = None,
            central_baseline: bool | None = None, resume_from: dict[str, Any] | None = None,
            on_round: OnRound = ()) -> Result:
        """:meth:`fedray.api.session.Session.run`."""
        t0 = time.perf_counter()
        if self.session.config.runtime.backend == "ray":
            self.prestart()  # this run's server process starts beside its set-up
        self.preload_for(algorithm)
        if resume_from is not None:
            alg = resume_from["server"]["algorithm"]
        else:
            alg = algorithm if isinstance(algorithm, Algorithm) else self.session.make_algorithm(algorithm, params)
        cfg, settings, cap, budget = self.run_config(alg, resume_from)
        out = cfg.output.directory if output is None else (None if output is False else output)
        Trackers(cfg, out).check()  # a bad tracking URI fails before the folder is written
        if out:
            prepare(out, cfg.output.overwrite, resuming=resume_from is not None,
                    run_id=None if resume_from is None else resume_from.get("run_id"))
        try:
            return self._run(alg, cfg, settings, (cap, budget), out, progress, central_baseline, resume_from, t0,
                             on_round)
        finally:
            if out:
                release(out)

    def _run(self, alg: Algorithm, cfg: ExperimentConfig, settings: ServerSettings,
             cap_budget: tuple[int, int | None], out: Any, progress: bool | None, central_baseline: bool | None,
             resume_from: dict[str, Any] | None, t0: float, on_round: OnRound = ()) -> Result:
        """The run itself, in the output folder ``out`` claimed for it."""
        s = self.session
        checkpoint = Checkpointer(cfg, out, s, None if resume_from is None else resume_from.get("run_id")) \
            if cfg.checkpoint.every else None
        begin_private_run(s.layers, alg.name, privacy_settings(cfg), cfg.seed, out,
                          (checkpoint.run_id if checkpoint is not None else None)
                          or (resume_from or {}).get("run_id") or (run_id_of(out) if out else None))
        if resume_from is not None and resume_from.get("clients"):
            s.executor.set_state(resume_from["clients"])
        self.stash_outside_records()
        show = progress if progress is not None else cfg.runtime.progress
        cap, budget = cap_budget
        bar = Progress(alg.name, min(cap, budget) if budget else cap, show)
        ending = None
        trackers = Trackers(cfg, out, None if resume_from is None else int(resume_from["server"]["round"]))
        driver = self.driver(alg, settings, resume_from)
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
            self.remember_releases(state)
        except BaseException as exc:
            if ending is not None:
                ending.close()
            trackers.close("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
            if out:
                self.save_partial(out, exc, driver.state, cfg)
            raise
        finally:
            bar.close()
            driver.close()  # also when the run fails or is interrupted
            s.layers.reset_records()  # the run's records are in its state (its Result)
            if (own := find_layer(s.layers, PrivacyLayer)) is not None:
                own.end_run()
        status = "FAILED"
        try:
            ending.stage("central baseline and outputs")
            result = self.complete(cfg, alg, state, model, final, t0, out, central_baseline)
            trackers.finish(result)
            status = "FINISHED"
        finally:
            ending.close()
            trackers.close(status)
        return result

    def run_config(self, alg: Algorithm, resume_from: dict[str, Any] | None
                   ) -> tuple[ExperimentConfig, ServerSettings, int, int | None]:
        """The run's config (with the round cap it has), the round loop's settings, the cap and the budget."""
        s = self.session
        fed = s.config.federation
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
            update["algorithm"] = self.algorithm_entry(alg)
        cfg = s.config.model_copy(update=update)
        fed = cfg.federation
        blocks = cohort_blocks(privacy_settings(cfg), fed.fraction, len(s.federation.specs), s.layers)
        settings = ServerSettings(seed=cfg.seed, fraction=fed.fraction, max_rounds=cap, min_clients=fed.min_clients,
                                  round_timeout=cfg.runtime.round_timeout, round_retries=fed.round_retries,
                                  blocks=blocks, clock=build_clock(cfg, s.info, alg))
        return cfg, settings, cap, budget

    def algorithm_entry(self, alg: Algorithm) -> Any:
        """The ``algorithm`` section of a run's config: the session's own, or the algorithm and parameters
        this run was given (``run("flacc", ...)`` on a session configured for another)."""
        s = self.session
        own = s.config.algorithm
        if type(alg) is s.algorithm_cls and alg.params == make_params(s.algorithm_cls, own.params):
            return own
        ref = algorithm_reference(type(alg))
        if ref is None:  # a class no name reaches: resuming takes it from the checkpoint's state
            log.debug("%s: no importable name; the run's config keeps algorithm %r", type(alg).__qualname__, own.name)
            return own
        return own.model_copy(update={"name": ref, "params": alg.params.model_dump()})

    def complete(self, cfg: ExperimentConfig, alg: Algorithm, state: dict[str, Any], model: dict[str, Any],
                 final: dict[str, Any], t0: float, out: Any, central_baseline: bool | None) -> Result:
        """The run's :class:`Result`, its central baseline and its output folder."""
        s = self.session
        cov = final.get("evaluation_coverage")
        if cov and cov["clients"] < cov["of_clients"]:
            log.warning("evaluation covers %d of %d clients (%d of %d samples): the final metrics describe only "
                        "those; missing clients: %s", cov["clients"], cov["of_clients"], cov["samples"],
                        cov["of_samples"], cov["missing"][:20])
        result = Result.build(cfg, alg, s, state, model, final, time.perf_counter() - t0)
        if central_baseline if central_baseline is not None else cfg.evaluation.central_baseline:
            result.add_central_baseline(s)
        if out:
            plots = cfg.output.plots
            data = plotdata.gather(s.plot_total, s.info, result.model) if plots else None
            try:
                result.save(out, plots=plots, plot_data=data)
            except OSError as exc:  # a full disk, a lost mount: one line naming the folder and the cause
                raise OutputError(f"output folder {str(out)!r} cannot be written: {exc.strerror or exc} "
                                  f"({Path(exc.filename).name if exc.filename else 'outputs'}); the run itself "
                                  "finished, free space and run it again") from None
        return result

    def save_partial(self, out: str | Path, exc: BaseException, state_of: Any, cfg: Any = None) -> None:
        """Write what a failed run has (see :func:`fedray.api.outputs.write_partial`)."""
        try:
            state = state_of()
        except Exception:  # noqa: BLE001 - the server itself may be gone
            state = None
        try:
            write_partial(out, cfg if cfg is not None else self.session.config, state, exc)
            log.warning("the run failed after %d round(s); wrote what it had (config, history, failures) to %s",
                        len((state or {}).get("history") or []), out)
        except OSError as err:
            log.warning("the run failed and its partial outputs could not be written to %s: %s", out, err)
