"""The Gaussian mechanism of differential privacy: the noise each client adds and the
multiplier the account records for a round (see :mod:`fedray.layers.privacy`)."""
from __future__ import annotations

import math
import secrets as _secrets
from typing import Any

import numpy as np

from fedray.core.seeding import DP_NOISE_STREAM, client_rng


def noise_std(dp: Any, n_cohort: int, secure: bool) -> float:
    """Each client's noise deviation: z C alone (local DP), z C / sqrt(|cohort|) under secure aggregation."""
    return dp.noise_multiplier * dp.clip / (math.sqrt(n_cohort) if secure else 1.0)


def round_multiplier(dp: Any, answered: int, n_cohort: int, secure: bool) -> float:
    """The multiplier z of a round's total: z sqrt(a / |cohort|) for a answers under secure aggregation."""
    return dp.noise_multiplier * (math.sqrt(answered / n_cohort) if secure else 1.0)


def clip_and_noise(x: np.ndarray, clip: float, std: float, rng: np.random.Generator) -> np.ndarray:
    """``x`` scaled to L2 norm at most ``clip``, plus N(0, std^2) noise from ``rng``."""
    norm = float(np.linalg.norm(x))
    if norm > clip:
        x = x * (clip / norm)
    return x + rng.normal(0.0, std, size=x.size)


def noise_rng(client: Any, seeded: bool, stream_round: int, attempt: int) -> np.random.Generator:
    """The generator of a client's noise: the operating system's entropy, or (``seeded``, debugging
    only: anyone with the seed can remove this noise) the client's stream of the call
    (:attr:`Call.stream_round <fedray.core.calls.Call.stream_round>` and attempt)."""
    if seeded:
        return client_rng(client.seed, client.id, stream_round, DP_NOISE_STREAM, attempt)
    return np.random.default_rng(_secrets.randbits(128))
