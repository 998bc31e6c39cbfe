"""The layers' settings, typed from the configuration to the layer stack.

The API floor reads them from the configuration by name (:mod:`fedray.api.settings`) and hands the
frozen objects to the layers, as it hands :class:`~fedray.loop.settings.ServerSettings` to the round
loop; no layer reads the raw configuration. Each field is the configuration key of the same name
(``privacy.*``, ``privacy.dp.*``, ``faults.*``); the docs of the keys are in
:mod:`fedray.api.config` (``fedray describe`` lists them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class DPSettings:
    """Gaussian mechanism (``privacy.dp``): clip to L2 norm ``clip``, noise std ``noise_multiplier * clip``."""

    clip: float
    noise_multiplier: float
    delta: float = 1e-5
    seeded_noise: bool = False
    adjacency: Literal["replace-one", "add-remove"] = "replace-one"

    def to_dict(self) -> dict[str, object]:
        return {"clip": self.clip, "noise_multiplier": self.noise_multiplier, "delta": self.delta,
                "seeded_noise": self.seeded_noise, "adjacency": self.adjacency}


@dataclass(frozen=True)
class PrivacySettings:
    """Secure aggregation, the release rule, DP and guards (``privacy``; :mod:`fedray.layers.privacy`).

    The mechanisms and the fields each one reads:

    - secure aggregation: ``secure_aggregation``, ``mask_neighbors``, ``secagg_threshold``, ``min_cohort``;
    - the release rule (:mod:`fedray.layers.privacy.release`): ``release_rule``, ``min_cohort``,
      ``cohorts``, ``blocks_seed``, ``release_log``;
    - DP (:mod:`fedray.layers.privacy.dp`): ``dp``;
    - guards (:mod:`fedray.layers.privacy.guards`): ``min_samples_guard``, ``min_cluster_count``;
    - the federation's box: ``feature_bounds``.
    """

    secure_aggregation: bool = False
    mask_neighbors: int | None = None
    min_cohort: int = 3
    secagg_threshold: float = 0.5
    release_rule: Literal["strict", "count"] = "strict"
    cohorts: Literal["auto", "random", "blocks"] = "auto"
    blocks_seed: int = 0
    release_log: str | None = None
    dp: DPSettings | None = None
    min_samples_guard: bool = False
    min_cluster_count: int = 0
    feature_bounds: tuple[tuple[float, float], ...] | None = None

    @property
    def active(self) -> bool:
        """Whether any mechanism is on (the stack then has a privacy layer)."""
        return bool(self.secure_aggregation or self.dp is not None or self.min_samples_guard or self.min_cluster_count)


@dataclass(frozen=True)
class FaultSettings:
    """Injected client faults (``faults``; :mod:`fedray.layers.faults`)."""

    crash_probability: float = 0.0
    delay_probability: float = 0.0
    delay_seconds: float = 0.0
    delay_mode: Literal["virtual", "sleep"] = "virtual"
    crashes: tuple[tuple[int, int], ...] = ()
    crash_scope: Literal["client", "actor"] = "client"

    @property
    def active(self) -> bool:
        """Whether any fault is asked for (the stack then has a fault layer)."""
        return bool(self.crash_probability or self.crashes or (self.delay_probability and self.delay_seconds))
