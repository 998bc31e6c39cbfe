"""The type of a client function's ``client`` argument: :class:`ClientView`.

A client function ``fn(payload, shared, client)`` (see :class:`fedray.core.contract.Task`) receives
a view of one client built where the client lives (:class:`fedray.runtime.clients.Client`, or, for a
training task of an unsupervised algorithm, the same view without labels). Type the argument as
``fedray.ClientView``; the view offers exactly what this protocol lists.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ClientView(Protocol):
    """What a client function may read and keep about its client.

    Attributes
    ----------
    id : int
        The client's id (0 .. n_clients - 1).
    name : str
        Its name in the data set (a file, a writer, ...), for messages.
    data : ClientData
        ``data.X`` (its rows, shape ``(n, *sample_shape)``), ``data.y`` (labels, only where the task may
        read them), ``data.n``.
    state : dict
        Kept by the client's host across rounds and runs (and in checkpoints).
    secrets : dict
        Keys of the privacy protocols; never returned to the server and never checkpointed.
    rng : numpy.random.Generator
        The client's generator for this round, keyed by (seed, client id, round).
    round : int
        The round (or the stream round of an evaluation pass).
    meta : dict
        Facts of the client's recipe (e.g. its true group, for evaluation).
    """

    id: int
    name: str
    round: int

    @property
    def data(self) -> Any: ...

    @property
    def state(self) -> dict[str, Any]: ...

    @property
    def secrets(self) -> dict[str, Any]: ...

    @property
    def rng(self) -> np.random.Generator: ...

    @property
    def meta(self) -> dict[str, Any]: ...
