"""The system memory T of FLACC (eq. 18, Fig. 3 of Mehta & Shao 2023) changes the merge trace where it should.

A run end to end on the local runtime, with the round schedule and the clients' updates fixed by
hand so that the case of the paper's Fig. 3 happens for sure: client 3 (group B) is sampled with
clients 0 and 1 (group A) in round 0 only, while every update still shares one direction (cosine
0.3), and never again with group A. The leaked similarity makes client 3 join A in round 3 when
the memory is long enough to reach back three rounds (T >= 3, T = infinity); with T = 2 it is
forgotten, client 3 waits, and joins its own group when sampled with it in round 4.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from fedray.algorithms.flacc import FLACC
from fedray.api.session import Session
from fedray.core.errors import SharedSamplesWarning

GROUP_A, GROUP_B = (0, 1, 2), (3, 4, 5)
# clients that train in each round (the paper's M^(t)), chosen so the case of Fig. 3 happens
SCHEDULE = {0: (0, 1, 3), 1: (2, 4, 5), 2: (1, 2, 5), 3: (0, 4), 4: (3, 4, 5), 5: (0, 4), 6: (1, 5)}
LEAK = 0.3  # cosine of client 3's round-0 update with group A's


class ScheduledFLACC(FLACC):
    """FLACC whose sampled clients follow :data:`SCHEDULE` and send hand-made updates:
    group A +e0, group B -e0 (cosine -1 across the groups, 1 within), except client 3 in round 0,
    which sends 0.3 e0 + sqrt(0.91) e1 (cosine 0.3 with group A: the common early direction)."""

    def configure_round(self, ctx: Any) -> Any:
        return self.make_tasks(ctx, SCHEDULE[ctx.round], round=ctx.round)

    @classmethod
    def client_train(cls, model: Any, ctx: Any) -> dict[str, Any]:
        cid, rnd = ctx.client.id, ctx.payload["round"]
        v = np.zeros_like(ctx.start)
        if cid == 3 and rnd == 0:
            v[0], v[1] = LEAK, np.sqrt(1 - LEAK ** 2)
        else:
            v[0] = 1.0 if cid in GROUP_A else -1.0
        return {"train_loss": 0.0, "weights": (ctx.start + v).astype(np.float32)}


def _run(memory: int | None) -> dict[str, Any]:
    cfg = {"seed": 0, "algorithm": {"name": "flacc"},
           "data": {"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [20, 30]}},
           "federation": {"n_clients": 6, "fraction": 0.5, "rounds": len(SCHEDULE)},
           "runtime": {"backend": "local", "progress": False}}
    params = {"epochs": 1, "eval_every": 100, "n_merge": 1, "n_sep": 2, "memory": memory}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        with Session(cfg) as s:
            return s.run(ScheduledFLACC, params, output=False).final


def _trace(final: dict[str, Any]) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    return [(m["round"], tuple(m["first"]), tuple(m["second"])) for m in final["merges"]]


@pytest.fixture(scope="module")
def runs() -> dict[int | None, dict[str, Any]]:
    return {T: _run(T) for T in (2, 3, None)}


def test_a_short_memory_forgets_the_leaked_similarity(runs) -> None:
    fin = runs[2]
    assert _trace(fin) == [(0, (0,), (1,)), (1, (4,), (5,)), (2, (0, 1), (2,)), (4, (3,), (4, 5))]
    assert sorted(tuple(e) for e in fin["entities"]) == [GROUP_A, GROUP_B]


def test_a_long_memory_merges_on_the_leaked_similarity(runs) -> None:
    for T in (3, None):  # round 3 - round 0 = 3 <= T: the pair (0, 3) of round 0 is still remembered
        fin = runs[T]
        assert _trace(fin)[:3] == _trace(runs[2])[:3]  # the same merges while the memories agree
        wrong = fin["merges"][3]
        assert (wrong["round"], tuple(wrong["first"]), tuple(wrong["second"])) == (3, GROUP_A, (3,))
        assert wrong["similarity"] == pytest.approx(LEAK, abs=1e-6)
        assert sorted(tuple(e) for e in fin["entities"]) == [(0, 1, 2, 3), (4, 5)]
    assert _trace(runs[3]) == _trace(runs[None])
