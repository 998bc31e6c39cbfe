"""The layer stack: the one path from the server to the clients.

A session builds its stack once, over the executor where the clients live, and every call
to clients passes through it — training rounds, evaluation passes, set-up sums, K selection,
validation and the plots' statistics — each carrying its :class:`~fedray.core.calls.Call`.
The stack is a list of layers, each on the executor below it (:func:`build_stack`); the API floor
makes the list from the configuration (:func:`fedray.api.settings.stack_layers`), from the bottom:

1. injected faults (:mod:`fedray.layers.faults`, training calls only),
2. the message log (:mod:`fedray.layers.messages`: what reached the server),
3. the user's own layers (:mod:`fedray.layers.base`: the ``layers`` key), in the order given,
4. privacy (:mod:`fedray.layers.privacy`: guards, DP noise, secure aggregation, the release rule).

A layer is present only when the configuration asks for it, so a plain run pays nothing.
:func:`secure_layer` gives the privacy layer a secure sum goes through: the stack's own, or,
when the configuration asks for none but a caller wants the one secure sum (``hide_n`` of
the validation indices), one with secure aggregation alone, on top of the same stack.
"""
from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from fedray.core.seeding import block_cohorts, client_blocks
from fedray.layers.base import Layer, LayerExecutor
from fedray.layers.privacy import PrivacyLayer
from fedray.layers.privacy.journal import federation_fingerprint
from fedray.layers.settings import PrivacySettings
from fedray.runtime.executor import Executor, ExecutorWrapper

L = TypeVar("L", bound=Executor)
log = logging.getLogger(__name__)


def build_stack(executor: Executor, layers: Sequence[Callable[[Executor], Executor] | Layer]) -> Executor:
    """Stack ``layers`` on ``executor``, first at the bottom; returns the top.

    Each entry is either a function ``make(inner) -> Executor`` (a built-in layer, an executor of its
    own) or a :class:`~fedray.layers.base.Layer` (run by a :class:`~fedray.layers.base.LayerExecutor`).
    """
    top = executor
    for layer in layers:
        top = LayerExecutor(top, layer) if isinstance(layer, Layer) else layer(top)
    # No layer needs each client's reply: hosts may add the replies of summed tasks themselves.
    executor.sums_in_hosts = top is executor
    return top


def find_layer(top: Executor, kind: type[L]) -> L | None:
    """The layer of type ``kind`` in the stack under (and including) ``top``, or None."""
    layer: Executor | None = top
    while layer is not None:
        if isinstance(layer, kind):
            return layer
        layer = layer.inner if isinstance(layer, ExecutorWrapper) else None
    return None


def secure_layer(top: Executor, privacy: PrivacySettings, seed: int) -> PrivacyLayer:
    """The privacy layer a secure sum goes through (see the module doc); ``seed``: the experiment's."""
    own = find_layer(top, PrivacyLayer)
    if own is not None:
        return own
    # No privacy configured: the caller asked only that per-client sums stay hidden (validation's hide_n),
    # so any cohort from two clients up is summed, as the paper's masked sum of N_l is.
    alone = replace(privacy, secure_aggregation=True, dp=None, min_samples_guard=False, min_cluster_count=0,
                    min_cohort=2)
    return PrivacyLayer(top, alone, seed)


def cohort_blocks(privacy: PrivacySettings, fraction: float, n_clients: int, top: Executor) -> np.ndarray | None:
    """Each client's fixed block when rounds sample whole blocks (:func:`~fedray.core.seeding.block_cohorts`;
    None otherwise); the stack's privacy layer narrows
    to whole blocks. The blocks derive from ``privacy.blocks_seed``, fixed for the federation, never from
    the run's seed: every run over the same clients releases unions of the same blocks."""
    p = privacy
    layer = find_layer(top, PrivacyLayer)
    if not block_cohorts(p, fraction):
        if layer is not None:
            layer.blocks = None
        return None
    blocks = client_blocks(p.blocks_seed, n_clients, p.min_cohort)
    if layer is not None:
        layer.blocks = blocks
    return blocks


def join_federation(names: list[str], n: Any, n_features: int, sums: Any, layers: Iterable[PrivacyLayer | None]
                    ) -> str:
    """The federation's fingerprint (the clients' names and sample counts and the set-up moments ``sums``);
    each privacy layer of ``layers`` takes the federation's release log, shared by every session over the
    same clients in this process (:mod:`fedray.layers.privacy.journal`)."""
    fingerprint = federation_fingerprint(names, n, n_features, sums)
    for layer in {id(x): x for x in layers if x is not None}.values():
        layer.join_federation(fingerprint)
    return fingerprint


def begin_private_run(top: Executor, name: str, privacy: PrivacySettings, seed: int, out: Any,
                      run_key: str | None) -> None:
    """Tell the stack's privacy layer that run ``name`` starts (refusals name it; a resumed run keeps its
    ``run_key``) and where the federation's release journal is (``privacy.release_log``, else
    ``release_log/`` in the output folder ``out``; none without either)."""
    layer = find_layer(top, PrivacyLayer)
    if layer is None or not privacy.secure_aggregation:
        return
    folder = privacy.release_log or (Path(out) / "release_log" if out else None)
    where = f" -> {out}" if out else ""
    held = layer.begin_run(run_key or secrets.token_hex(16), f"run {name} (seed {seed}{where})", folder)
    if held:
        log.info("release journal %s: %d earlier release(s) of this federation", folder, held)
