"""``benchmarks/round_overhead.py --actors``: one Ray actor per client, this version against another.

Run small here (3 clients); the 200-client figures of benchmarks/README.md come from a quiet machine.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


def test_actors_mode_measures_this_version_and_a_reference_tree(bench, tmp_path):
    """A copy of this tree as the reference: both rows run (each in its own process with its own Ray),
    name the tree their fedray came from, and give start-up, memory per actor and round times; the
    client actors loaded none of the heavy packages."""
    repo = Path(bench.__file__).resolve().parents[1]
    ref = tmp_path / "ref"
    for folder in ("fedray", "actors", "algorithms", "cluster_configs", "examples"):
        shutil.copytree(repo / folder, ref / folder, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    out = tmp_path / "out"
    code = bench.main(["--actors", "--n-clients", "3", "--rounds", "2", "--ref-tree", str(ref), "--out", str(out)])
    rows = json.loads((out / "actor_overhead.json").read_text())
    assert code == 0, rows
    assert [r["version"] for r in rows] == ["this", "ref"]
    assert str(ref) in rows[1]["tree"] and str(ref / "fedray" / "actors") in rows[1]["tree"]
    for r in rows:
        assert r["actors"] == 3 and r["rounds"] == 2 and r["startup_s"] > 0 and r["actor_rss_mb"] > 0
        assert r["peak_mem_mb"] > r["actor_pss_mb"] > 0
    assert rows[0]["heavy"] == "none"
    assert "load average" in (out / "actor_overhead.md").read_text()


def test_a_reference_that_is_not_a_checkout_fails_in_one_line(bench, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--actors", "--ref-tree", str(tmp_path)])
    assert "--ref-tree" in capsys.readouterr().err
