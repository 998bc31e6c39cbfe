"""reproductions/fedcref2025's scripts run end to end in small forms and write what they say."""
from __future__ import annotations

import pandas as pd

from reproductions.fedcref2025 import association_diagnostic, ceiling, tables


def _main():
    return tables.main


def test_fedcref_tables_quick(tmp_path):
    out = tmp_path / "fedcref"
    df = _main()(["--quick", "--out", str(out)])
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == len(df) == 3 + 3 * 2          # main: 3 variants; each sweep: one setting x 2 variants
    assert set(runs["table"]) == {"main", "dirtiness", "overlap", "clients"}
    main = runs[runs["table"] == "main"].set_index("variant")
    assert set(main.index) == {"fedcref", "no-federation", "perfect-association"}
    assert main.loc["perfect-association", "wrong_associations_end"] == 0.0
    assert main.loc["no-federation", "communities_end"] == 0.0
    assert (runs["acc_start"].between(0.65, 0.75)).all()      # dirtiness 0.3
    text = (out / "tables.md").read_text()
    for section in ("### main", "### dirtiness", "### overlap", "### clients"):
        assert section in text
    assert (out / "plots" / "curves_main_default.png").exists()
    assert (out / "plots" / "graph_main_default.png").exists()


def test_association_diagnostic_labels_every_cross_client_pair_once(tmp_path):
    """Each ordered pair of clusters of different clients is counted once, as true (same majority class)
    or false; raising tau only adds edges; the grid has one row per (normalisation, P, tau)."""
    mod = association_diagnostic
    grid = mod.main(["--dataset", "sklearn:digits", "--clients", "4", "--classes", "2", "3",
                     "--samples-per-class", "20", "--epochs", "2", "--hidden", "8", "4", "--percentiles", "75",
                     "--taus", "0.2", "0.5", "--ratios", "0", "0.9", "--out", str(tmp_path)])
    dist = pd.read_csv(tmp_path / "distributions.csv")
    nodes = pd.read_csv(tmp_path / "nodes_seed0_epochs2.csv")
    owner, cls = nodes["owner"].to_numpy(), nodes["majority_class"].to_numpy()
    cross = owner[:, None] != owner[None, :]
    same = cls[:, None] == cls[None, :]
    assert len(grid) == 4 * 1 * 2 * 2                               # normalisations x P x tau x ratio
    # the ratio test only adds edges to those of the tau test
    paired = grid.pivot_table(index=["normalisation", "tau"], columns="ratio", values="edges")
    assert (paired[0.9] >= paired[0.0]).all()
    grid = grid[grid["ratio"] == 0.0]
    for _, g in dist.groupby("normalisation"):
        n = dict(zip(g["pairs"].astype(str).str.lower(), g["n"]))
        assert n == {"true": int((cross & same).sum()), "false": int((cross & ~same).sum())}
    assert (grid.groupby("normalisation")["edges"].apply(lambda e: e.is_monotonic_increasing)).all()
    assert grid["true_pass"].between(0, 1).all() and grid["false_pass"].between(0, 1).all()


def test_association_diagnostic_reuses_its_build_and_the_sibling_filter_only_removes_edges(tmp_path):
    """A second call reads the cached build and gives the same grid; the sibling filter keeps a subset of
    the edges (so never more); one local refinement is a different build (its own cache file), and its
    clusters still number at most the classes each client holds."""
    mod = association_diagnostic
    argv = ["--dataset", "sklearn:digits", "--clients", "4", "--classes", "2", "3", "--samples-per-class", "20",
            "--epochs", "2", "--hidden", "8", "4", "--normalisations", "relative", "--percentiles", "95",
            "--taus", "0.3", "1.0", "--links", "best", "mutual-best", "--selfs", "0", "0.5", "--out", str(tmp_path)]
    first = mod.main(argv)
    assert len(list(tmp_path.glob("build_*.npz"))) == 1
    again = mod.main(argv)
    pd.testing.assert_frame_equal(first, again)
    wide = first.pivot_table(index=["tau", "link"], columns="self", values="edges")
    assert (wide[0.5] <= wide[0.0]).all()
    assert (first[first["link"] == "mutual-best"]["edges"].to_numpy()
            <= first[first["link"] == "best"]["edges"].to_numpy()).all()
    refined = mod.main(argv + ["--local-refinements", "1"])
    assert len(list(tmp_path.glob("build_*.npz"))) == 2
    assert refined["clusters"].iloc[0] <= first["clusters"].iloc[0]


def test_ceiling_script_scores_every_client_with_each_oracle(tmp_path):
    """One row per client and oracle ACC in [0, 1]; each client holds lo..hi classes of S samples; the
    per-seed table is the clients' mean, and its last column is pooled minus own."""
    mod = ceiling
    table = mod.main(["--dataset", "sklearn:digits", "--clients", "3", "--classes", "2", "3",
                      "--samples-per-class", "15", "--epochs", "2", "--hidden", "8", "4", "--seeds", "0", "1",
                      "--out", str(tmp_path)])
    rows = pd.read_csv(tmp_path / "clients.csv")
    cols = ["own clean", "pooled clean", "pooled, Algorithm 2", "pooled only, Algorithm 2"]
    assert len(rows) == 2 * 3 and list(table.index) == [0, 1]
    assert rows["classes"].between(2, 3).all() and (rows["samples"] == 15 * rows["classes"]).all()
    assert rows[cols].apply(lambda c: c.between(0, 1)).all().all()
    assert (table[cols] - rows.groupby("seed")[cols].mean()).abs().max().max() < 1e-12
    diff = table["pooled clean"] - table["own clean"]
    assert (table["pooled clean - own clean"] - diff).abs().max() < 1e-12
    assert (tmp_path / "seeds.csv").exists()


def test_fedcref_tables_resume_skips_the_settings_already_run(tmp_path):
    """With --resume, a (table, setting, seed) already in runs.parquet is kept and not run again; the others run."""
    mod = tables
    out = tmp_path / "fc"
    out.mkdir()
    kept = {"table": "dirtiness", "setting": "0.3", "seed": 0, "variant": "fedcref", "acc_end": 0.5}
    pd.DataFrame([kept]).to_parquet(out / "runs.parquet", index=False)
    ran = []

    def fake(args, table, setting, seed, variants, base, central, plots):
        ran.append((table, str(setting), seed))
        return [{"table": table, "setting": str(setting), "seed": seed, "variant": "fedcref", "acc_end": 0.9}]

    mod.run_setting = fake
    argv = ["--tables", "dirtiness", "--settings", "0.3", "0.5", "--seeds", "0", "--out", str(out), "--resume"]
    df = mod.main(argv)
    assert ran == [("dirtiness", "0.5", 0)]
    assert df.set_index("setting")["acc_end"].to_dict() == {"0.3": 0.5, "0.5": 0.9}
    ran.clear()
    mod.main(argv)
    assert ran == []  # everything is in runs.parquet now
