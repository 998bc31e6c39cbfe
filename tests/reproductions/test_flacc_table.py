"""reproductions/mehta2023/table.py --quick: every method on the four federations, Table I layout."""
from __future__ import annotations

import re
import warnings

import pandas as pd
import pytest

from reproductions.mehta2023 import table as flacc_table


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    mod = flacc_table
    out = tmp_path_factory.mktemp("flacc_table")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = mod.main(["--quick", "--out", str(out)])
    return mod, runs, out


def test_quick_run_writes_every_output(quick) -> None:
    _, runs, out = quick
    for name in ("results.parquet", "rounds.parquet", "table.md", "accuracy.png", "clusters.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    saved = pd.read_parquet(out / "results.parquet")
    assert len(saved) == len(runs) == 4 * 6  # four federations x six methods (one variant each in quick mode)
    assert set(saved["federation"]) == {"rotated", "grouped", "label-swapped", "grouped+rotated"}
    rounds = pd.read_parquet(out / "rounds.parquet")
    assert rounds.groupby(["federation", "method", "variant"]).size().eq(4).all()  # 4 rounds each


def test_runs_have_the_expected_structure(quick) -> None:
    _, runs, _ = quick
    by = runs.set_index(["federation", "method"])
    for fed in ("rotated", "grouped", "label-swapped", "grouped+rotated"):
        assert by.loc[(fed, "fedavg"), "n_clusters"] == 1  # one global model
        assert by.loc[(fed, "local"), "n_clusters"] == 12  # one model per client
        # CFL ran with every client in every round (fraction 1.0): twice the uploaded models of FedAvg (0.5)
        assert by.loc[(fed, "cfl"), "bytes_up"] > 1.8 * by.loc[(fed, "fedavg"), "bytes_up"]
    assert runs["accuracy"].between(0, 100).all()
    # IFCA uses the true number of groups in quick mode: k = s
    assert set(runs.loc[runs["method"] == "ifca", "variant"]) == {"k=4", "k=5"}


def test_markdown_table_has_the_papers_layout_and_the_numbers(quick) -> None:
    mod, runs, out = quick
    md = (out / "table.md").read_text()
    header = md.splitlines()[0]
    assert header.startswith("| method | rotated sklearn:digits | grouped sklearn:digits |")
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    for label in ("NoFed", "FedAvg", "CFL", "FL+HC (d) d=3", "FLACC"):  # raw updates: d on their scale
        assert label in rows, label
    cells = re.findall(r"(\d+\.\d+) ± (\d+\.\d+)", rows["FLACC"])
    flacc = runs[runs["method"] == "flacc"].set_index("federation")["accuracy"]
    assert [float(m) for m, _ in cells] == pytest.approx(
        [flacc[f] for f in ("rotated", "grouped", "label-swapped", "grouped+rotated")], abs=0.006)
    assert "Clusters found by FLACC" in md and "| rotated | 4 |" in md


def test_n_merge_option_reaches_flacc_and_bounds_its_merges(quick, tmp_path) -> None:
    mod, _, _ = quick
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod.main(["--quick", "--federations", "rotated", "--methods", "flacc", "--n-merge", "1",
                  "--out", str(tmp_path)])
    rounds = pd.read_parquet(tmp_path / "rounds.parquet")
    merging = rounds[rounds["phase"] == "merging"]
    assert len(merging) and merging["merges"].max() == 1  # one merge a round at most, and it did merge
    assert "n_merge = 1" in (tmp_path / "table.md").read_text()


def test_flacc_params_reach_flacc_and_its_control_and_bad_ones_are_one_line(quick, tmp_path, capsys) -> None:
    """--flacc-params: alpha_0 = 0.99 admits no merge (every similarity is below it), so FLACC keeps its 12
    clients apart where alpha_0 = 0 merged them; the settings line says the value; bad values stop at parsing."""
    mod, runs, _ = quick
    assert runs.set_index(["federation", "method"]).loc[("rotated", "flacc"), "n_clusters"] < 12
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new = mod.main(["--quick", "--federations", "rotated", "--methods", "flacc", "flacc-control",
                        "--flacc-params", '{"alpha_0": 0.99}', "--out", str(tmp_path)])
    assert (new["n_clusters"] == 12).all()
    assert "alpha_0 = 0.99" in (tmp_path / "table.md").read_text()
    for bad, says in (("[1]", "expected a JSON object"), ('{"alpha_0": 5}', "alpha_0"), ('{"nope": 1}', "nope")):
        with pytest.raises(SystemExit):
            mod.parse_args(["--quick", "--flacc-params", bad])
        assert says in capsys.readouterr().err


def test_a_plugin_method_joins_the_table_with_one_row_per_value(tmp_path) -> None:
    mod = flacc_table
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = mod.main(["--quick", "--federations", "rotated", "--methods", "fedavg",
                         "examples.plugins.perfedavg:PerFedAvg", "--plugin-params", "alpha=0.01,0.1",
                         "personal_steps=1", "--out", str(tmp_path)])
    assert runs["variant"].tolist() == ["", "alpha=0.01", "alpha=0.1"]
    table = (tmp_path / "table.md").read_text()
    assert "| PerFedAvg alpha=0.01 |" in table and "| PerFedAvg alpha=0.1 |" in table
    with pytest.raises(SystemExit):
        mod.parse_args(["--methods", "fedprox"])  # neither built in nor package.module:Class


def test_the_table_of_runs_read_back_from_csv_is_the_table_of_the_runs(quick, tmp_path) -> None:
    """A resumed run reads its finished runs from ``results.csv``, where a method without variants has an
    empty label that pandas reads back as NaN; the table must be the same as from the runs in memory
    (it was "FLACC nan | —" for every such method)."""
    mod, runs, _ = quick
    args = mod.parse_args(["--quick"])
    runs.to_csv(tmp_path / "results.csv", index=False)
    back = pd.read_csv(tmp_path / "results.csv")
    assert back["variant"].isna().any()  # the case this test is about
    assert mod.markdown(back, args, {}) == mod.markdown(runs, args, {})
    assert "nan" not in mod.markdown(back, args, {}).split("Clusters found")[0]
