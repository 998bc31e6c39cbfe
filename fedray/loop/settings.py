"""The round loop's settings, typed from the configuration to the :class:`~fedray.loop.server.Server`.

A session reads them from its configuration by name (:meth:`fedray.api.runner.Runner.run_config`
builds one :class:`ServerSettings` per run) and hands the frozen object to the server, in this
process or, on Ray, through the server actor (:class:`fedray.actors.server_actor.ServerActor`):

========================  =======================================  ============================================
setting                   from the configuration                   where it acts
========================  =======================================  ============================================
``seed``                  ``seed``                                 :func:`fedray.core.seeding.sample_clients`
``fraction``              ``federation.fraction``                  :meth:`Server.step` samples the cohort
``max_rounds``            ``federation.rounds`` (the round cap)    :meth:`Server.step` ends the run
``min_clients``           ``federation.min_clients``               :meth:`Server.gather` (``need``)
``round_timeout``         ``runtime.round_timeout``                :meth:`Server.gather`: an attempt's deadline
``round_retries``         ``federation.round_retries``             :meth:`Server.gather` (``retries``)
``blocks``                ``privacy.cohorts: blocks``              :meth:`Server.step` samples whole blocks
``clock``                 ``federation.devices``, ``availability``, :meth:`Server.step` samples online clients;
                          ``deadline``                             :meth:`Server._execute` times them
========================  =======================================  ============================================
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fedray.loop.clock import Clock


@dataclass(frozen=True)
class ServerSettings:
    """What the round loop needs from the configuration.

    Parameters
    ----------
    seed : int
        The run's seed (the server's sampling stream is keyed by it and the round).
    fraction : float
        Share of clients sampled each round, in (0, 1].
    max_rounds : int or None
        The round cap; None: the algorithm's own budget (:func:`fedray.loop.server.round_cap`).
    min_clients : int
        A round with fewer answers is run again (``round_retries``) or fails.
    round_timeout : float or None
        Seconds from the start of an attempt of a round to its deadline: every execution of the attempt
        (each step of the privacy protocol, missing clients asked again) waits only until then, and
        clients that have not answered by then are late. A retry (``round_retries``: the round run
        again) is a new attempt with a deadline of its own. None: no deadline. The local runtime
        waits for nothing; there only injected virtual delays are compared with it.
    round_retries : int
        Times a round with fewer than ``min_clients`` answers is run again before it fails.
    blocks : ndarray of int, optional
        Each client's fixed block (:func:`~fedray.core.seeding.client_blocks`): a round samples
        whole blocks (``privacy.cohorts: blocks``); None: clients one by one.
    clock : Clock, optional
        The simulated clock of a deployment (:mod:`fedray.loop.clock`); None: none.
    """

    seed: int
    fraction: float = 1.0
    max_rounds: int | None = None
    min_clients: int = 1
    round_timeout: float | None = None
    round_retries: int = 0
    blocks: np.ndarray | None = field(default=None, compare=False)
    clock: Clock | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 < float(self.fraction) <= 1.0:
            raise ValueError(f"ServerSettings.fraction: must be in (0, 1]; got {self.fraction!r}")
        if self.round_timeout is not None and not (math.isfinite(self.round_timeout) and self.round_timeout > 0):
            raise ValueError(f"ServerSettings.round_timeout: must be a positive number of seconds or None; "
                             f"got {self.round_timeout!r}")
        if self.min_clients < 0 or self.round_retries < 0:
            raise ValueError(f"ServerSettings: min_clients and round_retries must be >= 0; got "
                             f"{self.min_clients!r} and {self.round_retries!r}")
