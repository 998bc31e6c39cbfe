"""reproductions/fedcref2025/first_exchange.py: each build is scored under every rule and recorded once."""
from __future__ import annotations

import numpy as np

from reproductions.common import recorded, scratch_results
from reproductions.fedcref2025 import association_diagnostic as diag
from reproductions.fedcref2025 import first_exchange as fx


def test_the_grid_records_every_rule_once_and_a_rerun_only_reads(tmp_path):
    with scratch_results(tmp_path / "results"):
        n = fx.run_grid(["mnist-train"], [20], [0.3], [0], None, quick=True, cache=tmp_path / "builds")
        df = recorded("fedcref2025", "first-exchange")
        assert n == len(fx.RULES) == len(df)
        assert set(df["variant"]) == {fx.variant(20, 0.3, r) for r in fx.RULES}
        assert (df["scale"] == "reduced").all() and (df["method"] == "mnist-train").all()
        assert len(list((tmp_path / "builds").glob("build_*.npz"))) == 1
        assert fx.run_grid(["mnist-train"], [20], [0.3], [0], None, quick=True, cache=tmp_path / "builds") == 0


def test_scores_follow_the_rules_a_looser_tau_only_adds_edges(tmp_path):
    a = fx.build_args("mnist", {}, 20, 0.3, None, quick=True)
    b = diag.cached_build(a, 0, tmp_path)
    s = {r: fx.score(b, r) for r in fx.RULES}
    assert s["authors τ=0.1"]["edges"] <= s["authors τ=0.2"]["edges"] <= s["authors τ=0.3"]["edges"]
    for q in s.values():
        assert 0 <= q["wrong_associations"] <= 100 and q["clusters"] == len(b["owner"])
        assert q["communities"] >= q["pure_communities"]
    # the authors' scan with a strict test: recomputed here by hand
    S = diag.statistics(b, 75, "cluster", equal=np.nan)
    passes = (S < 0.25) & (S.T < 0.25)
    owner = b["owner"]
    edges = set()
    for ca in np.unique(owner):
        for cb in np.unique(owner[owner > ca]):
            for i in np.flatnonzero(owner == ca):
                hit = np.flatnonzero((owner == cb) & passes[i])
                if hit.size:
                    edges.add((i, int(hit[0])))
    assert s["authors τ=0.25"]["edges"] == len(edges)


def test_the_summary_and_plot_come_from_the_records(tmp_path):
    with scratch_results(tmp_path / "results"):
        fx.run_grid(["mnist-train"], [20], [0.3, 0.5], [0], None, quick=True, cache=tmp_path / "builds")
        df = recorded("fedcref2025", "first-exchange")
    s = fx.summary(df)
    assert len(s) == 2 * len(fx.RULES)
    md = fx.markdown(df)
    assert md.count("\n") == 2 + len(s)
    fx.plot(df, tmp_path / "fx.png")
    assert (tmp_path / "fx.png").stat().st_size > 0
