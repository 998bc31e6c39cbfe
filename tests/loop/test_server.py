"""The round loop (fedray.loop.server.Server) against a scripted fake executor: no clients, no Ray.

Each test states one property of the loop: what it asks the executor, what it hands the
algorithm, and when it stops or fails.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedray.core.calls import Call, CallKind
from fedray.core.contract import Algorithm, FederationInfo, Params, Reply, RoundContext, Task
from fedray.core.errors import DataError, RoundFailedError
from fedray.loop.server import Server
from fedray.runtime.executor import ExecResult, Executor

N = 5


def _info(n: int = N) -> FederationInfo:
    return FederationInfo(n_clients=n, n_features=1, sample_shape=(1,), n_samples=np.full(n, 10),
                          feature_min=np.zeros(1), feature_max=np.ones(1))


def _echo(payload: Any, shared: Any, client: Any) -> Any:  # never run: the fake executor answers
    return None


class FakeExecutor(Executor):
    """Answers every task with ``{"client": id}``, except where ``script`` says a client fails
    (``"fail"``), is late (``"late"``) or raises a user error (``"user"``) for a (kind, round,
    attempt) key. Records every call it receives."""

    def __init__(self, script: dict[tuple[CallKind, int, int], dict[int, str]] | None = None) -> None:
        self.script = script or {}
        self.calls: list[tuple[Call, tuple[int, ...]]] = []

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        self.calls.append((call, tuple(sorted(tasks))))
        plan = self.script.get((call.kind, call.round, call.attempt), {})
        res = ExecResult([])
        for cid in sorted(tasks):
            what = plan.get(cid)
            if what == "fail":
                res.failed.append(cid)
                res.errors[cid] = f"client {cid} crashed"
            elif what == "late":
                res.late.append(cid)
            elif what == "user":
                res.user_errors[cid] = f"client {cid}: bad data"
            else:
                res.replies.append(Reply(cid, {"client": cid}, 0.0, 8))
        return res


class Recorder(Algorithm):
    """Asks every sampled client each round, for ``rounds`` rounds; records what aggregate sees."""

    name = "_test-recorder"

    class Params(Params):
        rounds: int = 3
        ask_missing: int = 0

    def __init__(self, params: Params, info: FederationInfo, seed: int) -> None:
        super().__init__(params, info, seed)
        self.seen: list[tuple[RoundContext, list[int]]] = []
        self.stages: list[list[int]] = []

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        if ctx.round >= self.params.rounds:
            return None
        task = Task(_echo, None, None)
        return {c: task for c in ctx.sampled}

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        self.seen.append((ctx, [r.client_id for r in replies]))
        return {"answered": float(len(replies))}

    def result(self) -> dict[str, Any]:
        return {}

    def retries_for_missing(self, ctx: RoundContext) -> int:
        return self.params.ask_missing

    def evaluation_task(self, stage: int, previous: list[Reply] | None) -> Task | None:
        return Task(_echo, None, None, evaluation=True) if stage < 2 else None

    def summarize_evaluation(self, stages: list[list[Reply]]) -> dict[str, Any]:
        self.stages = [[r.client_id for r in s] for s in stages]
        return {"stages": len(stages)}


def _server(script=None, *, rounds=3, ask_missing=0, **kw) -> tuple[Server, FakeExecutor, Recorder]:
    alg = Recorder(Recorder.Params(rounds=rounds, ask_missing=ask_missing), _info(), 0)
    ex = FakeExecutor(script)
    return Server(alg, ex, seed=0, **kw), ex, alg


def test_each_round_is_one_train_call_with_its_round_and_attempt_zero():
    server, ex, alg = _server()
    server.run()
    assert [(c.kind, c.round, c.attempt) for c, _ in ex.calls] == [(CallKind.TRAIN, r, 0) for r in range(3)]
    assert server.stop_reason == "algorithm" and len(server.history) == 3


def test_failed_and_late_clients_reach_aggregate_through_the_context():
    script = {(CallKind.TRAIN, 1, 0): {1: "fail", 3: "late"}}
    server, _, alg = _server(script)
    server.run()
    ctx, answered = alg.seen[1]
    assert ctx.failed == (1,) and ctx.late == (3,) and answered == [0, 2, 4]
    assert alg.seen[0][0].failed == () and alg.seen[0][0].late == ()
    row = server.history[1]
    assert (row["clients_answered"], row["clients_failed"], row["clients_late"]) == (3, 1, 1)
    assert [(f["round"], f["client_id"], f["kind"]) for f in server.failures] == [(1, 1, "failed"), (1, 3, "late")]


def test_missing_clients_are_asked_again_as_the_next_attempt_and_their_replies_join():
    script = {(CallKind.TRAIN, 0, 0): {2: "fail"}, (CallKind.TRAIN, 0, 1): {}}
    server, ex, alg = _server(script, rounds=1, ask_missing=2)
    server.run()
    assert [(c.attempt, ids) for c, ids in ex.calls] == [(0, (0, 1, 2, 3, 4)), (1, (2,))]
    ctx, answered = alg.seen[0]
    assert answered == [0, 1, 2, 3, 4] and ctx.failed == () and ctx.attempts == 2
    assert server.history[0]["attempts"] == 2


def test_a_short_round_is_retried_whole_then_fails_in_one_line():
    short = {c: "fail" for c in range(3)}
    script = {(CallKind.TRAIN, 0, 0): short, (CallKind.TRAIN, 0, 1): short}
    server, ex, _ = _server(script, rounds=1, min_clients=4, round_retries=1)
    with pytest.raises(RoundFailedError, match=r"round 0: 2 of 5 clients answered .*min_clients=4.*retried 1"):
        server.step()
    assert [(c.attempt, len(ids)) for c, ids in ex.calls] == [(0, 5), (1, 5)]


def test_a_retry_that_meets_min_clients_goes_on():
    script = {(CallKind.TRAIN, 0, 0): {c: "late" for c in range(3)}}
    server, _, alg = _server(script, rounds=1, min_clients=4, round_retries=2)
    server.run()
    assert alg.seen[0][1] == [0, 1, 2, 3, 4] and server.history[0]["attempts"] == 2


def test_a_user_error_stops_the_run_as_a_data_error():
    server, _, _ = _server({(CallKind.TRAIN, 0, 0): {4: "user"}})
    with pytest.raises(DataError, match="client 4: bad data"):
        server.step()


def test_the_round_cap_stops_a_run_the_algorithm_would_continue():
    server, ex, _ = _server(rounds=10, max_rounds=4)
    server.run()
    assert len(ex.calls) == 4 and server.stop_reason == "round cap"


def test_evaluation_stages_are_evaluate_calls_with_missing_clients_asked_again():
    script = {(CallKind.EVALUATE, 1, 0): {0: "fail"}, (CallKind.EVALUATE, 1, 1): {0: "fail"},
              (CallKind.EVALUATE, 1, 2): {0: "fail"}}
    server, ex, alg = _server(script, rounds=0)
    server.run()
    final = server.evaluate(retries=2)
    evals = [(c.round, c.attempt, ids) for c, ids in ex.calls if c.kind is CallKind.EVALUATE]
    assert evals == [(0, 0, tuple(range(N))), (1, 0, tuple(range(N))), (1, 1, (0,)), (1, 2, (0,))]
    assert alg.stages == [[0, 1, 2, 3, 4], [1, 2, 3, 4]] and final["stages"] == 2
    cov = final["evaluation_coverage"]
    assert cov["clients"] == 4 and cov["missing"] == [0]
    assert [(f["round"], f["attempt"]) for f in server.failures] == [(-2, 0), (-2, 1), (-2, 2)]


def test_call_stream_rounds_keep_the_seeding_keys_of_each_kind():
    from fedray.core import calls

    assert [calls.train(3).stream_round, calls.evaluate(0).stream_round, calls.evaluate(2).stream_round,
            calls.setup("moments").stream_round, calls.adhoc("plots").stream_round] == [3, -1, -3, -1000, -100]
    assert calls.train(3).again() == Call(CallKind.TRAIN, 3, 1)
