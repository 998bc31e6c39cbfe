"""The association diagnostic's build cache is keyed on every argument that changes a build."""
from __future__ import annotations

import numpy as np
import pytest

from reproductions.fedcref2025 import association_diagnostic


@pytest.fixture(scope="module")
def diag():
    return association_diagnostic


BASE = ["--dataset", "mnist", "--clients", "25", "--classes", "2", "5", "--samples-per-class", "500",
        "--dirtiness", "0.3", "--epochs", "20"]
CHANGES = {   # one change of each build argument
    "dataset": ["--dataset", "fashion-mnist"],
    "data_options": ["--data-options", '{"part": "train"}'],
    "clients": ["--clients", "20"],
    "classes": ["--classes", "2", "4"],
    "samples_per_class": ["--samples-per-class", "150"],
    "dirtiness": ["--dirtiness", "0.5"],
    "epochs": ["--epochs", "30"],
    "batch_size": ["--batch-size", "64"],
    "hidden": ["--hidden", "100", "64", "16"],
    "local_refinements": ["--local-refinements", "1"],
}


def _args(diag, extra=()):
    a = diag.parser().parse_args(BASE + list(extra))
    a.epochs = a.epochs[0]     # main() builds one epochs value at a time
    return a


def test_every_argument_is_either_a_build_key_or_an_evaluation_key(diag):
    """A new command-line argument must be classified, so that the cache cannot miss a build parameter."""
    dests = {a.dest for a in diag.parser()._actions if a.dest != "help"}
    assert dests == set(diag.BUILD_KEYS) | set(diag.EVAL_KEYS)
    assert not set(diag.BUILD_KEYS) & set(diag.EVAL_KEYS)
    assert set(CHANGES) == set(diag.BUILD_KEYS)


def test_each_build_argument_and_the_seed_change_the_cache_file(diag, tmp_path):
    base = diag.build_file(_args(diag), 0, tmp_path)
    files = {name: diag.build_file(_args(diag, change), 0, tmp_path) for name, change in CHANGES.items()}
    files["seed"] = diag.build_file(_args(diag), 1, tmp_path)
    for name, f in files.items():
        assert f != base, f"changing {name} kept the cache file"
    assert len(set(files.values())) == len(files)      # and no two changes collide


def test_evaluation_arguments_and_spelling_keep_the_cache_file(diag, tmp_path):
    base = diag.build_file(_args(diag), 0, tmp_path)
    same = [["--taus", "0.2", "0.25"], ["--percentiles", "75"], ["--normalisations", "cluster"],
            ["--links", "first"], ["--data-dir", "/elsewhere"], ["--seeds", "0", "1", "2"],
            ["--dirtiness", "0.30"], ["--samples-per-class", "0500"]]
    for extra in same:
        assert diag.build_file(_args(diag, extra), 0, tmp_path) == base, extra
    assert diag.build_file(_args(diag, ["--data-options", '{"part":"train"}']), 0, tmp_path) == \
        diag.build_file(_args(diag, ["--data-options", '{ "part" : "train" }']), 0, tmp_path)


def test_a_cached_build_is_reused_only_under_its_own_key(diag, tmp_path):
    """Two federations in one folder: each reads back its own build (the old name keyed on neither)."""
    small = ["--dataset", "sklearn:digits", "--clients", "4", "--classes", "2", "3", "--samples-per-class", "20",
             "--epochs", "1", "--hidden", "8", "4"]
    a = _args(diag, small)
    b = _args(diag, small + ["--samples-per-class", "25"])
    ba = diag.cached_build(a, 0, tmp_path)
    bb = diag.cached_build(b, 0, tmp_path)
    assert len(list(tmp_path.glob("build_*.npz"))) == 2
    ra, rb = diag.cached_build(a, 0, tmp_path), diag.cached_build(b, 0, tmp_path)
    for built, read in ((ba, ra), (bb, rb)):
        assert read["key"] == diag.build_key(a if built is ba else b, 0)
        np.testing.assert_array_equal(read["owner"], built["owner"])
        for E1, E2 in zip(read["E"], built["E"]):
            np.testing.assert_array_equal(E1, E2)
    assert sum(len(lab) for _, _, lab in rb["clients"]) != sum(len(lab) for _, _, lab in ra["clients"])
