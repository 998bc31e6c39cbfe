"""scikit-learn style estimators (fedray.analysis.estimators): sklearn conventions, equality with KMeans, fedray.run."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris, make_blobs
from sklearn.utils.estimator_checks import check_estimator, parametrize_with_checks

import fedray
from fedray.analysis.estimators import (
    ESTIMATORS,
    EXPECTED_FAILED_CHECKS,
    KFED,
    FederatedFuzzyCMeans,
    FederatedKMeans,
    FederatedMiniBatchKMeans,
    FedFCM,
)
from fedray.core.errors import ConfigError, DataError, DataTypeError

X_BLOBS, Y_BLOBS = make_blobs(600, n_features=4, centers=5, cluster_std=2.5, random_state=1)
X_IRIS, Y_IRIS = load_iris(return_X_y=True)
SITES = np.array(["a", "b", "c"])[np.arange(150) % 3]

# Fewer rounds than the defaults keep the checks quick; the conventions do not depend on them.
CHECKED = [FederatedKMeans(random_state=0), FederatedFuzzyCMeans(random_state=0), FedFCM(max_iter=10, random_state=0),
           FederatedMiniBatchKMeans(max_iter=20, random_state=0), KFED(random_state=0)]


@parametrize_with_checks(CHECKED)
def test_sklearn_estimator_checks(estimator, check):
    """Every check of sklearn.utils.estimator_checks passes, with no expected failure."""
    check(estimator)


@pytest.mark.parametrize("estimator", CHECKED, ids=lambda e: type(e).__name__)
def test_check_estimator_reports_no_failure(estimator):
    """check_estimator itself, with no expected failures, finds none; and fedray's published list of
    checks that do not apply is empty for every estimator."""
    results = check_estimator(estimator, on_fail=None)
    assert [r["check_name"] for r in results if r["status"] == "failed"] == []
    assert len([r for r in results if r["status"] == "passed"]) >= 45
    assert set(EXPECTED_FAILED_CHECKS) == {e.__name__ for e in ESTIMATORS}
    assert EXPECTED_FAILED_CHECKS[type(estimator).__name__] == {}


def test_a_non_numeric_object_is_both_a_data_error_and_a_type_error():
    """An object array holding a dict is refused with one line that is a DataError (fedray's
    convention, a ValueError) and a TypeError (scikit-learn's), matching scikit-learn's message."""
    X = X_IRIS.astype(object)
    X[3, 1] = {"foo": "bar"}
    with pytest.raises(DataTypeError, match="argument must be .* string.* number") as info:
        FederatedKMeans(3, random_state=0).fit(X)
    assert isinstance(info.value, DataError) and isinstance(info.value, TypeError)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    assert "{'foo': 'bar'} (dict)" in str(info.value)


@pytest.mark.parametrize("max_iter,tol", [(300, 1e-4), (3, 1e-4), (300, 0.0), (300, 1e-2), (1, 0.0)])
@pytest.mark.parametrize("n_clients", [1, 7])
def test_federated_kmeans_equals_sklearn_lloyd(max_iter, tol, n_clients):
    """With full participation FederatedKMeans(init=C0) equals KMeans(init=C0, n_init=1, algorithm='lloyd'):
    centres to 1e-8, the same iterations (tol relative to the variance, max_iter as a cap), the same labels."""
    C0 = X_BLOBS[:5].copy()
    fed = FederatedKMeans(5, init=C0, max_iter=max_iter, tol=tol, n_clients=n_clients).fit(X_BLOBS)
    ref = KMeans(5, init=C0, n_init=1, algorithm="lloyd", max_iter=max_iter, tol=tol).fit(X_BLOBS)
    np.testing.assert_allclose(fed.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-8)
    assert fed.n_iter_ == ref.n_iter_
    np.testing.assert_array_equal(fed.labels_, ref.labels_)
    assert fed.inertia_ == pytest.approx(ref.inertia_, rel=1e-12)
    assert fed.score(X_BLOBS) == pytest.approx(ref.score(X_BLOBS), rel=1e-12)
    np.testing.assert_allclose(fed.transform(X_BLOBS[:20]), ref.transform(X_BLOBS[:20]), rtol=0, atol=1e-8)


def test_the_tolerance_really_decides_where_kmeans_stops():
    """The match above is not only max_iter: a looser tol stops earlier, as scikit-learn does."""
    C0 = X_BLOBS[:5].copy()
    loose = FederatedKMeans(5, init=C0, tol=1e-2, n_clients=3).fit(X_BLOBS)
    tight = FederatedKMeans(5, init=C0, tol=1e-9, n_clients=3).fit(X_BLOBS)
    assert loose.n_iter_ < tight.n_iter_ < 300


@pytest.mark.parametrize("cls,name,params", [
    (FederatedKMeans, "kmeans", {"n_clusters": 3}),
    (FederatedFuzzyCMeans, "federated-fcm", {"n_clusters": 3, "m": 1.7}),
    (FedFCM, "fedfcm", {"n_clusters": 3}),
    (FederatedMiniBatchKMeans, "fedkmeans", {"n_clusters": 3, "max_rounds": 30}),
    (KFED, "kfed", {"n_clusters": 3, "local_clusters": 4}),
])
def test_estimator_equals_fedray_run_with_the_same_seed_and_clients(cls, name, params):
    """fit(X, clients=...) with random_state=s is fedray.run on from_arrays(X, clients=...) with seed=s, bit for bit."""
    kw = {k: v for k, v in params.items() if k != "max_rounds"}
    if "max_rounds" in params:
        kw["max_iter"] = params["max_rounds"]
    est = cls(random_state=5, **kw).fit(X_IRIS, Y_IRIS, clients=SITES)
    if name == "kmeans":  # the estimator's tol is scikit-learn's relative one; compare with the same absolute value
        tol = float(np.sqrt(1e-4 * np.mean(X_IRIS.var(axis=0))))
        params = {**params, "tol": tol}
    res = fedray.run(seed=5, algorithm={"name": name, "params": params}, runtime={"backend": "local"},
                     data=fedray.from_arrays(X_IRIS, Y_IRIS, clients=SITES))
    np.testing.assert_allclose(est.cluster_centers_, res.centers, rtol=0, atol=1e-12 if name == "kmeans" else 0)
    assert est.n_clients_ == 3 and len(est.history_) == len(res.history)
    assert isinstance(est.history_, pd.DataFrame) and est.n_iter_ == int((est.history_["phase"] == "train").sum())
    assert est.metrics_["ari"] == pytest.approx(res.final["ari"], abs=1e-12)
    np.testing.assert_array_equal(est.labels_, est.predict(X_IRIS))
    np.testing.assert_array_equal(clone(est).fit_predict(X_IRIS, clients=SITES), est.labels_)


@pytest.mark.parametrize("cls", [FederatedFuzzyCMeans, FedFCM])
def test_fuzzy_estimators_give_memberships(cls):
    """predict_proba gives memberships (rows sum to 1) whose largest entry is the nearest centre."""
    est = cls(3, random_state=0, n_clients=4).fit(X_IRIS)
    U = est.predict_proba(X_IRIS)
    assert U.shape == (150, 3)
    np.testing.assert_allclose(U.sum(axis=1), 1.0)
    np.testing.assert_array_equal(U.argmax(axis=1), est.predict(X_IRIS))
    assert not hasattr(FederatedKMeans(), "predict_proba") and not hasattr(KFED(), "predict_proba")


def test_init_stores_and_fit_validates_with_one_line_errors():
    """__init__ only stores (clone and get_params keep the values); fit names the bad parameter in one line."""
    est = FederatedKMeans(n_clusters=0, max_iter=0)
    assert est.get_params()["max_iter"] == 0 and clone(est).get_params() == est.get_params()
    cases = [
        (
            FederatedKMeans(n_clusters=0),
            ConfigError,
            r"^The 'n_clusters' parameter of FederatedKMeans must be an int "
            r"in the range \[1, inf\); got 0 instead\.$",
        ),
        (FederatedKMeans(max_iter=0), ConfigError, r"'max_iter' parameter of FederatedKMeans must be an int"),
        (FederatedKMeans(tol=-1.0), ConfigError, r"'tol' parameter .* range \[0.0, inf\); got -1.0"),
        (FederatedKMeans(fraction=1.5), ConfigError, r"'fraction' parameter .* range \(0.0, 1.0\]; got 1.5"),
        (FederatedKMeans(backend="dask"), ConfigError, r"'backend' parameter .* \['local', 'ray'\]; got 'dask'"),
        (FederatedKMeans(address="ray://x:1"), ConfigError, r"'address' parameter .* needs backend='ray'"),
        (FederatedKMeans(init="k-means++"), ConfigError, r"'init' parameter .* \['kfed', 'random-box'\] or an array"),
        (
            FederatedKMeans(3, init=np.zeros((2, 4))),
            ConfigError,
            r"explicit centres must have shape .*\(3, 4\); got \(2, 4\)",
        ),
        (FederatedKMeans(random_state=-1), ConfigError, r"'random_state' parameter"),
        (
            FederatedFuzzyCMeans(m=1.0),
            ConfigError,
            r"'m' parameter of FederatedFuzzyCMeans must be a float in the range \(1.0",
        ),
        (FederatedMiniBatchKMeans(beta=0.0), ConfigError, r"'beta' parameter"),
        (KFED(local_clusters=0), ConfigError, r"'local_clusters' parameter of KFED"),
        (FederatedKMeans(n_clients=200), DataError, r"200 clients but the arrays have only n_samples=150 rows"),
        (
            FederatedKMeans(n_clients=2),
            ConfigError,
            r"'n_clients' parameter of FederatedKMeans is 2, but clients= names 3",
        ),
    ]
    for est, err, match in cases:
        with pytest.raises(err, match=match) as exc:
            est.fit(X_IRIS, clients=SITES if "clients=" in match else None)
        assert "\n" not in str(exc.value)


def test_dataframe_feature_names_and_client_column():
    """A DataFrame's columns become feature_names_in_; clients= may name a column, which is then no feature."""
    df = pd.DataFrame(X_IRIS, columns=["a", "b", "c", "d"]).assign(site=SITES)
    est = FederatedKMeans(3, random_state=0).fit(df, clients="site")
    assert list(est.feature_names_in_) == ["a", "b", "c", "d"] and est.n_features_in_ == 4 and est.n_clients_ == 3
    ref = FederatedKMeans(3, random_state=0).fit(X_IRIS, clients=SITES)
    np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)


def test_ray_backend_equals_local(ray_session):
    """backend='ray' gives the local result bit for bit."""
    a = FederatedFuzzyCMeans(3, random_state=1, n_clients=4).fit(X_IRIS)
    b = FederatedFuzzyCMeans(3, random_state=1, n_clients=4, backend="ray").fit(X_IRIS)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.n_iter_ == b.n_iter_


def test_readme_from_python_arrays_snippet_runs():
    """The README's "From Python arrays" example runs as printed and gives what its comments say."""
    import contextlib
    import io
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("## From Python arrays", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    scope: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the documented example
    assert out.getvalue().startswith("arrays: 3 clients, 150x4 ")
    assert scope["km"].cluster_centers_.shape == (3, 4) and scope["km"].n_clients_ == 3
    np.testing.assert_allclose(scope["fcm"].predict_proba(X_IRIS[:2]).sum(axis=1), 1.0)
