"""The ``federation`` section of the configuration: clients, cohorts, rounds, and a simulated deployment.

The deployment keys (``devices``, ``availability``, ``deadline``, ``target``) turn on the simulated clock
(:mod:`fedray.loop.clock`, docs/clock.md); all are off by default.
"""
from __future__ import annotations

import typing
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedray.core.errors import ConfigError
from fedray.data.deployment import assign_devices, make_availability
from fedray.loop.clock import Clock


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, v: Any, info: Any) -> Any:
        if isinstance(v, bool) and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, not a boolean ({v!r})")
        return v


def _numeric(ann: Any) -> bool:
    """Whether a field takes numbers and not booleans (``n_clients: true`` is a mistake, not 1)."""
    args = {ann, *typing.get_args(ann)}
    return bool(args & {int, float}) and bool not in args and Any not in args


class DeviceProfile(_Strict):
    """One kind of device in ``federation.devices.profiles``."""

    name: str = Field(min_length=1, description="the profile's name (e.g. phone, laptop)")
    speed: float = Field(gt=0, allow_inf_nan=False, description="compute speed in FLOP/s")
    up: float = Field(gt=0, allow_inf_nan=False, description="upload bandwidth in bytes/s")
    down: float = Field(gt=0, allow_inf_nan=False, description="download bandwidth in bytes/s")
    share: float = Field(default=1.0, gt=0, allow_inf_nan=False, description="relative chance that a client has "
                         "this profile")


class DevicesConfig(_Strict):
    """Each client's device: a table of profiles, or log-normal distributions around medians."""

    profiles: list[DeviceProfile] = Field(default_factory=list, description="profiles each client draws one of "
                                          "(with their shares as chances); else speed, up and down")
    speed: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="median compute speed in "
                                "FLOP/s (without profiles)")
    up: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="median upload bandwidth in "
                             "bytes/s (without profiles)")
    down: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="median download bandwidth in "
                               "bytes/s (without profiles)")
    spread: float = Field(default=0.0, ge=0, le=5, description="sigma of the log-normal spread of speed and "
                          "bandwidths around their medians (0: every client the same)")
    flops_per_sample: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="FLOPs one sample "
                                           "costs a client per local epoch (default: 6 per value of what it receives)")

    @model_validator(mode="after")
    def _one_source(self) -> DevicesConfig:
        medians = {k: getattr(self, k) for k in ("speed", "up", "down")}
        if self.profiles and any(v is not None for v in medians.values()):
            raise ValueError("give profiles or speed/up/down, not both")
        if not self.profiles and any(v is None for v in medians.values()):
            lost = [k for k, v in medians.items() if v is None]
            raise ValueError(f"give profiles, or all of speed, up and down (missing: {', '.join(lost)})")
        return self


class AvailabilityConfig(_Strict):
    """When each client is online: a trace file, or a generator. Only online clients are sampled."""

    generator: Literal["diurnal", "random"] | None = Field(default=None, description="diurnal: online for `online` "
                                                           "of every period at a phase of its own; random: online "
                                                           "in each period-long slot with chance `online`")
    trace: str | None = Field(default=None, description="CSV or Parquet file of on intervals: client_id, start_s, "
                              "end_s (simulated seconds); a client without rows is never online")
    period_s: float = Field(default=86_400.0, gt=0, allow_inf_nan=False, description="diurnal: the period (a day); "
                            "random: the slot length, in simulated seconds")
    online: float = Field(default=1 / 3, gt=0, le=1, description="diurnal: share of each period a client is online; "
                          "random: chance it is online in a slot")

    @model_validator(mode="after")
    def _one_source(self) -> AvailabilityConfig:
        if (self.generator is None) == (self.trace is None):
            raise ValueError("give exactly one of generator (diurnal, random) and trace (a file)")
        return self


class TargetConfig(_Strict):
    """The metric whose first reaching of a value the summary times on the simulated clock."""

    metric: str = Field(min_length=1, description="a column of the round history, e.g. test_accuracy, objective")
    value: float = Field(allow_inf_nan=False, description="the value to reach")
    direction: Literal["above", "below"] = Field(default="above", description="reached when the metric is at or "
                                                 "above (accuracy) or at or below (a loss, an objective) the value")


class FederationConfig(_Strict):
    """How many clients, how many of them each round, how many rounds at most, and a simulated deployment."""

    n_clients: int | None = Field(default=10, ge=1, description="number of clients M (None: as many as the data "
                                  "set's own split gives)")
    fraction: float = Field(default=1.0, gt=0.0, le=1.0, description="share C of the clients sampled each round "
                            "(max(floor(C M), 1) clients; with availability, at most the online ones)")
    rounds: int | None = Field(default=None, ge=1, description="most server rounds of a run; unset: the "
                               "algorithm's own budget (its max_rounds, FedCRef's iterations), else 100. A run "
                               "that this cap, not the algorithm, ends warns and records stop_reason 'round cap'")
    min_clients: int = Field(default=1, ge=1, description="answers a round needs to go on; fewer fail the round "
                             "(or retry it)")
    round_retries: int = Field(default=0, ge=0, le=1000, description="re-run a round with < min_clients answers")
    devices: DevicesConfig | None = Field(default=None, description="simulated devices (compute speed, "
                                          "bandwidths): each round records sim_round_s and sim_time_s (None: off)")
    availability: AvailabilityConfig | None = Field(default=None, description="when clients are online on the "
                                                    "simulated clock (None: always)")
    deadline: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="simulated seconds a round "
                                   "waits; clients not finished by then are late (needs devices)")
    target: TargetConfig | None = Field(default=None, description="the summary gives the simulated time at which "
                                        "this metric first reached this value (needs devices)")

    @property
    def clocked(self) -> bool:
        """Whether the run has a simulated clock."""
        return self.devices is not None or self.availability is not None


def check_clock(cfg: Any) -> None:
    """Cross-section checks of the simulated clock (one line each)."""
    fed = cfg.federation
    if fed.deadline is not None and fed.devices is None:
        raise ConfigError(f"federation.deadline: {fed.deadline:g} s of simulated time needs federation.devices "
                          "(the clients' speeds and bandwidths) to time the clients")
    if fed.target is not None and fed.devices is None:
        raise ConfigError("federation.target: the simulated time to a target needs federation.devices")
    if fed.availability is not None and cfg.privacy.cohorts == "blocks":
        raise ConfigError("federation.availability: privacy.cohorts='blocks' samples fixed blocks, which availability "
                          "would break up; use privacy.cohorts='random'")


def build_clock(cfg: Any, info: Any, algorithm: Any) -> Any:
    """The run's :class:`~fedray.loop.clock.Clock` from ``federation`` (None without devices or availability)."""
    fed = cfg.federation
    if not fed.clocked:
        return None
    n = int(info.n_clients)
    params = getattr(algorithm, "params", None)
    epochs = int(getattr(params, "epochs", None) or getattr(params, "fed_epochs", None) or 1)
    devices = None if fed.devices is None else assign_devices(fed.devices, n, cfg.seed)
    availability = None if fed.availability is None else make_availability(fed.availability, n, cfg.seed)
    return Clock(n_samples=np.asarray(info.n_samples, dtype=np.float64), devices=devices, availability=availability,
                 deadline=fed.deadline, flops_per_sample=None if fed.devices is None else fed.devices.flops_per_sample,
                 epochs=epochs)
