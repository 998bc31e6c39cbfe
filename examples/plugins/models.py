"""A user's model factory: ``algorithm.params.model: examples.plugins.models:small_mlp``.

A factory takes the shape of one sample and the number of classes and returns a
``torch.nn.Module`` mapping a batch ``(b, *input_shape)`` to logits ``(b, n_classes)``.
fedray seeds torch before calling it, so the initial weights depend only on the run's seed.
"""
from __future__ import annotations

import math

from torch import nn


def small_mlp(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Flatten, one hidden layer of 32 ReLU units, logits."""
    d = math.prod(input_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, n_classes))
