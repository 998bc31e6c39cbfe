"""A simulated deployment's clients: their devices and when they are online.

Both are plain data drawn once from the experiment seed (never from the real clock), so that
the same seed gives the same deployment on any machine:

- :func:`assign_devices`: each client's compute speed (FLOP/s) and up/down bandwidth (bytes/s),
  from a table of profiles (each client draws one, with the profiles' shares as chances) or from
  log-normal distributions around given medians.
- :class:`Availability`: when each client is online, from a trace (on intervals per client) or
  a generator: ``diurnal`` (online for a share of every period, at a phase of its own, as phones
  charging at night in different time zones) or ``random`` (online in each slot of time with a
  chance, independently, from a counter-based hash of (seed, client, slot)).

The round loop consults them through :class:`fedray.loop.clock.Clock`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.core.seeding import AVAILABILITY_STREAM, DEVICES_STREAM, server_rng

#: Slots scanned ahead for the end of an online spell or the next online client (``random``).
MAX_SLOTS_AHEAD = 100_000


@dataclass(frozen=True)
class Devices:
    """Per client (index = client id): ``speed`` in FLOP/s, ``up`` and ``down`` in bytes/s, and the
    name of its profile (``profile``: index into ``names``; empty names for distributions)."""

    speed: np.ndarray
    up: np.ndarray
    down: np.ndarray
    profile: np.ndarray
    names: tuple[str, ...] = ()


def assign_devices(cfg: Any, n_clients: int, seed: int) -> Devices:
    """Each client's device, from ``federation.devices`` (a :class:`~fedray.api.federation_config.DevicesConfig`)."""
    rng = server_rng(seed, 0, DEVICES_STREAM)
    if cfg.profiles:
        share = np.asarray([p.share for p in cfg.profiles], dtype=np.float64)
        which = rng.choice(len(share), size=n_clients, p=share / share.sum())
        col = {k: np.asarray([getattr(p, k) for p in cfg.profiles], dtype=np.float64) for k in ("speed", "up", "down")}
        return Devices(col["speed"][which], col["up"][which], col["down"][which], which.astype(np.int64),
                       tuple(p.name for p in cfg.profiles))
    z = rng.standard_normal((3, n_clients)) * float(cfg.spread)
    return Devices(cfg.speed * np.exp(z[0]), cfg.up * np.exp(z[1]), cfg.down * np.exp(z[2]),
                   np.zeros(n_clients, dtype=np.int64))


def every_client(ids: np.ndarray, n_clients: int) -> bool:
    """Whether ``ids`` is every client id 0 .. n_clients - 1 in order (a per-client column can then be used as it
    is, not gathered)."""
    return (len(ids) == n_clients > 0 and ids[0] == 0 and ids[-1] == n_clients - 1
            and bool(np.all(ids[1:] > ids[:-1])))


# --- availability -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Availability:
    """When each of ``n_clients`` clients is online.

    ``kind``: ``always``, ``diurnal`` (``period`` seconds, online the first ``on`` seconds of each
    period shifted by the client's ``phase``), ``random`` (slots of ``period`` seconds, online in a
    slot with chance ``on``; ``key`` seeds the hash) or ``trace`` (``intervals``: rows (client, start,
    end) sorted by start, online in [start, end)).
    """

    kind: str
    n_clients: int
    period: float = 0.0
    on: float = 0.0
    phase: np.ndarray | None = field(default=None, compare=False)
    key: int = 0
    intervals: np.ndarray | None = field(default=None, compare=False)
    #: The last answer of :meth:`online` (its time and a read-only array): a round asks for one time
    #: several times (sampling, the tasks, the late clients), each a pass over every client.
    _last: list = field(default_factory=list, compare=False, repr=False)

    def online(self, t: float) -> np.ndarray:
        """Bool (n_clients,), read-only: who is online at simulated time ``t``."""
        last = self._last
        if not last or last[0] != t:
            last[:] = [t, *self._online(t)]
            last[1].setflags(write=False)
        return last[1]

    def _in_period(self, t: float) -> np.ndarray:
        """Diurnal: each client's position in its period at ``t``, ``(t + phase) mod period`` (read-only,
        kept with :meth:`online`'s answer for the same ``t``)."""
        if not self._last or self._last[0] != t:
            self.online(t)
        return self._last[2]

    def _online(self, t: float) -> tuple[np.ndarray, np.ndarray | None]:
        if self.kind == "always":
            return np.ones(self.n_clients, dtype=bool), None
        if self.kind == "diurnal":
            x = np.add(self.phase, t)  # t + phase, in place below: one temporary, not two
            # phase >= 0 and t >= 0: fmod is mod there (the same bits, without mod's sign fix-up)
            (np.fmod if t >= 0 else np.mod)(x, self.period, out=x)
            x.setflags(write=False)
            return x < self.on, x
        return self._online_other(t), None

    def _online_other(self, t: float) -> np.ndarray:
        if self.kind == "random":
            return _slot_on(self.key, np.arange(self.n_clients), math.floor(t / self.period), self.on)
        iv = self.intervals
        live = iv[(iv[:, 1] <= t) & (t < iv[:, 2])]
        out = np.zeros(self.n_clients, dtype=bool)
        out[live[:, 0].astype(np.int64)] = True
        return out

    def online_until(self, ids: np.ndarray, t: float) -> np.ndarray:
        """For clients ``ids`` online at ``t``: when their online spell ends (inf: never)."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.kind == "always":
            return np.full(len(ids), np.inf)
        if self.kind == "diurnal":
            if self.on >= self.period:  # online the whole period: the spell never ends at its boundary
                return np.full(len(ids), np.inf)
            x = self._in_period(t)
            return t + (self.on - (x if every_client(ids, self.n_clients) else x[ids]))
        if self.kind == "random":
            if self.on >= 1.0:
                return np.full(len(ids), np.inf)
            slot = math.floor(t / self.period)
            end = np.full(len(ids), np.inf)
            todo = np.arange(len(ids))
            for k in range(1, MAX_SLOTS_AHEAD):
                off = ~_slot_on(self.key, ids[todo], slot + k, self.on)
                end[todo[off]] = (slot + k) * self.period
                todo = todo[~off]
                if not todo.size:
                    break
            return end
        iv = self.intervals
        live = iv[(iv[:, 1] <= t) & (t < iv[:, 2])]
        ends = np.full(self.n_clients, -np.inf)
        np.maximum.at(ends, live[:, 0].astype(np.int64), live[:, 2])
        return ends[ids]

    def next_online(self, t: float) -> float | None:
        """The earliest time >= ``t`` at which some client is online; None: never again."""
        if self.online(t).any():
            return t
        if self.kind == "diurnal":
            return t + float(np.min(np.mod(-(t + self.phase), self.period)))
        if self.kind == "random":
            slot = math.floor(t / self.period)
            ids = np.arange(self.n_clients)
            for k in range(1, MAX_SLOTS_AHEAD):
                if _slot_on(self.key, ids, slot + k, self.on).any():
                    return (slot + k) * self.period
            return None
        later = self.intervals[self.intervals[:, 1] > t]
        return float(later[0, 1]) if len(later) else None


_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (uint64 arithmetic wraps): the same bits on every machine."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _slot_on(key: int, ids: np.ndarray, slot: int, chance: float) -> np.ndarray:
    """Whether clients ``ids`` are online in ``slot`` (a counter-based draw per (key, client, slot))."""
    with np.errstate(over="ignore"):
        x = _mix(np.uint64(key) ^ _mix(np.asarray(ids, dtype=np.uint64) * _GOLD + np.uint64(slot % (1 << 62))))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 < chance


def make_availability(cfg: Any, n_clients: int, seed: int) -> Availability:
    """The availability of ``n_clients`` clients from ``federation.availability`` (an
    :class:`~fedray.api.federation_config.AvailabilityConfig`)."""
    rng = server_rng(seed, 0, AVAILABILITY_STREAM)
    if cfg.trace is not None:
        return Availability("trace", n_clients, intervals=read_trace(cfg.trace, n_clients))
    if cfg.generator == "diurnal":
        return Availability("diurnal", n_clients, period=float(cfg.period_s), on=float(cfg.online) * cfg.period_s,
                            phase=rng.uniform(0.0, cfg.period_s, n_clients))
    if cfg.generator == "random":
        return Availability("random", n_clients, period=float(cfg.period_s), on=float(cfg.online),
                            key=int(rng.integers(0, 2**63)))
    return Availability("always", n_clients)


def read_trace(path: str, n_clients: int) -> np.ndarray:
    """On intervals from a CSV or Parquet file with columns ``client_id``, ``start_s``, ``end_s``: an
    array of rows (client, start, end) sorted by start. A client without rows is never online."""
    import pandas as pd

    p = Path(path)
    key = "federation.availability.trace"
    if not p.is_file():
        raise ConfigError(f"{key}: {path!r} is not a file; give a CSV or Parquet file with columns client_id, "
                          "start_s, end_s")
    try:
        df = pd.read_parquet(p) if p.suffix.lower() in (".parquet", ".pq") else pd.read_csv(p)
    except Exception as exc:  # noqa: BLE001 - any unreadable file: one line
        raise DataError(f"{key}: {path!r} cannot be read: {type(exc).__name__}: {str(exc).splitlines()[0]:.120}"
                        ) from None
    cols = ("client_id", "start_s", "end_s")
    lost = [c for c in cols if c not in df.columns]
    if lost:
        raise DataError(f"{key}: {path!r} has no column(s) {lost}; it needs client_id, start_s, end_s")
    try:
        iv = df[list(cols)].to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"{key}: {path!r}: client_id, start_s and end_s must be numbers") from None
    bad = ~np.isfinite(iv).all(axis=1) | (iv[:, 0] != np.floor(iv[:, 0])) | (iv[:, 0] < 0) | (iv[:, 0] >= n_clients)
    bad |= ~(iv[:, 1] < iv[:, 2]) | (iv[:, 1] < 0)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise DataError(f"{key}: {path!r} row {r}: (client_id, start_s, end_s) = {tuple(iv[r].tolist())}; needs a "
                        f"client id in [0, {n_clients}) and 0 <= start_s < end_s")
    return iv[np.argsort(iv[:, 1], kind="stable")]
