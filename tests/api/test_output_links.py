"""Output folders never delete or write through a link: deletes go through directory descriptors
opened without following links (checked at unlink time), a resumed run refuses a folder with a
planted link, and sweep / select-k claim their folder as run does."""
from __future__ import annotations

import json

import pytest

from fedray.analysis.sweep import sweep
from fedray.api import outputs
from fedray.core.errors import ConfigError


def _finished_run(out, files):
    outputs.prepare(out)
    for rel, text in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    outputs.record(out, [out / rel for rel in files])
    outputs.release(out)


def _resume_with_planted_summary(tmp_path, plant: str) -> None:
    """A finished run whose summary.json is replaced by a link (``plant``: ``"symlink_to"`` or
    ``"hardlink_to"``) to a file outside, resumed: refused in one line naming the link, and the file
    outside keeps what it held."""
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text("precious")
    _finished_run(out, {"summary.json": "{}"})
    run_id = outputs.run_id_of(out)
    (out / "summary.json").unlink()
    getattr(out / "summary.json", plant)(victim)
    named = r"summary.json \(hard link\)" if plant == "hardlink_to" else "summary.json"
    with pytest.raises(ConfigError, match=rf"--resume: .* holds links fedray did not make \({named}\)"):
        outputs.prepare(out, resuming=True, run_id=run_id)
    assert victim.read_text() == "precious"


def test_overwrite_never_deletes_through_a_folder_swapped_for_a_link(tmp_path):
    """plots/ is swapped for a link to the user's folder, which holds a file of the same name: the
    overwrite removes nothing there (on today's main it deleted the user's file)."""
    out, mine = tmp_path / "out", tmp_path / "mine"
    _finished_run(out, {"plots/a.png": "fedray", "summary.json": "{}"})
    mine.mkdir()
    (mine / "a.png").write_text("the user's")
    for p in (out / "plots").iterdir():
        p.unlink()
    (out / "plots").rmdir()
    (out / "plots").symlink_to(mine, target_is_directory=True)
    doc = json.loads((out / outputs.MARKER).read_text())
    outputs._empty(out, doc)  # the deletion step itself: what a swap during --overwrite meets
    assert (mine / "a.png").read_text() == "the user's"
    assert not (out / "summary.json").exists()


def test_a_resumed_run_refuses_a_folder_with_a_planted_link(tmp_path):
    """summary.json replaced by a link to a file outside: resuming would write through it; refused in
    one line naming the link (on today's main the folder was adopted)."""
    _resume_with_planted_summary(tmp_path, "symlink_to")


def test_sweep_claims_its_folder_and_never_overwrites_a_users_files(tmp_path):
    """A folder holding the user's own sweep.csv (no fedray marker) is refused before any run (on
    today's main the sweep wrote over it)."""
    out = tmp_path / "study"
    out.mkdir()
    (out / "sweep.csv").write_text("the user's table")
    base = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 2}}, "data": {"dataset": "blobs"},
            "federation": {"n_clients": 2, "rounds": 1}, "runtime": {"backend": "local"}, "output": {"plots": False}}
    with pytest.raises(ConfigError, match="not empty"):
        sweep(base, {"federation.n_clients": [2]}, out=out, plot=False)
    assert (out / "sweep.csv").read_text() == "the user's table"


def test_select_k_claims_its_folder_and_never_overwrites_a_users_files(tmp_path):
    from fedray.analysis.kselect import select_k

    out = tmp_path / "k"
    out.mkdir()
    (out / "k_selection.md").write_text("the user's notes")
    with pytest.raises(ConfigError, match="not empty"):
        select_k({"algorithm": {"name": "kmeans", "params": {"n_clusters": 2}}, "data": {"dataset": "blobs"},
                  "federation": {"n_clients": 3}, "runtime": {"backend": "local"}}, k_min=2, k_max=3, output=out)
    assert (out / "k_selection.md").read_text() == "the user's notes"


def test_a_resumed_run_refuses_a_folder_with_a_hard_link(tmp_path):
    """summary.json replaced by a hard link to a file outside (no symbolic link to see): refused in one
    line naming it, and the outside file is untouched."""
    _resume_with_planted_summary(tmp_path, "hardlink_to")


def test_outputs_are_written_under_a_fresh_name_and_moved_into_place_never_through_a_link(tmp_path):
    """A link planted during a run at the name of an output, symbolic or hard, is replaced by the
    output; the file it pointed to keeps its content (the review redirected a write to an outside file)."""
    import fedray

    out = tmp_path / "out"
    soft, hard = tmp_path / "soft.txt", tmp_path / "hard.txt"
    soft.write_text("soft")
    hard.write_text("hard")

    def plant(row):
        if row["round"] == 0:
            (out / "summary.json").symlink_to(soft)
            (out / "config.yaml").hardlink_to(hard)

    fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 2, "max_rounds": 2}}, data={"dataset": "blobs"},
               federation={"n_clients": 3}, runtime={"backend": "local"}, output=out, on_round=[plant],
               **{"output.plots": False})
    assert soft.read_text() == "soft" and hard.read_text() == "hard"
    assert not (out / "summary.json").is_symlink() and json.loads((out / "summary.json").read_text())["rounds"] >= 1
    assert (out / "config.yaml").stat().st_nlink == 1 and not list(out.glob(".tmp-*"))
    with outputs.atomic_path(out / "notes.txt") as tmp:
        assert tmp.parent == out and tmp.suffix == ".txt" and not tmp.exists()
        tmp.write_text("new")
    assert (out / "notes.txt").read_text() == "new" and not tmp.exists()
