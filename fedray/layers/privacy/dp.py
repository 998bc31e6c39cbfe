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


#: A noised sum counts as noised for the release rule only when its Gaussian mechanism alone is
#: (WEAK_NOISE_EPSILON, delta)-DP; a weaker one is released only as an un-noised sum would be.
WEAK_NOISE_EPSILON = 10.0


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def gaussian_delta(z: float, epsilon: float) -> float:
    """The smallest delta for which one Gaussian mechanism of multiplier ``z`` (noise deviation over
    sensitivity) is (epsilon, delta)-DP (Balle and Wang 2018, Theorem 8)."""
    if z <= 0:
        return 1.0
    a, b = 1.0 / (2.0 * z), epsilon * z
    return max(0.0, _phi(a - b) - math.exp(epsilon) * _phi(-a - b))


def weak_noise(dp: Any, answered: int, n_cohort: int, secure: bool) -> bool:
    """The noise of one released sum is too weak to matter: its multiplier (``z_r / 2`` under
    ``replace-one``, ``z_r`` under ``add-remove``) does not make the release
    (:data:`WEAK_NOISE_EPSILON`, ``dp.delta``)-DP on its own."""
    z = round_multiplier(dp, answered, n_cohort, secure) / (2.0 if dp.adjacency == "replace-one" else 1.0)
    return gaussian_delta(z, WEAK_NOISE_EPSILON) > dp.delta
