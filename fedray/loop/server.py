"""The round loop — the only one in fedray.

:class:`Server` drives rounds: sample clients from the server's seeded stream,
ask the algorithm what they run, send it through the executor, drop late or
failed clients (counted), hand the replies in client-id order to the algorithm
and record one history row. The Ray runtime runs the same object inside
:class:`fedray.actors.server_actor.ServerActor`.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedray.core import calls
from fedray.core.calls import Call
from fedray.core.contract import Algorithm, CohortTasks, Reply, RoundContext, Task, one_task
from fedray.core.errors import DataError, FedrayError, PluginError, RoundFailedError
from fedray.core.replies import reply_columns
from fedray.core.seeding import sample_blocks, sample_clients
from fedray.core.sizes import nbytes_of
from fedray.layers.failure_log import FailureLog, last_line
from fedray.loop.clock import IdList, LateSet, sorted_ids, trained, unsummed, without_late
from fedray.loop.settings import ServerSettings
from fedray.runtime.executor import ExecResult, Executor

log = logging.getLogger(__name__)

#: The round cap when neither ``federation.rounds`` nor the algorithm's budget sets one.
DEFAULT_ROUNDS = 100


class Server:
    """Runs an algorithm's rounds on an executor.

    Parameters
    ----------
    algorithm : Algorithm
    executor : Executor
    settings : ServerSettings
        The loop's settings from the configuration (:mod:`fedray.loop.settings` says which key
        each comes from and where it acts): ``seed``, ``fraction``, ``max_rounds``, ``min_clients``,
        ``round_timeout`` (the deadline of an attempt of a round), ``round_retries``, ``blocks``.
    **fields
        Instead of ``settings``: its fields by name (``Server(alg, ex, seed=0, fraction=0.5)``).
    """

    def __init__(self, algorithm: Algorithm, executor: Executor, settings: ServerSettings | None = None,
                 **fields: Any) -> None:
        if settings is None:
            settings = ServerSettings(**fields)
        elif fields:
            raise TypeError(f"Server: give settings or its fields ({sorted(fields)}), not both")
        self.settings = settings
        self.algorithm = algorithm
        self.executor = executor
        self.seed = int(settings.seed)
        self.budget = algorithm.round_budget()  # asked once, before the first round
        self.max_rounds = round_cap(settings.max_rounds, self.budget)  # a resumed run's cap replaces it
        self.round = 0
        self.history: list[dict[str, Any]] = []
        self.failures = FailureLog()  # one row per client that failed or was late (column-wise)
        info = getattr(algorithm, "info", None)
        n = int(getattr(info, "n_clients", 0) or 0)
        # Per client: rounds answered, bytes sent up, compute seconds (arrays: one vectorised update a round).
        self._rounds = np.zeros(n, dtype=np.int64)
        self._evaluated = np.zeros(n, dtype=np.int64)
        self._bytes_up = np.zeros(n, dtype=np.int64)
        self._compute_s = np.zeros(n, dtype=np.float64)
        self.finished = False
        self.evaluation_s = 0.0  # seconds of the final evaluation passes (Result.summary["evaluation_s"])
        # "converged", "algorithm" (its own budget or rule), "rounds done" (an algorithm that
        # trains for federation.rounds reached it) or "round cap" (the cap cut the run short)
        self.stop_reason = ""
        self.notes: list[str] = []  # warnings for the user, logged where the run was started
        # The simulated clock (federation.devices / availability / deadline): seconds since the run began,
        # and this round's clients timed by it (seconds) and those it made late (ids, sorted, and a code each
        # into the clock's reasons).
        self.clock = settings.clock
        self.sim_time = 0.0
        self._timed: list[np.ndarray] = []
        self._sim_late = LateSet()
        self._wait = 0.0

    def step(self) -> dict[str, Any] | None:
        """Run one round; returns its history row, or None when the run is over."""
        if self.finished or self.round >= self.max_rounds:
            if not self.finished:
                self.stop_reason = self._capped_reason()
            self.finished = True
            return None
        t0 = time.perf_counter()
        info = self.algorithm.info
        wait, online = 0.0, None
        if self.settings.blocks is not None:
            cohort = sample_blocks(self.seed, self.round, self.settings.blocks, self.settings.fraction)
        elif self.clock is not None:  # only clients online at the simulated time
            cohort, wait = self._sample_online()
            self._wait, online = wait, self.clock.online_at(self.sim_time + wait)
        else:
            cohort = sample_clients(self.seed, self.round, info.n_clients, self.settings.fraction)
        sampled = tuple(cohort.tolist())
        ctx = RoundContext(self.round, self.seed, sampled, info, self.settings.fraction, cohort=cohort)
        phase = self.algorithm.phase
        tasks = self._hook("configure_round", ctx)
        if tasks is not None and not (isinstance(tasks, Mapping) and (
                isinstance(tasks.task, Task) if isinstance(tasks, CohortTasks)
                else all(isinstance(t, Task) for t in tasks.values()))):
            raise PluginError(f"algorithm {self.algorithm.name!r}: configure_round must return None or a mapping "
                              f"{{client id: Task}}; got {type(tasks).__name__} {tasks!r:.60} in round {self.round}")
        if tasks is not None and online is not None:  # tasks beyond the cohort too: never to offline clients
            tasks = self.clock.only_online(tasks, online)
        if tasks is None:
            self.finished = True
            self.stop_reason = ("converged" if self.algorithm.converged
                                else getattr(self.algorithm, "stop_note", "") or "algorithm")
            return None
        res, executions = self.gather(calls.train(self.round), tasks, need=min(self.settings.min_clients, len(tasks)),
                                      retries=self.settings.round_retries,
                                      ask_missing=int(self.algorithm.retries_for_missing(ctx)))
        ctx = dataclasses.replace(ctx, failed=tuple(res.failed), late=tuple(res.late), attempts=executions)
        metrics = self._hook("aggregate", ctx, res.replies)
        if not isinstance(metrics, Mapping):
            raise PluginError(f"algorithm {self.algorithm.name!r}: aggregate must return a mapping of metrics; got "
                              f"{type(metrics).__name__} {metrics!r:.60} in round {self.round}")
        bytes_up = self._count_clients(tasks, res.replies)
        if len(sampled) < info.n_clients and "objective" in metrics:  # a sum over this round's cohort only
            metrics = {("objective_sampled" if k == "objective" else k): v for k, v in metrics.items()}
        out = {"round": self.round, "phase": phase, "clients_sampled": len(tasks),
               "clients_answered": len(res.replies), "clients_failed": len(res.failed),
               "clients_late": len(res.late), **self._cohort_split(), **metrics,
               "bytes_down": _bytes_down(tasks), "bytes_up": bytes_up,
               "wall_s": time.perf_counter() - t0}
        if self.settings.round_retries or executions > 1:
            out["attempts"] = executions
        if self.clock is not None:
            out.update(self._advance_clock(wait))
        self.history.append(out)
        self.round += 1
        return out

    def gather(self, call: Call, tasks: dict[int, Task], *, need: int = 0, retries: int = 0,
               ask_missing: int = 0) -> tuple[ExecResult, int]:
        """Run ``tasks`` as ``call`` through the executor (the session's layer stack).

        Clients that failed or were late are asked again up to ``ask_missing`` times (their
        replies join the first ones; under secure aggregation the whole cohort is asked again,
        and a sum short of anyone is never unmasked before the last time); when fewer than
        ``need`` clients answered, the whole call is run again up to ``retries`` times. Every
        execution is one attempt of the call (``call.attempt`` counts them) and every client
        missing from one is a row of :attr:`failures`. Returns the merged result (replies in
        client-id order) and the number of executions; raises :class:`RoundFailedError` when
        ``need`` is still not met.

        ``settings.round_timeout`` is the deadline of one attempt of the call: its first execution
        starts it, and every execution of the attempt (the missing clients asked again, each step of
        a privacy protocol) waits only for what is left of it; once it has passed nobody is asked
        again. A retry (the whole call run again, ``retries``) is a new attempt with a deadline of its
        own. The local runtime waits for nothing, so there it has no deadline (injected virtual
        delays are still compared with ``round_timeout``).
        Under secure aggregation with a deadline the cohort is one protocol instance: a second
        instance would not fit the deadline, and its sum next to a released first one would give
        away the difference.
        """
        retried = 0
        whole = self.executor.whole_cohort_retries
        timed = self.settings.round_timeout is not None and self.executor.backend != "local"
        if whole and timed:
            ask_missing = 0
        call = call.with_quorum(need).with_deadline(self._deadline())
        while True:
            # Under secure aggregation a sum that will be asked again is held back (quorum: everyone).
            res = self._execute(call.with_quorum(len(tasks) if whole and ask_missing else need), tasks)
            for k in range(ask_missing):
                missing = np.setdiff1d(np.union1d(_ids(res.failed), _ids(res.late)),
                                       self._sim_late.ids).tolist()  # the clock's late clients would be late again
                if not missing or _past(call):
                    break
                call = call.again()
                if whole:  # the whole original cohort again, in a new protocol instance
                    again = self._execute(call.with_quorum(len(tasks) if k + 1 < ask_missing else need), tasks)
                    res = again if len(again.replies) >= len(res.replies) else res
                    continue
                again = self._execute(call, {c: tasks[c] for c in missing})
                res.replies = sorted(list(res.replies) + list(again.replies), key=lambda r: r.client_id)
                res.failed, res.late, res.spillover = again.failed, again.late, again.spillover
                res.errors = {**res.errors, **again.errors}
            if len(res.replies) >= need:
                return res, call.attempt + 1
            if retried >= retries:
                raise RoundFailedError(self._shortfall(call, res, len(tasks), retried))
            retried += 1
            log.warning("%s: %d of %d clients answered (federation.min_clients=%d); attempt %d of %d", call.label(),
                        len(res.replies), len(tasks), self.settings.min_clients, retried + 1, retries + 1)
            call = call.again().with_deadline(self._deadline())  # the round run again: a deadline of its own

    # --- the simulated clock (fedray.loop.clock): data this loop consults ------------------
    def _sample_online(self) -> tuple[np.ndarray, float]:
        """This round's cohort among the clients online now, and the simulated seconds waited for one."""
        try:
            return self.clock.sample(self.seed, self.round, self.settings.fraction, self.sim_time)
        except ValueError as exc:
            raise RoundFailedError(f"round {self.round}: {exc} (federation.availability)") from None

    def _time_clients(self, tasks: dict[int, Task], res: ExecResult) -> None:
        """Time the answering clients of a training call on the simulated clock; those past the deadline or
        their online spell become late (their replies dropped), as injected stragglers do."""
        all_ids, _, up = reply_columns(res.replies)
        train = trained(tasks, all_ids)
        every = bool(train.all())
        ids, up = (all_ids, up) if every else (all_ids[train], up[train])
        t = self.clock.times(tasks, ids, up)
        late, why = self.clock.late(ids, t, self.sim_time + self._wait)
        self._timed.append(t[~late])
        if late.any():
            gone = ids[late]
            self._sim_late.add(gone, why)
            res.replies = without_late(res.replies, late, None if every else train)
            res.late = IdList(np.union1d(_ids(res.late), gone) if len(res.late) else sorted_ids(gone))

    def _advance_clock(self, wait: float) -> dict[str, float]:
        """Move the simulated clock past this round; its history columns."""
        kept = np.concatenate(self._timed) if self._timed else np.zeros(0)
        seconds = wait + self.clock.round_seconds(kept, bool(len(self._sim_late)))
        self.sim_time += seconds
        self._timed, self._sim_late, self._wait = [], LateSet(), 0.0
        return {"sim_round_s": seconds, "sim_time_s": self.sim_time}

    def _deadline(self) -> float | None:
        """The deadline of an attempt starting now: ``round_timeout`` from now. None without one, and on the
        local runtime, which waits for nothing (its bits must not depend on the clock)."""
        timeout = self.settings.round_timeout
        if timeout is None or self.executor.backend == "local":
            return None
        return time.monotonic() + timeout

    def _execute(self, call: Call, tasks: dict[int, Task]) -> ExecResult:
        # The timeout stays the configured one (injected virtual delays compare with it, the same bits
        # every time); an executor that waits caps its wait by the call's deadline (Call.timeout).
        timed = self.clock is not None and call.training
        res = self.executor.execute(call, unsummed(tasks) if timed and self.clock.deadline is not None else tasks,
                                    self.settings.round_timeout)
        if res.user_errors:
            raise type_of_user_error(res.user_errors[min(res.user_errors)])
        if timed:
            self._time_clients(tasks, res)
        if res.failed or res.late:
            self._record_failures(call, res)
        return res

    def _shortfall(self, call: Call, res: ExecResult, n_tasks: int, retried: int) -> str:
        """The one-line error of a round that kept fewer than ``federation.min_clients`` answers."""
        first = next(iter(res.errors.values()), "")
        how = (f"; retried {retried} time(s) (federation.round_retries={self.settings.round_retries})"
               if self.settings.round_retries else "; set federation.round_retries to retry such rounds")
        if _past(call):
            how += f"; the last attempt's deadline (runtime.round_timeout={self.settings.round_timeout:g} s) passed"
        if first:
            log.info("%s: first client failure:\n%s", call.label(), first)
        last = first.strip().splitlines()[-1] if first.strip() else ""
        return (f"{call.label()}: {len(res.replies)} of {n_tasks} clients answered ({len(res.failed)} failed, "
                f"{len(res.late)} late); federation.min_clients={self.settings.min_clients}" + how
                + (f"; first failure: {last} (-v shows its traceback)" if last else ""))

    def _count_clients(self, tasks: dict[int, Task], replies: Any) -> int:
        """Per-client counters of a round (taken part, only evaluated, bytes up, compute seconds);
        returns the bytes the replies carried up."""
        ids, seconds, up = reply_columns(replies)
        n_rep = len(ids)
        self._grow(int(ids.max()) + 1 if n_rep else 0)
        # A round the client took part in, or one where it only evaluated the current model
        # (supervised methods evaluate every client, sampled or not; clients.parquet keeps both).
        first = one_task(tasks) if n_rep else None
        if first is not None:  # one task for every client
            only_eval = np.full(n_rep, bool(first.evaluation))
        else:
            only_eval = np.fromiter((tasks[c].evaluation for c in ids.tolist()), dtype=bool, count=n_rep)
        self._split = (n_rep - int(only_eval.sum()), int(only_eval.sum()))  # (trained, only evaluated)
        self._answered = n_rep
        self._rounds[ids[~only_eval]] += 1  # a client answers once a round: no repeated index
        self._evaluated[ids[only_eval]] += 1
        self._bytes_up[ids] += up
        self._compute_s[ids] += seconds
        return int(up.sum())

    def _cohort_split(self) -> dict[str, int]:
        """In a round where clients outside the trained cohort evaluate the current model
        (supervised methods, every ``eval_every`` rounds; the cohort evaluates too): how many
        trained and how many evaluated, apart (``clients_answered`` counts both)."""
        trained, only_evaluated = getattr(self, "_split", (0, 0))
        self._split = (0, 0)
        if not only_evaluated:
            return {}
        return {"clients_trained": trained, "clients_evaluated": int(getattr(self, "_answered", 0))}

    def _grow(self, n: int) -> None:
        if n > len(self._rounds):
            extra = n - len(self._rounds)
            self._rounds = np.concatenate([self._rounds, np.zeros(extra, dtype=np.int64)])
            self._evaluated = np.concatenate([self._evaluated, np.zeros(extra, dtype=np.int64)])
            self._bytes_up = np.concatenate([self._bytes_up, np.zeros(extra, dtype=np.int64)])
            self._compute_s = np.concatenate([self._compute_s, np.zeros(extra)])

    @property
    def client_rows(self) -> dict[int, dict[str, float]]:
        """Per client that answered at least once: ``rounds`` (taken part), ``evaluated`` (only
        evaluated the model), ``bytes_up`` and ``compute_s``."""
        return {int(c): {"rounds": int(self._rounds[c]), "evaluated": int(self._evaluated[c]),
                         "bytes_up": int(self._bytes_up[c]), "compute_s": float(self._compute_s[c])}
                for c in np.flatnonzero(self._rounds + self._evaluated)}

    def client_columns(self) -> dict[str, np.ndarray]:
        """The per-client counters as arrays indexed by client id (what a run's result reads)."""
        return {"rounds_participated": self._rounds.copy(), "rounds_evaluated": self._evaluated.copy(),
                "bytes_up": self._bytes_up.copy(), "compute_s": self._compute_s.copy()}

    @client_rows.setter
    def client_rows(self, rows: dict[Any, dict[str, float]]) -> None:
        n = max([len(self._rounds)] + [int(k) + 1 for k in rows])
        self._rounds = np.zeros(n, dtype=np.int64)
        self._evaluated = np.zeros(n, dtype=np.int64)
        self._bytes_up = np.zeros(n, dtype=np.int64)
        self._compute_s = np.zeros(n, dtype=np.float64)
        for k, v in rows.items():
            c = int(k)
            self._rounds[c], self._bytes_up[c], self._compute_s[c] = v["rounds"], v["bytes_up"], v["compute_s"]
            self._evaluated[c] = v.get("evaluated", 0)

    def _record_failures(self, call: Call, res: ExecResult) -> None:
        """Rows of :attr:`failures` for the clients missing from this attempt, added column-wise; ``round`` is
        the call's stream round (the round, or -1 - stage for an evaluation pass)."""
        reasons = self.clock.reasons() if self.clock is not None else ()
        expected = self.failures.add_attempt(call.stream_round, call.attempt, res, self.settings.round_timeout,
                                             self._sim_late, reasons)
        if res.failed:
            log.warning("%s: client(s) %s failed: %s", call.label(), _some(res.failed),
                        last_line(res.errors.get(res.failed[0], "")))
        level = logging.INFO if expected else logging.WARNING  # the simulated clock's late clients are expected
        if res.late and log.isEnabledFor(level):
            log.log(level, "%s: client(s) %s late", call.label(), _some(res.late))

    def run(self) -> list[dict[str, Any]]:
        while self.step() is not None:
            pass
        return self.history

    def evaluate(self, retries: int = 2) -> dict[str, Any]:
        """Run the algorithm's evaluation passes on every client; returns the final metrics.

        Clients that fail are asked again (``retries`` times: a crashed actor is restarted
        and its shards rebuilt meanwhile). Metrics that still miss clients say so:
        ``evaluation_coverage`` gives the clients and samples they cover and the missing
        clients (the session warns about them), so a shrunken evaluation is never silent.
        """
        t0 = time.perf_counter()
        stages: list[list[Reply]] = []
        prev: list[Reply] | None = None
        info = self.algorithm.info
        covered = np.ones(int(info.n_clients), dtype=bool)
        while (task := self.algorithm.evaluation_task(len(stages), prev)) is not None:
            todo = CohortTasks(np.arange(info.n_clients), task)
            res, _ = self.gather(calls.evaluate(len(stages)), todo, ask_missing=retries)
            ids = reply_columns(res.replies)[0]  # kept column-wise: no object per client
            answered = np.zeros(len(covered), dtype=bool)
            answered[ids] = True
            covered &= answered
            prev = res.replies if np.all(ids[1:] > ids[:-1]) else sorted(res.replies, key=lambda r: r.client_id)
            stages.append(prev)
        final = self.algorithm.summarize_evaluation(stages) if stages else {}
        if stages:
            n = np.asarray(info.n_samples)
            cov = {"clients": int(covered.sum()), "of_clients": int(info.n_clients),
                   "samples": int(n[covered].sum()), "of_samples": int(np.sum(n))}
            cov["missing"] = np.flatnonzero(~covered).tolist()
            final["evaluation_coverage"] = cov
        self.evaluation_s = time.perf_counter() - t0
        return final

    def result(self) -> dict[str, Any]:
        model = self._hook("result")
        if not isinstance(model, Mapping):
            raise PluginError(f"algorithm {self.algorithm.name!r}: result must return a mapping (the model); got "
                              f"{type(model).__name__} {model!r:.60}")
        return model

    def _hook(self, name: str, *args: Any) -> Any:
        """Call the algorithm's hook ``name``; an error it raises becomes one line naming the hook and round.

        fedray's own errors pass as they are; the original exception is chained (shown with ``-v``).
        """
        try:
            return getattr(self.algorithm, name)(*args)
        except FedrayError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plug-in's defect, reported in one line
            text = str(exc).strip()
            raise PluginError(f"algorithm {self.algorithm.name!r}: {name} raised {type(exc).__name__}: "
                              f"{text.splitlines()[0] if text else ''} in round {self.round} (-v shows its "
                              "traceback)") from exc

    def _capped_reason(self) -> str:
        """Why a run that reached the round cap ended; warns (one line) when the cap cut it short."""
        alg = self.algorithm
        if alg.converged:
            return "converged"
        if self.budget is not None and self.round >= self.budget:
            return "algorithm"  # its own budget ends exactly at the cap
        if alg.trains_for_rounds:
            return "rounds done"
        own = f" (it asks for up to {self.budget} rounds)" if self.budget is not None else ""
        # A note for the driver to log (a server actor's own warning would arrive tagged with its pid)
        self.notes.append(f"{alg.name} stopped at the round cap federation.rounds={self.max_rounds} before it "
                          f"finished by its own rule{own}; raise federation.rounds, or leave it unset to use the "
                          "algorithm's budget")
        return "round cap"

    def state(self) -> dict[str, Any]:
        return {"round": self.round, "history": self.history, "client_columns": self.client_columns(),
                "finished": self.finished, "converged": self.algorithm.converged, "stop_reason": self.stop_reason, "phase": self.algorithm.phase,
                "failures": self.failures, "report": self.executor.report(), "evaluation_s": self.evaluation_s,
                "notes": list(self.notes), "sim_time": self.sim_time}

    # --- checkpoints (see fedray.api.checkpoint) ----------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Everything needed to continue after this round: the round number, history, the
        algorithm object (its state and any generator it keeps) and what the executor
        layers recorded. Server and client random streams are keyed by (seed, round) and
        need no saving."""
        return {"round": self.round, "history": self.history, "client_rows": self.client_rows,
                "finished": self.finished, "failures": self.failures, "algorithm": self.algorithm,
                "report": self.executor.report(), "max_rounds": self.max_rounds, "budget": self.budget,
                "sim_time": self.sim_time}

    def restore(self, snap: dict[str, Any]) -> None:
        """Continue from :meth:`snapshot` (the executor's clients are restored separately)."""
        self.round = int(snap["round"])
        self.history = list(snap["history"])
        self.client_rows = {int(k): dict(v) for k, v in snap["client_rows"].items()}
        self.finished = bool(snap["finished"])
        self.failures = FailureLog.of(snap["failures"])
        self.algorithm = snap["algorithm"]
        self.budget = snap.get("budget", self.budget)
        self.max_rounds = int(snap.get("max_rounds", self.max_rounds))
        self.sim_time = float(snap.get("sim_time", 0.0))
        self.executor.restore(snap["report"])


def _ids(values: Any) -> np.ndarray:  # client ids as an int64 array (an empty list too)
    return np.asarray(values, dtype=np.int64).ravel()


def _some(ids: Any, first: int = 20) -> str:
    """Client ids for a log line: the first ``first`` of them, and how many more there are."""
    ids = list(ids)
    return str(ids) if len(ids) <= first else f"{ids[:first]} and {len(ids) - first} more"


def _past(call: Call) -> bool:
    """Whether ``call``'s deadline (the round's) has passed."""
    return call.deadline is not None and call.remaining() == 0.0


def round_cap(rounds: int | None, budget: int | None) -> int:
    """The round cap of a run: ``federation.rounds`` when set, else the algorithm's budget, else
    :data:`DEFAULT_ROUNDS`."""
    if rounds is not None:
        return int(rounds)
    return int(budget) if budget is not None else DEFAULT_ROUNDS


def _bytes_down(tasks: dict[int, Task]) -> int:
    """Bytes sent to the clients: each client's payload and shared part (counted per client)."""
    one = one_task(tasks)
    if one is not None:  # one task for every client: its bytes, once per client
        return len(tasks) * (nbytes_of(one.payload) + (nbytes_of(one.shared) if one.shared is not None else 0))
    sizes: dict[int, int] = {}  # id of a shared part -> bytes
    per_task: dict[int, int] = {}  # id of a task -> bytes (one task object is often every client's)
    total = 0
    for t in tasks.values():
        b = per_task.get(id(t))
        if b is None:
            b = nbytes_of(t.payload)
            if t.shared is not None:
                key = id(t.shared)
                if key not in sizes:
                    sizes[key] = nbytes_of(t.shared)
                b += sizes[key]
            per_task[id(t)] = b
        total += b
    return total


def type_of_user_error(message: str) -> FedrayError:
    return DataError(message)
