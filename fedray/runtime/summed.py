"""Summed calls on Ray: the hosts add their clients' replies themselves (``Task(summed=True)``).

Every host runs its clients and keeps the replies (:class:`~fedray.runtime.messages.HostTask` with
``keep``); then the hosts add them in client order, each continuing the sum of the hosts before it
(a chain of small ``fold_kept`` calls), so that only the sum travels and it has the bits of one sum
over the clients in order.

Each host is one more step of that chain: a Ray call that starts when the one before it has answered
(about 3 ms on 2 CPUs), while the server takes a client's reply in a few microseconds. The chain pays
where hosts hold many clients each (the packed layouts; at 10^6 clients it keeps 10^6 replies off the
server); with few clients a host (``clients_per_actor: 1``) it is slower than per-client replies, and
such calls go per client (:func:`hosts_sum`). Both give the same bits.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.core.errors import RoundFailedError
from fedray.core.replies import Replies
from fedray.core.stats import Stats
from fedray.runtime.executor import ExecResult
from fedray.runtime.messages import HostReply, HostTask
from fedray.runtime.pool import ClientPool

log = logging.getLogger(__name__)

#: The hosts add a summed call's replies themselves where they hold at least this many of its clients
#: each, on average. Measured on 2 CPUs (one k-means call, 10 points a client): 2 x 1000 and 20 x 1000
#: clients a host took the same time either way; 100 x 200 took 0.95 s chained against 0.70 s per
#: client, and 40 x 1 0.23 s against 0.13 s.
SUM_MIN_CLIENTS = 1000


def hosts_sum(n_clients: int, n_hosts: int, min_clients: int = SUM_MIN_CLIENTS) -> bool:
    """Whether the ``n_hosts`` hosts of a summed call over ``n_clients`` clients add the replies
    themselves (a chain of ``n_hosts`` calls) rather than send them per client."""
    return n_clients > 1 and n_clients >= min_clients * n_hosts


def execute_summed(pool: ClientPool, call: Call, per_actor: dict[int, Any], refs: list[Any],
                   get: Callable[[list[Any], str], list[Any]], fetch: Callable[[list[Any]], list[Any]]
                   ) -> ExecResult | None:
    """Run a summed call over ``per_actor`` (actor -> its :class:`~fedray.runtime.tasks.UniformTasks`, in
    client order: :func:`~fedray.runtime.tasks.split_tasks`) with the shared objects ``refs``; None when
    it cannot (the caller runs the call as usual). ``get``: ``ray.get`` under the executor's deadline;
    ``fetch``: an answer's parts with those stored in the object store fetched."""
    order = sorted(per_actor)  # actors own consecutive client ids: actor order is client order
    actors = pool.actors
    try:
        outs = get([actors[a].run.remote(HostTask(call.stream_round, per_actor[a], keep=True), *refs) for a in order],
                   call.label())
        if not all(o.ok for o in outs):
            return None  # a restarted actor: the usual call reports its clients and sets it up again
        if any(o.kept is None for o in outs):
            return _per_client(pool, order, outs, call, get, fetch)
        acc = None
        for a in order:
            acc = actors[a].fold_kept.remote(acc)
        sums = get([acc], call.label())[0]
    except RoundFailedError as exc:
        log.debug("%s: a summed call falls back to per-client replies: %s", call.label(), exc)
        return None
    kept = [o.kept for o in outs]
    cat = np.concatenate
    ones = {k: np.add.reduce(cat([k_.columns[k] for k_ in kept]).astype(np.float64, copy=False), axis=0)
            for k in kept[0].columns}
    total = Stats(**{k: (sums[k] if k in sums else ones[k]) for k in kept[0].names})  # the statistics' order
    return ExecResult(Replies.summed(cat([k.client_ids for k in kept]), cat([k.seconds for k in kept]),
                                     cat([k.nbytes for k in kept]), total))


def _per_client(pool: ClientPool, order: list[int], outs: list[HostReply], call: Call,
                get: Callable[[list[Any], str], list[Any]], fetch: Callable[[list[Any]], list[Any]]) -> ExecResult:
    """A summed call where some host answered client by client (a batched form that declined, a
    client's error, more replies than it keeps): every reply goes to the server, the kept ones
    fetched from their hosts; no client runs twice."""
    kept = [a for a, o in zip(order, outs) if o.kept is not None]
    fetched = dict(zip(kept, get([pool.actors[a].take_kept.remote() for a in kept], call.label())))
    result = ExecResult(Replies())
    for a, o in zip(order, outs):
        result.add_parts(fetch((fetched[a] if a in fetched else o).parts))
    result.sort_replies()
    result.failed.sort()
    return result
