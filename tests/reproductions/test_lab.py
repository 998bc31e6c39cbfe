"""The lab: the claim tables are what the records say, every claim is complete, the scripts use public faces."""
from __future__ import annotations

import ast
import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from reproductions import common
from reproductions.__main__ import main as lab_main
from reproductions.common import Claim, LabError

PUBLIC = ("fedray", "fedray.supervised", "fedray.tune", "fedray.estimators", "fedray.plots", "fedray.algorithms")


def test_tables_equal_what_the_records_give():
    """Every README's claim table and the docs index are exactly what `python -m reproductions tables` writes."""
    stale = [str(p.relative_to(common.REPO)) for p, text in common.generated().items() if p.read_text() != text]
    assert not stale, f"regenerate with `python -m reproductions tables`: {stale}"
    assert common.INDEX in common.generated()


def test_no_claim_is_contradicted_by_its_records():
    assert common.problems() == []


def test_every_paper_has_a_readme_with_claims():
    for paper in common.PAPERS:
        readme = common.ROOT / paper / "README.md"
        if not readme.exists():
            pytest.skip(f"{paper} has no README yet")
        assert len(readme.read_text().splitlines()) <= 200, f"{paper}/README.md is over 200 lines"
        assert common.load_claims(paper), f"{paper} declares no claim"


def test_index_is_short():
    assert len(common.INDEX.read_text().splitlines()) <= 100


def _fedray_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return [m for m in out if m == "fedray" or m.startswith("fedray.")]


def test_lab_scripts_use_only_fedrays_public_faces():
    """A file under reproductions/ imports fedray, fedray.supervised/tune/estimators/plots or fedray.algorithms only."""
    bad = []
    for path in sorted(common.ROOT.rglob("*.py")):
        for mod in _fedray_imports(path):
            if not any(mod == p or (p == "fedray.algorithms" and mod.startswith(p + ".")) for p in PUBLIC):
                bad.append(f"{path.relative_to(common.REPO)}: {mod}")
    assert not bad, bad


def test_the_public_faces_check_catches_an_internal_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from fedray.core.ops import fcm\nimport fedray.algorithms.flacc\nfrom fedray import run\n")
    assert _fedray_imports(f) == ["fedray.core.ops", "fedray.algorithms.flacc", "fedray"]


# ---------------------------------------------------------------------------------------------- the machinery

def _claim(**kw) -> Claim:
    base = dict(id="t-claim", where="Table X", quantity="accuracy", verdict="same ordering", metric="acc",
                order=("a", "b"), command="python -m reproductions run barcena2021/t-claim")
    base.update(kw)
    return Claim(**base)


def test_a_claim_without_command_or_reason_is_refused():
    with pytest.raises(LabError, match="needs a reason"):
        Claim(id="x", where="w", quantity="q", verdict="not attempted")
    with pytest.raises(LabError, match="needs the command"):
        Claim(id="x", where="w", quantity="q", verdict="reversed")
    with pytest.raises(LabError, match="not one of"):
        Claim(id="x", where="w", quantity="q", verdict="close enough", command="c")
    with pytest.raises(LabError, match="kebab-case"):
        Claim(id="Table 1", where="w", quantity="q", verdict="reversed", command="c")


def _record(method, seed, acc, **kw):
    common.record_run("barcena2021", "t-claim", method=method, seed=seed, scale="reduced", metrics={"acc": acc},
                      wall_s=1.0, **kw)


def test_records_round_trip_and_resume(tmp_path):
    with common.scratch_results(tmp_path):
        _record("a", 0, 0.9, config={"k": 3})
        _record("a", 1, 0.7)
        df = common.recorded("barcena2021", "t-claim")
        assert list(df["m:acc"]) == [0.9, 0.7] and set(df["source"]) == {"run"}
        assert df["commit"].iloc[0] != "" and df["device"].iloc[0]
        todo = common.pending("barcena2021", "t-claim", [{"method": "a", "seed": s, "scale": "reduced"}
                                                          for s in range(3)])
        assert todo == [{"method": "a", "seed": 2, "scale": "reduced"}]
    assert not (common.ROOT / "barcena2021" / "results" / "t-claim.csv").exists()


def test_a_record_keeps_its_wall_time_and_names_no_local_folder(tmp_path):
    """The wall time given is the one read back (unknown is NaN), and the checkout's parent folder becomes ``..``."""
    with common.scratch_results(tmp_path):
        data = common.REPO.parent / "datasets" / "mnist"
        common.record_run("barcena2021", "t-claim", method="a", seed=0, scale="reduced", metrics={"acc": 1.0},
                          wall_s=12.34, config={"data_dir": str(data)})
        common.record_run("barcena2021", "t-claim", method="a", seed=1, scale="reduced", metrics={"acc": 1.0},
                          wall_s=float("nan"))
        df = common.recorded("barcena2021", "t-claim")
        wall = pd.to_numeric(df["wall_s"], errors="coerce")
        assert wall.iloc[0] == pytest.approx(12.3) and math.isnan(wall.iloc[1])
        assert json.loads(df["config"].iloc[0]) == {"data_dir": os.path.join("..", "datasets", "mnist")}
        with pytest.raises(LabError, match="wall time"):
            common.record_run("barcena2021", "t-claim", method="a", seed=2, scale="reduced", metrics={"acc": 1.0},
                              wall_s=-1.0)


def test_the_verdict_is_derived_from_the_records(tmp_path):
    with common.scratch_results(tmp_path):
        for s, (a, b) in enumerate([(0.9, 0.5), (0.8, 0.6)]):
            _record("a", s, a)
            _record("b", s, b)
        row = common.summarise("barcena2021", _claim())
        assert row.derived == "same ordering" and common.check_claim(row) == []
        assert row.ours["a"][0] == pytest.approx(0.85) and row.ours["a"][2] == 2
        assert math.isclose(row.ours["b"][1], 0.070711, rel_tol=1e-4)  # sample std of 0.5, 0.6
        wrong = common.summarise("barcena2021", _claim(verdict="reversed"))
        assert "records give 'same ordering'" in common.check_claim(wrong)[0]
        close = common.summarise("barcena2021", _claim(tolerance=0.06, paper={"a": "0.90 ± 0.01", "b": "0.55"}))
        assert close.derived == "reproduced"
        far = common.summarise("barcena2021", _claim(tolerance=0.01, paper={"a": "0.90", "b": "0.55"}))
        assert far.derived == "same ordering"
        _record("b", 2, 1.2)
        _record("b", 3, 1.2)  # b's mean is now 0.875, above a's 0.85
        flipped = common.summarise("barcena2021", _claim(verdict="same ordering"))
        assert flipped.derived == "reversed" and common.check_claim(flipped)


def test_a_claim_reads_only_the_records_it_selects(tmp_path):
    """select takes a value or a tuple of values: seeds outside it do not enter the means."""
    with common.scratch_results(tmp_path):
        for s, (a, b) in enumerate([(0.9, 0.5), (0.8, 0.6), (0.1, 0.9)]):
            _record("a", s, a)
            _record("b", s, b)
        row = common.summarise("barcena2021", _claim(select={"seed": (0, 1)}))
        assert row.ours["a"][2] == 2 and row.ours["a"][0] == pytest.approx(0.85) and row.derived == "same ordering"
        one = common.summarise("barcena2021", _claim(select={"seed": 2}, verdict="reversed"))
        assert one.ours["b"][0] == pytest.approx(0.9) and one.derived == "reversed"
        every = common.summarise("barcena2021", _claim(verdict="reversed"))
        assert every.ours["a"][2] == 3 and every.derived == "reversed"  # 0.6 against 0.667


def test_a_claimed_result_needs_records(tmp_path):
    with common.scratch_results(tmp_path):
        row = common.summarise("barcena2021", _claim(order=(), verdict="same ordering"))
        assert "no record" in common.check_claim(row)[0]


def test_a_stale_table_is_found(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{common.BEGIN}\nold\n{common.END}\ntail\n")
    text = common._replace_block(readme.read_text(), "new", readme)
    assert text == f"# x\n{common.BEGIN}\nnew\n{common.END}\ntail\n"
    with pytest.raises(LabError, match="markers"):
        common._replace_block("no markers", "new", readme)


def test_transcribed_numbers_are_marked(tmp_path):
    with common.scratch_results(tmp_path):
        _record("a", 0, 0.9, source="notebook@54116ca")
        _record("b", 0, 0.5, source="notebook@54116ca")
        row = common.summarise("barcena2021", _claim())
        assert row.transcribed and common._ours(row).endswith("†")
        assert common.recorded("barcena2021", "t-claim")["commit"].iloc[0] == "54116ca"


def test_cli_errors_are_one_line(capsys):
    assert lab_main(["run", "barcena2021/no-such-claim"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert lab_main(["run", "nopaper/x"]) == 2
    assert "unknown paper" in capsys.readouterr().err


def test_cli_list_counts_every_verdict(capsys):
    assert lab_main(["list"]) == 0
    out = capsys.readouterr().out
    total = sum(len(common.load_claims(p)) for p in common.PAPERS)
    assert out.strip().splitlines()[-1].startswith(f"{total} claims")


def test_quick_run_records_nothing_in_the_lab(data_dir):
    before = {p: p.read_text() for p in (common.ROOT / "barcena2021" / "results").glob("*.csv")}
    assert lab_main(["run", "barcena2021/table1-s-set1-ari", "--quick", "--data-dir", str(data_dir)]) == 0
    after = {p: p.read_text() for p in (common.ROOT / "barcena2021" / "results").glob("*.csv")}
    assert before == after


# ---------------------------------------------------------------------------------------------- commands

def _claims():
    return [(p, c) for p in common.PAPERS for c in common.load_claims(p) if c.command]


def _check_command(paper: str, claim: Claim, tmp_path: Path) -> None:
    import importlib
    import shlex

    from fedray.api.config import make_config
    from reproductions.__main__ import build_parser

    argv = shlex.split(claim.command.replace("DATA", str(tmp_path)))
    if argv[:4] == ["python", "-m", "reproductions", "run"]:
        args = build_parser().parse_args(argv[3:])
        ref_paper, ref = common.find_claim(args.claim)
        assert ref_paper == paper, f"{claim.id}: its command reruns a claim of {ref_paper}"
        assert ref.runner, f"{claim.id}: its command names {ref.id}, which has no runner"
        assert (ref.records or ref.id) == (claim.records or claim.id), f"{claim.id}: its command records elsewhere"
    elif argv[:2] == ["python", "-m"] and argv[2].startswith(f"reproductions.{paper}."):
        mod = importlib.import_module(argv[2])
        if hasattr(mod, "parse_args"):
            mod.parse_args(argv[3:])
    elif argv[:2] == ["fedray", "run"]:
        make_config(None, overrides=[argv[i + 1] for i, a in enumerate(argv) if a == "--set"])
    else:
        raise AssertionError(
            f"{paper}/{claim.id}: a command is `python -m reproductions run ...`, "
            f"`python -m reproductions.{paper}.<script> ...` or `fedray run ...`; got {claim.command!r}"
        )


@pytest.mark.parametrize("paper,claim", _claims(), ids=[f"{p}/{c.id}" for p, c in _claims()])
def test_each_claims_command_is_accepted(paper, claim, tmp_path):
    """A claim's command names a claim with a runner that records where this claim reads, or parses as written."""
    _check_command(paper, claim, tmp_path)


def test_the_command_check_refuses_a_claim_that_records_elsewhere(tmp_path):
    bad = _claim(id="x", command="python -m reproductions run barcena2021/table1-xclara", order=())
    with pytest.raises(AssertionError):
        _check_command("barcena2021", bad, tmp_path)
    with pytest.raises(AssertionError, match="a command is"):
        _check_command("barcena2021", _claim(id="x", command="python experiments/old.py", order=()), tmp_path)
