"""Federated validation: FedFuzzDB equals the pooled index, crisp DB, hidden counts, knowledge gap."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import davies_bouldin_score

import fedray
from fedray.algorithms.fedfuzzdb import crisp_davies_bouldin, fuzzy_davies_bouldin
from fedray.analysis.validation import (
    center_distances,
    federated_crisp_db,
    federated_fuzzy_db,
    federated_variance,
    knowledge_gap,
)
from fedray.core.errors import ConfigError, DataError
from fedray.core.ops import assign, fcm_memberships, lloyd

LOCAL = {"backend": "local", "progress": False}


def _naive_fuzzy_db(X, C, m=2.0, q=1.0, p=2.0):
    """Eqs. (7)-(13) written out loop by loop."""
    K = C.shape[0]
    U = fcm_memberships(X, C, m)
    S = [U[:, i].mean() * np.mean(np.linalg.norm(X - C[i], axis=1) ** q) ** (1 / q) for i in range(K)]
    R = []
    for i in range(K):
        R.append(max((S[i] + S[j]) / np.sum(np.abs(C[i] - C[j]) ** p) ** (1 / p) for j in range(K) if j != i))
    return float(np.mean(R))


def _session(partition, n_clients, seed=0):
    return fedray.Session(algorithm={"name": "fedfcm"}, data={"dataset": "sklearn:wine", "scale": "standard",
                                                              "partition": partition},
                          federation={"n_clients": n_clients}, runtime=LOCAL, seed=seed)


def _union(session):
    return np.vstack([p[1] for p in session.executor.gather_data(labels=False)])


@pytest.mark.parametrize("m,q,p", [(2.0, 1.0, 2.0), (1.5, 2.0, 1.0)])
def test_pooled_index_matches_the_definition(m, q, p):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    C = rng.normal(size=(4, 3))
    assert fuzzy_davies_bouldin(X, C, m, q, p) == pytest.approx(_naive_fuzzy_db(X, C, m, q, p), rel=1e-12)


@pytest.mark.parametrize("partition,n_clients", [({"name": "iid"}, 2), ({"name": "iid"}, 7),
                                                 ({"name": "dirichlet", "alpha": 0.3}, 5),
                                                 ({"name": "quantity_skew", "alpha": 0.5}, 11)])
@pytest.mark.parametrize("hide_n", [False, True])
def test_fedfuzzdb_equals_the_pooled_index_for_the_same_centres(partition, n_clients, hide_n):
    with _session(partition, n_clients) as s:
        X = _union(s)
        C = X[np.random.default_rng(n_clients).choice(len(X), 4, replace=False)] + 0.01
        fed = federated_fuzzy_db(s, C, m=2.0, hide_n=hide_n)
        crisp = federated_crisp_db(s, C, hide_n=hide_n)
    assert fed == pytest.approx(fuzzy_davies_bouldin(X, C, 2.0), rel=0, abs=1e-9)
    assert crisp == pytest.approx(crisp_davies_bouldin(X, C), rel=0, abs=1e-9)


def test_hidden_counts_reach_the_server_only_as_a_secure_total():
    """hide_n sums every client's statistics through the one secure sum: the message log shows
    only masked vectors for the validation call, and the index equals the pooled one."""
    with fedray.Session(data={"dataset": "sklearn:iris"}, federation={"n_clients": 6},
                        runtime={"backend": "local"}, **{"output.messages": True}) as s:
        X = _union(s)
        C = X[[0, 60, 120]] + 0.01
        fed = federated_fuzzy_db(s, C, m=2.0, hide_n=True)
        rows = [r for r in s.outside_records()["messages"] if r["purpose"] == "validation" and r["direction"] == "up"]
    assert fed == pytest.approx(fuzzy_davies_bouldin(X, C, 2.0), rel=0, abs=1e-9)
    assert len(rows) == 6 and {r["kind"] for r in rows} == {"masked"}


def test_crisp_index_equals_scikit_learn_at_lloyd_convergence():
    X = fedray.data.load_dataset("sklearn:iris").X
    C, labels, _ = lloyd(X, X[[0, 50, 100, 120]], max_iter=500, tol=0.0)
    assert np.array_equal(assign(X, C)[0], labels)
    assert crisp_davies_bouldin(X, C) == pytest.approx(davies_bouldin_score(X, labels), rel=1e-9)


def test_crisp_index_skips_empty_clusters():
    X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    C = np.array([[0.05, 0.0], [5.05, 5.0], [100.0, 100.0]])
    assert crisp_davies_bouldin(X, C) == pytest.approx(crisp_davies_bouldin(X, C[:2]))


def test_knowledge_gap_is_permutation_invariant_and_scaled_by_variance():
    ref = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    est = ref[[2, 0, 1]] + np.array([0.3, 0.0])
    var = np.array([4.0, 1.0])
    assert knowledge_gap(est, ref, var) == pytest.approx(3 * 0.3 / 2.0)
    assert knowledge_gap(ref, ref, var) == 0.0
    np.testing.assert_allclose(center_distances(est, ref), [0.3, 0.3, 0.3])
    with pytest.raises(DataError, match="shape"):
        knowledge_gap(est[:2], ref, var)


def test_federated_variance_equals_pooled():
    with _session({"name": "dirichlet", "alpha": 0.5}, 6) as s:
        X = _union(s)
        np.testing.assert_allclose(federated_variance(s), X.var(axis=0), rtol=1e-10)


def test_bad_exponents_and_too_few_centres():
    X = np.zeros((5, 2))
    with pytest.raises(ConfigError, match="q"):
        fuzzy_davies_bouldin(X, np.eye(2), q=0)
    with pytest.raises(ConfigError, match="m"):
        fuzzy_davies_bouldin(X, np.eye(2), m=1.0)
    with pytest.raises(DataError, match="2 centres"):
        crisp_davies_bouldin(X, np.zeros((1, 2)))
