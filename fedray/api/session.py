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
from pathlib import Path
from typing import Any

import numpy as np

from fedray.api.config import ExperimentConfig, make_config
from fedray.api.progress import Progress
from fedray.api.results import Result
from fedray.core.contract import Algorithm, FederationInfo, Task
from fedray.core.errors import ConfigError, RoundFailedError
from fedray.core.extras import requirements
from fedray.core.registry import get_algorithm, make_params
from fedray.core.stats import Stats
from fedray.data.checks import check_descriptions, check_magnitude
from fedray.data.federation import Federation, build_federation, check_memory
from fedray.loop.server import Server, round_cap
from fedray.runtime.backends import make_executor
from fedray.runtime.executor import Executor
from fedray.runtime.ray_executor import ensure_ray

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
        self.config: ExperimentConfig = make_config(config, **kwargs) if (kwargs or not isinstance(config, ExperimentConfig)) else config
        cfg = self.config
        self.algorithm_cls = get_algorithm(cfg.algorithm.name)
        # torch for the neural methods: the client actors import it while they build their shards
        self._preloaded = requirements(self.algorithm_cls)
        check_memory(cfg)
        self.federation: Federation = build_federation(cfg.data, cfg.federation.n_clients, cfg.seed)
        rt = cfg.runtime
        self._started_ray = False
        self._spare_server: Any = None  # a server actor started ahead for the next run (ray)
        self.runtime_env: dict[str, Any] | None = None  # given to every actor (fedray.runtime.shipping)
        if rt.backend == "ray":
            from fedray.runtime.shipping import actor_runtime_env

            self._started_ray = ensure_ray(rt.address, rt.num_cpus, cfg=cfg)
            self.runtime_env = actor_runtime_env(cfg)
            self._prestart_server()  # its process starts while the client actors build their shards
        # Disclosures outside the protected path, counted for the privacy summary (fedray.layers.privacy).
        self.disclosures: dict[str, int] = {}
        try:
            self.executor: Executor = make_executor(rt.backend, self.federation.specs, cfg.seed,
                                                    self.algorithm_cls.supervised, self.federation.sample_shape,
                                                    rt, runtime_env=self.runtime_env, preload=self._preloaded)
            self.descriptions = self.executor.describe(private=True) if cfg.privacy.active else self.executor.describe()
            self.info, self.scaler = self._check_and_scale(self.descriptions)
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - t0
        log.info("session ready: %d clients on %s in %.2f s", self.info.n_clients, rt.backend, self.startup_s)

    # --- data checks and scaling --------------------------------------------
    def _check_and_scale(self, desc: list[dict[str, Any]]) -> tuple[FederationInfo, tuple[np.ndarray, np.ndarray] | None]:
        names = self.federation.feature_names
        n_features = check_descriptions(desc)
        n = np.array([d["n"] for d in desc], dtype=np.int64)
        N = float(n.sum())
        if self.config.privacy.active:
            s, ss, lo, hi = self._private_moments(n_features, N, names)
        else:
            s = np.sum([d["sum"] for d in desc], axis=0)
            ss = np.sum([d["sumsq"] for d in desc], axis=0)
            lo = np.min([d["min"] for d in desc], axis=0)
            hi = np.max([d["max"] for d in desc], axis=0)
            check_magnitude(lo, hi, N, names)
        scaler = None
        mode = self.config.data.scale
        if self.config.privacy.feature_bounds is not None:  # the user's box, also for random starts and plots
            lo, hi = _bounds(self.config.privacy.feature_bounds, n_features)
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
        classes = set()
        for d in desc:
            classes.update(int(c) for c in d.get("classes", ()))
        n_classes = self.federation.n_classes or (max(classes) + 1 if classes else None)
        info = FederationInfo(n_clients=len(desc), n_features=n_features, sample_shape=self.federation.sample_shape,
                              n_samples=n, feature_min=lo, feature_max=hi, n_classes=n_classes,
                              has_labels=self.federation.has_labels, extras={**self.federation.extras, "feature_names": names})
        return info, scaler

    def _private_moments(self, n_features: int, N: float, names: Any) -> tuple[np.ndarray, ...]:
        """Column sums and sums of squares through secure aggregation (no per-client moment or
        extreme reaches the server), and a box for the federation: ``privacy.feature_bounds`` if
        given, else mean +- 3 standard deviations (not the data's extremes)."""
        p = self.config.privacy
        if self._can_secure_sum():
            from fedray.layers.privacy import secure_total

            t = secure_total(self.executor, p, self.config.seed,
                             {c: Task(_moment_stats, None, None) for c in range(len(self.federation.specs))}, -1000)
        else:  # too few clients for a secure sum: per-client moments reach the server (counted)
            res = self.execute({c: Task(_moment_stats, None, None) for c in range(len(self.federation.specs))})
            t = sum((r.update for r in res.replies[1:]), start=res.replies[0].update)
            self.disclosures["setup_moments"] = len(res.replies)
        s, ss = t["s"], t["ss"]
        with np.errstate(over="ignore", invalid="ignore"):
            big = np.sqrt(ss)  # bounds every |x| of the union
        check_magnitude(-big, big, N, names)
        if p.feature_bounds is not None:
            lo, hi = _bounds(p.feature_bounds, n_features)
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
            from fedray.core.registry import check_algorithm_class

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
            central_baseline: bool | None = None, resume_from: dict[str, Any] | None = None) -> Result:
        """Run one algorithm on this session's clients and return its :class:`Result`.

        ``resume_from`` is a checkpoint loaded by :func:`fedray.api.checkpoint.load` (used by
        :func:`fedray.api.checkpoint.resume`): the run continues after its last saved round.
        """
        cfg = self.config
        t0 = time.perf_counter()
        self._preload_for(algorithm)
        if resume_from is not None:
            alg = resume_from["server"]["algorithm"]
        else:
            alg = algorithm if isinstance(algorithm, Algorithm) else self.make_algorithm(algorithm, params)
        fed = cfg.federation
        budget = alg.round_budget()
        if resume_from is not None:  # the cap the interrupted run had
            cap = int(resume_from["server"].get("max_rounds") or round_cap(fed.rounds, budget))
        else:
            cap = round_cap(fed.rounds, budget)
        if fed.rounds is None:
            log.debug("%s: round cap %d (federation.rounds unset; the algorithm's budget is %s)", alg.name, cap, budget)
        # the run's config says which cap it had (config.yaml, summary.json, checkpoints)
        cfg = cfg.model_copy(update={"federation": fed.model_copy(update={"rounds": cap})})
        fed = cfg.federation
        kwargs = dict(seed=cfg.seed, fraction=fed.fraction, max_rounds=cap, min_clients=fed.min_clients,
                      round_timeout=cfg.runtime.round_timeout, round_retries=fed.round_retries)
        out = cfg.output.directory if output is None else (None if output is False else output)
        executor = self.executor
        if cfg.faults.active or cfg.output.messages or cfg.output.message_payloads or cfg.privacy.active:
            executor = _layers(executor, cfg, self.disclosures)
        if out:
            from fedray.api.outputs import prepare

            prepare(out, cfg.output.overwrite, resuming=resume_from is not None)
        checkpoint = None
        if cfg.checkpoint.every:
            from fedray.api.checkpoint import Checkpointer

            checkpoint = Checkpointer(cfg, out, self)
        if resume_from is not None and resume_from.get("clients"):
            self.executor.set_state(resume_from["clients"])
        bar = Progress(alg.name, min(cap, budget) if budget else cap,
                       progress if progress is not None else cfg.runtime.progress)
        if cfg.runtime.backend == "ray":
            import ray

            server, self._spare_server = self._spare_server, None  # started ahead (_prestart_server)
            ahead = server is not None
            if server is None:
                server = self._new_server_actor()

            def begin() -> None:
                nonlocal server
                args = (alg, executor, kwargs, logging.getLogger("fedray").getEffectiveLevel())
                try:
                    _server_call(server.start.remote(*args))
                except RoundFailedError:
                    if not ahead:
                        raise
                    # the actor started ahead died while it waited (a lost node, the OOM killer): a new one
                    log.warning("the server actor started ahead for this run is gone; starting a new one")
                    ray.kill(server)
                    server = self._new_server_actor()
                    _server_call(server.start.remote(*args))
                if resume_from is not None:
                    _server_call(server.restore.remote(resume_from["server"]))

            step = lambda: _server_call(server.step.remote())  # noqa: E731
            finish = lambda: _server_call([server.evaluate.remote(), server.result.remote(), server.state.remote()])  # noqa: E731
            snapshot = lambda: _server_call(server.snapshot.remote())  # noqa: E731
            state_of = lambda: _server_call(server.state.remote(), timeout=30)  # noqa: E731
        else:
            local = Server(alg, executor, **kwargs)
            if resume_from is not None:
                local.restore(resume_from["server"])
            begin = lambda: None  # noqa: E731
            step = local.step
            finish = lambda: [local.evaluate(), local.result(), local.state()]  # noqa: E731
            snapshot = local.snapshot
            state_of = local.state
        try:
            begin()
            while (row := step()) is not None:
                if checkpoint is not None:
                    checkpoint.after_round(row["round"], snapshot)
                bar.update(row)
            final, model, state = finish()
        except BaseException as exc:
            if out:
                self._save_partial(out, exc, state_of, cfg)
            raise
        finally:
            bar.close()
            if cfg.runtime.backend == "ray":
                ray.kill(server)  # also when the run fails or is interrupted
                self._prestart_server()  # the next run's, started while this one's results are built
        cov = final.get("evaluation_coverage")
        if cov and cov["clients"] < cov["of_clients"]:
            log.warning("evaluation covers %d of %d clients (%d of %d samples): the final metrics describe only "
                        "those; missing clients: %s", cov["clients"], cov["of_clients"], cov["samples"],
                        cov["of_samples"], cov["missing"][:20])
        result = Result.build(cfg, alg, self, state, model, final, time.perf_counter() - t0)
        if central_baseline if central_baseline is not None else cfg.evaluation.central_baseline:
            result.add_central_baseline(self)
        if out:
            result.save(out, plots=cfg.output.plots, session=self)
        return result

    def _save_partial(self, out: str | Path, exc: BaseException, state_of: Any, cfg: Any = None) -> None:
        """Write what a failed run has (see :func:`fedray.api.outputs.write_partial`)."""
        from fedray.api.outputs import write_partial

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

    def execute(self, tasks: dict[int, Task], round_: int = -100):
        """Run ad-hoc tasks on clients (evaluation helpers); returns the executor's result."""
        return self.executor.execute(round_, tasks, None)

    def projection_2d(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and top-2 principal axes of the union, from summed per-client moments (no rows move).

        Returns (mean of shape (n_features,), axes of shape (n_features, 2)).
        """
        d = self.info.n_features
        if d == 2:
            return np.zeros(2), np.eye(2)
        t = self._sum_over_clients(_moments, None)
        if t is None:  # under privacy with too few clients for a secure sum: the first two features
            return np.zeros(d), np.eye(d)[:, :2]
        n, s, ss = float(t["n"]), t["sum"], t["outer"]
        mean = s / n
        cov = ss / n - np.outer(mean, mean)
        w, v = np.linalg.eigh(cov)
        axes = v[:, ::-1][:, :2]
        axes = axes * np.sign(axes[np.argmax(np.abs(axes), axis=0), [0, 1]])  # deterministic signs
        return mean, axes

    def density_2d(self, bins: int | None = None, projection: tuple[np.ndarray, np.ndarray] | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Summed 2-D histogram of all clients' points (projected on ``projection`` if given), for plots.

        Under privacy the histograms are summed securely (a one-row client's histogram shows
        which cell its row falls in); None when the federation is too small for that."""
        mean, axes = projection if projection is not None else (np.zeros(2), np.eye(2))
        if bins is None:
            bins = int(np.clip(np.sqrt(self.info.total_samples) / 1.5, 25, 150))
        lo, hi = self.info.feature_min, self.info.feature_max
        corners = np.array(np.meshgrid(*[[a, b] for a, b in zip(lo, hi)])).reshape(len(lo), -1).T if len(lo) <= 12 else None
        if corners is not None:
            proj = (corners - mean) @ axes
            plo, phi = proj.min(axis=0), proj.max(axis=0)
        else:
            span = np.sqrt(np.sum((hi - lo) ** 2)) / 2
            plo, phi = np.full(2, -span), np.full(2, span)
        edges = (np.linspace(plo[0], phi[0], bins + 1), np.linspace(plo[1], phi[1], bins + 1))
        t = self._sum_over_clients(_histogram2d, (edges, mean, axes))
        if t is None:
            return None
        return t["h"], edges[0], edges[1]

    def _sum_over_clients(self, fn: Any, shared: Any) -> Any:
        """Sum of every client's :class:`Stats` from ``fn``; under privacy through secure aggregation
        (None when the federation is too small for it: nothing is sent)."""
        tasks = {c: Task(fn, None, shared) for c in range(self.info.n_clients)}
        if self.config.privacy.active:
            if not self._can_secure_sum():
                return None
            from fedray.layers.privacy import secure_total

            return secure_total(self.executor, self.config.privacy, self.config.seed, tasks, -1001)
        res = self.execute(tasks)
        return sum((r.update for r in res.replies[1:]), start=res.replies[0].update)

    def density_1d(self, bins: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """Summed histogram of all clients' values of a one-feature data set, for plots (no rows move).

        Summed securely under privacy; None when the federation is too small for that."""
        if bins is None:
            bins = int(np.clip(np.sqrt(self.info.total_samples), 20, 120))
        lo, hi = float(self.info.feature_min[0]), float(self.info.feature_max[0])
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
        t = self._sum_over_clients(_histogram1d, edges)
        return None if t is None else (t["h"], edges)

    def _new_server_actor(self) -> Any:
        """An empty :class:`ServerActor` with this session's runtime environment (a run hands it
        its algorithm with ``start``)."""
        from fedray.actors.server_actor import ServerActor

        return ServerActor.options(runtime_env=self.runtime_env or None).remote()

    def _prestart_server(self) -> None:
        """Start the next run's server actor now: an empty :class:`ServerActor` whose process
        starts and imports in the background, so that a run does not wait for it (about 1 s
        on 2 CPUs). Each run still gets a fresh actor; a failure here only means the next run
        starts its own."""
        if self._spare_server is not None:
            return
        try:
            self._spare_server = self._new_server_actor()
        except Exception as exc:  # noqa: BLE001 - Ray may be going down; the next run starts its own
            log.debug("could not start a server actor ahead: %s", exc)
            self._spare_server = None

    def close(self) -> None:
        spare, self._spare_server = self._spare_server, None
        if spare is not None:
            try:
                import ray

                ray.kill(spare)
            except Exception:  # noqa: BLE001
                pass
        try:
            self.executor.shutdown()
        except Exception:  # noqa: BLE001
            pass
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _layers(executor: Executor, cfg: ExperimentConfig, disclosures: dict[str, int] | None = None) -> Executor:
    """Wrap the executor in the layers the configuration asks for, bottom to top: injected
    faults, the message log (what reached the server), privacy (masking, noise, unmasking)."""
    if cfg.faults.active:
        from fedray.layers.faults import FaultInjector

        executor = FaultInjector(executor, cfg.faults, cfg.seed)
    if cfg.output.messages or cfg.output.message_payloads:
        from fedray.layers.messages import MessageLog

        executor = MessageLog(executor, keep_payloads=cfg.output.message_payloads)
    if cfg.privacy.active:
        from fedray.layers.privacy import PrivacyLayer

        executor = PrivacyLayer(executor, cfg.privacy, cfg.seed, disclosures)
    return executor


def _histogram2d(payload: Any, shared: tuple, client: Any) -> Stats:
    edges, mean, axes = shared
    P = (client.data.X - mean) @ axes
    H, _, _ = np.histogram2d(P[:, 0], P[:, 1], bins=edges)
    return Stats(h=H)


def _server_call(refs: Any, timeout: float | None = None) -> Any:
    """``ray.get`` on the server actor: its errors arrive as the fedray error it raised, and
    its death as one :class:`RoundFailedError` line, not as Ray's remote traceback."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    from fedray.core.errors import FedrayError, RoundFailedError

    try:
        return ray.get(refs, timeout=timeout)
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, FedrayError):
            raise cause from None
        raise
    except RayActorError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RoundFailedError(f"the server actor died ({type(exc).__name__}: {first[:200]}); the run cannot go "
                               "on — check the Ray logs of the node that hosted it (e.g. out of memory)") from None


def _histogram1d(payload: Any, edges: np.ndarray, client: Any) -> Stats:
    return Stats(h=np.histogram(client.data.X[:, 0], bins=edges)[0].astype(np.float64))


def _moments(payload: Any, shared: Any, client: Any) -> Stats:
    X = client.data.X
    return Stats(n=np.array(float(X.shape[0])), sum=X.sum(axis=0), outer=X.T @ X)


def _moment_stats(payload: Any, shared: Any, client: Any) -> Stats:
    """Column sums and sums of squares of the client's shard (summed securely under privacy)."""
    X = client.data.X
    return Stats(s=X.sum(axis=0), ss=(X * X).sum(axis=0))


def _bounds(bounds: list[tuple[float, float]], n_features: int) -> tuple[np.ndarray, np.ndarray]:
    if len(bounds) != n_features:
        raise ConfigError(f"privacy.feature_bounds: {len(bounds)} (low, high) pairs for {n_features} features; "
                          "give one pair per feature")
    b = np.asarray(bounds, dtype=np.float64)
    return b[:, 0].copy(), b[:, 1].copy()


