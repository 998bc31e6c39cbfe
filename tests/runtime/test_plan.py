"""Planning a call for the hosts (:mod:`fedray.runtime.tasks`) and the pool's own records of dead and
late actors (:class:`fedray.runtime.pool.ClientPool`), without Ray: a call's items reach each host in
client-id order, in the compact form only where every client runs one task and hosts own consecutive
clients; the pool keeps dead actors' clients out of a call and says when a chain over every host may start."""
from __future__ import annotations

import numpy as np

from fedray.core.contract import CohortTasks, Task
from fedray.runtime.pool import ClientPool
from fedray.runtime.tasks import UniformTasks, plan_shared, split_tasks


def _fn(payload, shared, client):
    return None


def _listed(per_host):
    """Each host's items as (client id, task, shared index) tuples, whatever their form."""
    return {h: [(int(c), t, s) for c, t, s in items] for h, items in per_host.items()}


def test_one_task_over_consecutive_owners_is_one_uniform_slice_per_host_in_client_order():
    task = Task(_fn, None, np.zeros(3))
    tasks = CohortTasks(np.arange(2, 11), task)
    shared, which = plan_shared(tasks)
    assert len(shared) == 1 and shared[0] is task.shared
    owner = np.repeat(np.arange(4), 3)  # clients 0-2 on host 0, 3-5 on host 1, ...
    per_host, uniform = split_tasks(tasks, which, owner)
    assert uniform and list(per_host) == [0, 1, 2, 3]
    assert all(type(items) is UniformTasks for items in per_host.values())
    assert _listed(per_host) == {h: [(c, task, 0) for c in range(2, 11) if owner[c] == h] for h in range(4)}


def test_a_dict_of_one_task_plans_as_its_cohort_does():
    task = Task(_fn)
    as_dict = {c: task for c in (7, 1, 4)}
    per_dict, uniform_dict = split_tasks(as_dict, plan_shared(as_dict)[1])
    per_cohort, uniform_cohort = split_tasks(CohortTasks([1, 4, 7], task), plan_shared(as_dict)[1])
    assert uniform_dict and uniform_cohort
    assert _listed(per_dict) == _listed(per_cohort) == {0: [(1, task, -1), (4, task, -1), (7, task, -1)]}


def test_different_tasks_or_unordered_owners_give_lists_and_say_so():
    a, b = Task(_fn, None, np.ones(2)), Task(_fn, None, np.zeros(2))
    mixed = {0: a, 1: b, 2: a, 3: b}
    shared, which = plan_shared(mixed)
    assert len(shared) == 2 and [which[c] for c in range(4)] == [0, 1, 0, 1]
    per_host, uniform = split_tasks(mixed, which, np.array([0, 0, 1, 1]))
    assert not uniform and _listed(per_host) == {0: [(0, a, 0), (1, b, 1)], 1: [(2, a, 0), (3, b, 1)]}
    # one task, but host 1 holds clients on both sides of host 0's: host order is not client order
    same = CohortTasks(np.arange(3), a)
    per_host, uniform = split_tasks(same, plan_shared(same)[1], np.array([1, 0, 1]))
    assert not uniform and _listed(per_host) == {1: [(0, a, 0), (2, a, 0)], 0: [(1, a, 0)]}


def test_the_pool_keeps_dead_actors_out_of_a_call_and_is_quiet_only_without_dead_or_late_ones():
    pool = ClientPool(["a0", "a1", "a2"], np.array([0, 0, 1, 1, 2, 2]))
    assert pool.quiet() and pool.alive() == [0, 1, 2] and pool.busy() == set()
    pool.mark_dead({1})
    tasks = CohortTasks(np.arange(6), Task(_fn))
    per_actor, _ = pool.split(tasks, plan_shared(tasks)[1])
    taken = pool.take_dead(per_actor)
    assert list(taken) == [1] and taken[1].client_ids() == [2, 3] and sorted(per_actor) == [0, 2]
    assert not pool.quiet() and pool.alive() == [0, 2]
    pool.clear()
    assert pool.quiet() and pool.alive() == []
