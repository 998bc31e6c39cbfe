"""What a run's tables say about each round and each client.

* ``clients.parquet`` counts, for every algorithm, the rounds a client took part in
  (``rounds_participated``: it answered a task of the algorithm) apart from the rounds
  in which it only evaluated the current model (``rounds_evaluated``: supervised
  methods evaluate every client, sampled or not).
* With a partial cohort (``federation.fraction < 1``) the per-round objective sums
  over the sampled clients only; ``rounds.parquet`` names it ``objective_sampled`` and
  the convergence plot labels it "sampled clients". With every client it is ``objective``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fedray

BLOBS = {"dataset": "blobs", "options": {"points_per_client": 40, "n_centers": 3}}
LOCAL = {"backend": "local", "progress": False}


def test_rounds_participated_counts_the_sampled_clients_that_answered():
    res = fedray.run(algorithm={"name": "kmeans", "params": {"max_rounds": 6, "tol": 1e-300}}, data=BLOBS,
                     federation={"n_clients": 10, "fraction": 0.3, "rounds": 7}, runtime=LOCAL, output=False)
    c = res.clients
    assert {"rounds_participated", "rounds_evaluated"} <= set(c.columns) and "rounds" not in c.columns
    assert c["rounds_participated"].sum() == res.history["clients_answered"].sum()
    # the k-FED start asks every client, then 3 of 10 a round: participation differs between clients
    assert c["rounds_participated"].min() >= 1 and c["rounds_participated"].max() < len(res.history)
    assert (c["rounds_evaluated"] == 0).all()


def test_evaluation_only_rounds_are_not_participation():
    pytest.importorskip("torch")
    res = fedray.run(algorithm={"name": "fedavg", "params": {"epochs": 1, "eval_every": 1, "model": "mlp"}},
                     data={"dataset": "sklearn:digits", "partition": {"name": "rotated", "samples": [20, 30]}},
                     federation={"n_clients": 8, "fraction": 0.5, "rounds": 3}, runtime=LOCAL, output=False)
    c = res.clients
    assert c["rounds_participated"].sum() == 3 * 4  # 4 of 8 clients train each round
    # every client is evaluated every round: either it trained (and reported) or it only evaluated
    np.testing.assert_array_equal(c["rounds_participated"] + c["rounds_evaluated"], np.full(8, 3))
    assert {"accuracy", "cluster", "true_group"} <= set(c.columns)


@pytest.mark.parametrize("fraction, column", [(0.5, "objective_sampled"), (1.0, "objective")])
def test_the_per_round_objective_says_whose_objective_it_is(tmp_path, fraction, column):
    res = fedray.run(algorithm={"name": "federated-fcm", "params": {"max_rounds": 4, "objective": True}}, data=BLOBS,
                     federation={"n_clients": 8, "fraction": fraction, "rounds": 5}, runtime=LOCAL,
                     output=str(tmp_path / "o"))
    rounds = pd.read_parquet(res.output_dir / "rounds.parquet")
    other = {"objective", "objective_sampled"} - {column}
    assert column in rounds.columns and not other & set(rounds.columns)
    assert rounds[column].iloc[1:].notna().all()
    assert "objective" in res.summary["final"]  # the final objective is always over every client
