"""Choosing K: the motivational example of Stallmann & Wilbik (2022), one session for every K, CLI."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import fedray
from fedray.analysis.kselect import central_curve, choose_k, select_k
from fedray.core.errors import ConfigError, DataError

LOCAL = {"backend": "local", "progress": False}
MOTIVATIONAL = {"algorithm": {"name": "fedfcm"}, "data": {"dataset": "scenario:stallmann-motivational"},
                "runtime": LOCAL}


@pytest.fixture(scope="module")
def motivational(tmp_path_factory):
    out = tmp_path_factory.mktemp("ksel")
    return select_k(MOTIVATIONAL, k_min=2, k_max=8, output=out), out


def test_federated_and_central_find_five_clusters_each_client_alone_two(motivational):
    sel, _ = motivational
    assert sel.chosen["federated"] == 5
    assert sel.chosen["central"] == 5
    local = {k: v for k, v in sel.chosen.items() if k.startswith("local:")}
    assert len(local) == 3 and set(local.values()) == {2}
    central5 = float(sel.table.loc[sel.table["k"] == 5, "central"].iloc[0])
    assert central5 == pytest.approx(0.4348, abs=0.02)  # Table 1 of the paper


def test_outputs_table_choice_and_plot(motivational):
    sel, out = motivational
    table = pd.read_parquet(out / "k_selection.parquet")
    assert table["k"].tolist() == list(range(2, 9))
    assert {"federated", "central", "local:client-1", "local:client-2", "local:client-3"} <= set(table.columns)
    # the paper's local range is 2..5 (Table 1): no local values beyond it
    assert table.loc[table["k"] > 5, "local:client-1"].isna().all()
    saved = json.loads((out / "k_selection.json").read_text())
    assert saved["k"] == 5 and saved["n_init"] == 10
    assert (out / "plots" / "k_selection.png").stat().st_size > 10_000
    assert "**0.4" in sel.markdown() and "best of 10 starts" in sel.markdown()


def test_the_central_k5_optimum_is_found_for_every_seed():
    """Central FCM at K = 5 on the motivational data reaches the optimum (index ~0.435, Table 1:
    0.4348) for seeds 0-9, below K = 4's ~0.46: a bare k-means++ start gets there only in about
    40% of tries, so a best-of-3 choice of K was a matter of luck."""
    for seed in range(10):
        with fedray.Session({**MOTIVATIONAL, "seed": seed}) as s:
            X = np.vstack([part[1] for part in s.executor.gather_data(labels=False)])
        (v4, v5), _ = central_curve(X, [4, 5], True, seed, n_init=10)
        assert v5 < 0.44 < v4, (seed, v4, v5)


def test_one_session_serves_every_k(monkeypatch):
    import fedray.api.session as session_mod

    built = []
    orig = session_mod.Session.__init__

    def counting(self, *a, **kw):
        built.append(1)
        orig(self, *a, **kw)

    monkeypatch.setattr(session_mod.Session, "__init__", counting)
    descriptions = []
    orig_describe = fedray.runtime.local.LocalExecutor.describe
    monkeypatch.setattr(fedray.runtime.local.LocalExecutor, "describe",
                        lambda self: descriptions.append(1) or orig_describe(self))
    sel = select_k(MOTIVATIONAL, k_min=2, k_max=4, central=False, local=False)
    assert len(built) == 1 and len(descriptions) == 1
    assert sel.table["rounds"].min() >= 1 and list(sel.federated_centers) == [2, 3, 4]


def test_crisp_index_for_the_k_means_family():
    sel = select_k(algorithm={"name": "kmeans"}, data={"dataset": "blobs", "options": {
        "n_centers": 4, "cluster_std": 0.3, "points_per_client": 100}}, federation={"n_clients": 5},
        runtime=LOCAL, seed=2, k_min=2, k_max=6, local=False)
    assert sel.index == "crisp-db"
    assert sel.chosen["federated"] == 4 and sel.chosen["central"] == 4


def test_hidden_counts_give_the_same_index():
    a = select_k(MOTIVATIONAL, k_min=4, k_max=5, central=False, local=False)
    b = select_k(MOTIVATIONAL, k_min=4, k_max=5, central=False, local=False, hide_n=True)
    np.testing.assert_allclose(a.table["federated"], b.table["federated"], rtol=0, atol=1e-12)


def test_choose_k_min_and_elbow():
    ks = [2, 3, 4, 5, 6, 7]
    assert choose_k(ks, [0.9, 0.5, 0.45, 0.6, 0.44, 0.7], "min") == 6
    assert choose_k(ks, [1.0, 0.4, 0.38, 0.37, 0.36, 0.35], "elbow") == 3
    assert choose_k(ks, [np.nan] * 6) is None
    with pytest.raises(ConfigError, match="method"):
        choose_k(ks, [1.0] * 6, "max")


@pytest.mark.parametrize("kw,err,match", [
    ({"k_min": 1}, ConfigError, "k-min"),
    ({"k_min": 5, "k_max": 4}, ConfigError, "empty"),
    ({"k_max": 10_000}, DataError, "k_max=10000"),
    ({"method": "best"}, ConfigError, "method"),
    ({"local_k_range": (1, 3)}, ConfigError, "local_k_range"),
    ({"n_init": 0}, ConfigError, "n-init"),
    ({"n_init": 2.5}, ConfigError, "n-init"),
])
def test_bad_input_is_a_clear_error(kw, err, match):
    with pytest.raises(err, match=match):
        select_k(MOTIVATIONAL, **{"k_min": 2, "k_max": 3, **kw})


def test_algorithm_without_n_clusters_is_refused(monkeypatch):
    import fedray.core.contract as A
    from fedray.core.registry import ALGORITHMS

    class _NoK(A.Algorithm):
        name = "_test-no-k"
        Params = A.Params

    monkeypatch.setitem(ALGORITHMS._items, _NoK.name, _NoK)
    with pytest.raises(ConfigError, match="n_clusters"):
        select_k({**MOTIVATIONAL, "algorithm": {"name": "_test-no-k"}}, k_min=2, k_max=3)


def test_cli_select_k(tmp_path, capsys):
    from fedray.tools.cli import main

    cfg = tmp_path / "mot.yaml"
    cfg.write_text(fedray.make_config(MOTIVATIONAL).to_yaml())
    rc = main(["select-k", str(cfg), "--k-min", "2", "--k-max", "3", "--no-local", "--out", str(tmp_path / "o"),
               "--set", "algorithm.params.m=2.0"])
    assert rc == 0
    assert "chosen K (federated): 3" in capsys.readouterr().out
    assert (tmp_path / "o" / "plots" / "k_selection.png").exists()
    assert main(["select-k", str(cfg), "--k-min", "1"]) == 2
    assert "k-min" in capsys.readouterr().err


def test_ray_runtime_gives_the_same_curve(ray_session):
    local = select_k(MOTIVATIONAL, k_min=4, k_max=5, central=False)
    on_ray = select_k({**MOTIVATIONAL, "runtime": {"backend": "ray", "progress": False}}, k_min=4, k_max=5,
                      central=False)
    cols = ["federated", "local:client-1", "local:client-2", "local:client-3"]
    np.testing.assert_array_equal(local.table[cols].to_numpy(), on_ray.table[cols].to_numpy())
    assert on_ray.chosen == local.chosen


def test_select_k_under_secure_aggregation_releases_only_masked_sums_and_counted_curves():
    """Under privacy.secure_aggregation every call of select_k outside its runs passes through the
    layers: the validation sums reach the server as masked vectors only, and the one unmasked
    reply kind — the local-only baseline's per-client curves — is counted as a disclosure."""
    cfg = {**MOTIVATIONAL, "algorithm": {"name": "federated-fcm"}, "privacy": {"secure_aggregation": True},
           "output": {"messages": True}}
    sel = select_k(cfg, k_min=2, k_max=3, central=False, local=True)
    up = [r for r in sel.outside["messages"] if r["direction"] == "up"]
    assert {r["purpose"] for r in up if r["kind"] == "masked"} >= {"validation", "moments"}
    unmasked = [r for r in up if r["kind"] != "masked"]
    assert {r["purpose"] for r in unmasked} <= {"select_k local curves"}
    assert sel.outside["disclosures"].get("local_index_curves", 0) == len(unmasked) > 0
    # every release of those calls is listed and counted (kind, cohort, summed, noised)
    kinds = {(r["kind"], r["summed"]) for r in sel.outside["releases"]}
    assert ("adhoc", True) in kinds and ("setup", True) in kinds
    assert sum(r["kind"] == "adhoc" and r["summed"] for r in sel.outside["releases"]) >= 2  # one index per K
