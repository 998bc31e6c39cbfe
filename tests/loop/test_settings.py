"""The round loop's settings: typed from the configuration to the server, and ``round_timeout`` as the
deadline of a whole round (retries and asking missing clients again included).

Deadlines are read on a clock of the test's own (:class:`Clock`): an execution's seconds move it, so
what each execution may wait is exact and no assertion races the machine's load.
"""
from __future__ import annotations

import time
from typing import Any

import pytest

from fedray.core.calls import Call, CallKind
from fedray.core.contract import Task
from fedray.core.errors import RoundFailedError
from fedray.loop.server import Server
from fedray.loop.settings import ServerSettings
from fedray.runtime.executor import ExecResult
from tests.loop.test_server import FakeExecutor, Recorder, _info


class Clock:
    """``time`` as the round loop and its calls see it: ``monotonic`` moves only by :meth:`advance`."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    perf_counter = staticmethod(time.perf_counter)


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> Clock:
    from fedray.core import calls
    from fedray.loop import server

    c = Clock()
    monkeypatch.setattr(calls, "time", c)
    monkeypatch.setattr(server, "time", c)
    return c


class SlowExecutor(FakeExecutor):
    """The fake executor, taking ``seconds`` of the clock per execution and recording how long a
    waiting executor would wait (the timeout it got, capped by the call's deadline)."""

    def __init__(self, script: Any, seconds: float, clock: Clock) -> None:
        super().__init__(script)
        self.seconds = seconds
        self.clock = clock
        self.timeouts: list[float | None] = []

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        self.timeouts.append(call.timeout(timeout))
        self.clock.advance(self.seconds)
        return super().execute(call, tasks, timeout)


def _server(ex: FakeExecutor, ask_missing: int = 0, **settings: Any) -> Server:
    alg = Recorder(Recorder.Params(rounds=1, ask_missing=ask_missing), _info(), 0)
    return Server(alg, ex, ServerSettings(seed=0, **settings))


def test_the_session_hands_the_server_a_frozen_settings_object_read_by_name():
    """The server keeps the object it was given; its fields are the configuration's values by name."""
    from fedray.api.session import Session

    with Session(algorithm={"name": "kmeans", "params": {"n_clusters": 2}}, data={"dataset": "sklearn:iris"},
                 federation={"n_clients": 4, "fraction": 0.5, "min_clients": 2, "round_retries": 3},
                 runtime={"backend": "local", "round_timeout": 7.5, "progress": False}) as s:
        _, settings, cap, _ = s.runner.run_config(s.make_algorithm(), None)
    assert settings == ServerSettings(seed=s.config.seed, fraction=0.5, max_rounds=cap, min_clients=2,
                                      round_timeout=7.5, round_retries=3)
    with pytest.raises(AttributeError):
        settings.fraction = 1.0  # type: ignore[misc]
    server = Server(Recorder(Recorder.Params(), _info(), 0), FakeExecutor(), settings)
    assert server.settings is settings


def test_settings_or_their_fields_not_both_and_bad_values_fail_in_one_line():
    ex = FakeExecutor()
    alg = Recorder(Recorder.Params(), _info(), 0)
    assert Server(alg, ex, seed=3, fraction=0.4).settings == ServerSettings(seed=3, fraction=0.4)
    with pytest.raises(TypeError, match="not both"):
        Server(alg, ex, ServerSettings(seed=0), fraction=0.5)
    with pytest.raises(ValueError, match=r"fraction: must be in \(0, 1\]; got 1.5"):
        ServerSettings(seed=0, fraction=1.5)
    with pytest.raises(ValueError, match="round_timeout"):
        ServerSettings(seed=0, round_timeout=0.0)


def test_without_a_deadline_the_executor_gets_no_timeout(clock):
    ex = SlowExecutor({}, 0.0, clock)
    _server(ex).run()
    assert ex.timeouts == [None] and ex.calls[0][0].deadline is None


def test_the_executions_of_one_attempt_share_its_deadline(clock):
    """Round 0 asks its missing clients again twice (0.2 s an execution): the three executions carry one
    deadline and each waits only for what is left of the 2 s, not 2 s afresh."""
    fail = {0: "fail", 1: "fail"}
    script = {(CallKind.TRAIN, 0, 0): fail, (CallKind.TRAIN, 0, 1): fail}
    ex = SlowExecutor(script, 0.2, clock)
    server = _server(ex, ask_missing=2, round_timeout=2.0)
    server.run()
    assert [c.attempt for c, _ in ex.calls] == [0, 1, 2]
    assert len({c.deadline for c, _ in ex.calls}) == 1
    t = ex.timeouts
    assert t == pytest.approx([2.0, 1.8, 1.6]), t
    assert server.history[0]["clients_answered"] == 5


def test_a_retry_of_the_round_has_a_deadline_of_its_own(clock):
    """min_clients 5 and two clients failing: the round is run again (round_retries), each time with a
    new deadline and the whole round_timeout to wait."""
    fail = {0: "fail", 1: "fail"}
    script = {(CallKind.TRAIN, 0, 0): fail, (CallKind.TRAIN, 0, 1): fail}
    ex = SlowExecutor(script, 0.2, clock)
    server = _server(ex, round_timeout=2.0, min_clients=5, round_retries=3)
    server.run()
    deadlines = [c.deadline for c, _ in ex.calls]
    assert len(set(deadlines)) == 3 and deadlines == sorted(deadlines)
    assert ex.timeouts == pytest.approx([2.0, 2.0, 2.0]), ex.timeouts
    assert server.history[0]["attempts"] == 3


def test_nobody_is_asked_again_after_the_deadline(clock):
    """Each execution outlasts the 0.3 s deadline: missing clients are not asked again (ask_missing 2);
    a round that then has too few answers fails in one line naming the deadline."""
    script = {(CallKind.TRAIN, 0, 0): {0: "fail", 1: "fail", 2: "fail"}}
    ex = SlowExecutor(script, 0.35, clock)
    server = _server(ex, ask_missing=2, round_timeout=0.3)
    server.run()
    assert len(ex.calls) == 1 and server.history[0]["clients_failed"] == 3
    ex = SlowExecutor(script, 0.35, clock)
    server = _server(ex, ask_missing=2, round_timeout=0.3, min_clients=5)
    with pytest.raises(RoundFailedError, match=r"round 0: 2 of 5 clients answered .* the last attempt's deadline "
                                               r"\(runtime.round_timeout=0.3 s\) passed"):
        server.run()
    assert len(ex.calls) == 1


def test_before_the_deadline_missing_clients_are_asked_again(clock):
    """The same failures with time to spare: the missing clients are asked again (the deadline limits,
    it does not change what a fast round does)."""
    script = {(CallKind.TRAIN, 0, 0): {0: "fail", 1: "fail", 2: "fail"}}
    ex = SlowExecutor(script, 0.0, clock)
    server = _server(ex, ask_missing=2, round_timeout=30.0)
    server.run()
    assert [ids for _, ids in ex.calls] == [(0, 1, 2, 3, 4), (0, 1, 2)]
    assert server.history[0]["clients_answered"] == 5


def test_the_local_runtime_has_no_deadline_so_its_bits_do_not_depend_on_the_clock(clock):
    """A local executor waits for nothing: its calls carry no deadline and it gets the configured
    timeout unchanged (injected virtual delays compare with it), however long the round takes."""
    ex = SlowExecutor({(CallKind.TRAIN, 0, 0): {0: "fail"}}, 0.35, clock)
    ex.backend = "local"
    server = _server(ex, ask_missing=1, round_timeout=0.3)
    server.run()
    assert [c.deadline for c, _ in ex.calls] == [None, None] and ex.timeouts == [0.3, 0.3]


def test_a_call_caps_every_wait_by_what_is_left_of_its_deadline(clock):
    """What the Ray executor waits for each execution (and each privacy protocol step, which passes the
    call on): the timeout it was given, capped by the call's deadline; the deadline is not part of
    the call's identity."""
    from fedray.core import calls

    call = calls.train(3)
    assert call.timeout(5.0) == 5.0 and call.timeout(None) is None and call.remaining() is None
    soon = call.with_deadline(clock.now + 1.0)
    assert soon.timeout(None) == 1.0 and soon.timeout(0.5) == 0.5 and soon.timeout(5.0) == 1.0
    clock.advance(0.25)
    assert soon.timeout(None) == 0.75 and soon.timeout(5.0) == 0.75 and soon.remaining() == 0.75
    assert soon.again().with_quorum(2).deadline == soon.deadline
    past = call.with_deadline(clock.now - 1.0)
    assert past.timeout(5.0) == 0.0 and past.remaining() == 0.0
    assert soon == call and hash(soon) == hash(call)
