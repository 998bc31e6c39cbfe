"""What a call to clients is: its kind, its round and its attempt.

Every call that reaches clients — a training round, an evaluation pass, a set-up sum, an
ad-hoc statistic for K selection, validation or plots — is described by one :class:`Call`
and passes through the session's one layer stack (faults, message log, privacy). The layers
decide from the call's kind what they do (faults are injected into training calls only; DP
noise is added where the configuration says so), and read the attempt from the call instead
of guessing it from a repeated round number.

Clients key their random streams by an integer (:func:`fedray.core.seeding.client_rng`);
:attr:`Call.stream_round` gives the integer each kind has always used, so that the same seed
gives the same bits as before calls had kinds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from enum import Enum


class CallKind(str, Enum):
    """Why the server calls clients."""

    TRAIN = "train"  #: a round of the algorithm (``round`` = the round number)
    EVALUATE = "evaluate"  #: an evaluation pass after the run (``round`` = the stage, 0, 1, ...)
    SETUP = "setup"  #: a sum the session needs before any run (moments for scaling)
    ADHOC = "adhoc"  #: statistics for K selection, validation or plots


#: The integer a client's random stream is keyed by, per kind (evaluation: -1 - stage).
_STREAM_ROUND = {CallKind.SETUP: -1000, CallKind.ADHOC: -100}


@dataclass(frozen=True)
class Call:
    """One call to clients.

    Parameters
    ----------
    kind : CallKind
    round : int
        The training round (``TRAIN``), the evaluation stage (``EVALUATE``), else 0.
    attempt : int
        0 for the first execution of this call; a retry (the round run again, or missing
        clients asked again) has the next number.
    purpose : str
        What an ``ADHOC`` or ``SETUP`` call computes ("moments", "select_k", "validation",
        "plots", ...), for the message log and the privacy account.
    quorum : int
        The fewest answers the caller keeps (0: any). A result with fewer answers is thrown
        away by the caller, so under secure aggregation the privacy layer never unmasks a sum
        over fewer survivors: it would release a sum nobody uses (and a retry's sum would
        differ from it by the clients that failed).
    deadline : float or None
        When the call's answers are due, as :func:`time.monotonic` of the process that drives the
        round (the server and its executor live in one process): the round's deadline
        (``runtime.round_timeout`` after the round's first execution started), shared by every
        execution of the round and every step of a protocol inside one. None: no deadline. Not part
        of the call's identity (equality, hash).
    """

    kind: CallKind
    round: int = 0
    attempt: int = 0
    purpose: str = ""
    quorum: int = 0
    deadline: float | None = field(default=None, compare=False)

    @property
    def training(self) -> bool:
        return self.kind is CallKind.TRAIN

    @property
    def stream_round(self) -> int:
        """The integer clients key their random streams by for this call (see the module doc)."""
        if self.kind is CallKind.TRAIN:
            return self.round
        if self.kind is CallKind.EVALUATE:
            return -1 - self.round
        return _STREAM_ROUND[self.kind]

    def again(self) -> Call:
        """The same call, one attempt later."""
        return replace(self, attempt=self.attempt + 1)

    def with_quorum(self, quorum: int) -> Call:
        """The same call, kept only with at least ``quorum`` answers."""
        return replace(self, quorum=int(quorum))

    def with_deadline(self, deadline: float | None) -> Call:
        """The same call, due by ``deadline`` (see the class doc)."""
        return replace(self, deadline=deadline)

    def remaining(self) -> float | None:
        """Seconds left until :attr:`deadline` (0 once it has passed); None without a deadline."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def timeout(self, timeout: float | None) -> float | None:
        """How long an execution of this call waits: ``timeout`` (what the caller passed to
        :meth:`~fedray.runtime.executor.Executor.execute`), capped by the time left until the deadline."""
        left = self.remaining()
        if left is None:
            return timeout
        return left if timeout is None else min(float(timeout), left)

    def label(self) -> str:
        """``round 3``, ``evaluation stage 0``, ``setup (moments)``, ... for messages."""
        if self.kind is CallKind.TRAIN:
            return f"round {self.round}"
        if self.kind is CallKind.EVALUATE:
            return f"evaluation stage {self.round}"
        return f"{self.kind.value} ({self.purpose})" if self.purpose else self.kind.value


def train(round_: int, attempt: int = 0) -> Call:
    return Call(CallKind.TRAIN, int(round_), int(attempt))


def evaluate(stage: int, attempt: int = 0) -> Call:
    return Call(CallKind.EVALUATE, int(stage), int(attempt))


def setup(purpose: str) -> Call:
    return Call(CallKind.SETUP, 0, 0, purpose)


def adhoc(purpose: str) -> Call:
    return Call(CallKind.ADHOC, 0, 0, purpose)
