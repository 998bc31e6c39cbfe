"""One FLACC run to its separation round, then three arms from there (FLACC, its control, FedAvg).

FLACC is FedAvg, bit for bit, until it separates its clusters (the same sampled clients,
initial model and local training; only the merge bookkeeping differs), and its control arm
(``control: random-groups``) is FLACC, bit for bit, until separation. A long run (FEMNIST
on the paper's schedule: 200 rounds of five local epochs) therefore need not be trained
three times from round 0:

* the **trunk** runs FLACC with a checkpoint after every round and keeps a copy of the
  checkpoints of its last merging rounds (``merging-checkpoints/round-RRRR.pkl``);
* once it has ended, the checkpoint taken after round S − 1 (S: FLACC's separation round)
  is resumed twice: with ``control: random-groups`` (the **control** arm: random groups of
  the clusters' sizes, drawn at round S from the run's seed) and with ``n_sep`` beyond the
  round cap (FLACC **never separates**, whose global model and accuracies are FedAvg's,
  bit for bit).

``tests/reproductions/test_flacc_branching.py`` holds both equalities on a small
federation: the never-separating arm equals a FedAvg run, and the control arm resumed
from the trunk's checkpoint equals a control run from round 0. Every run resumes from its
own checkpoint when the script is started again (``fedray.resume``), so an interrupted
trunk or arm loses at most one round.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

import fedray

log = logging.getLogger("flacc_branching")
KEEP = 3  # merging-round checkpoints kept while the trunk runs
#: the arms resumed from the trunk's last merging checkpoint, with the parameters they change
ARMS = {"flacc-control": {"control": "random-groups"}, "fedavg": {"n_sep": 10 ** 9}}


class MergingCheckpoints:
    """An ``on_round`` hook: copies the run's checkpoint after every round of the merging phase."""

    def __init__(self, run_dir: Path, keep_dir: Path) -> None:
        self.source = run_dir / "checkpoint" / fedray.CHECKPOINT_FILE
        self.keep_dir = keep_dir
        keep_dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, row: dict[str, Any]) -> None:
        if row.get("phase") != "merging" or not self.source.exists():
            return
        dest = self.keep_dir / f"round-{int(row['round']):04d}.pkl"
        tmp = dest.with_suffix(".tmp")
        shutil.copyfile(self.source, tmp)
        os.replace(tmp, dest)
        for old in sorted(self.keep_dir.glob("round-*.pkl"))[:-KEEP]:
            old.unlink()


def _finished(run_dir: Path) -> bool:
    return (run_dir / "summary.json").exists()


def run_trunk(cfg: dict[str, Any], params: dict[str, Any], out: Path) -> Path:
    """FLACC with a checkpoint every round into ``out/flacc`` (resumed if it was interrupted)."""
    run_dir, hook = out / "flacc", MergingCheckpoints(out / "flacc", out / "merging-checkpoints")
    if _finished(run_dir):
        return run_dir
    if (run_dir / "checkpoint" / fedray.CHECKPOINT_FILE).exists():
        log.info("trunk: resuming %s", run_dir)
        fedray.resume(run_dir, progress=True, on_round=[hook])
        return run_dir
    cfg = {**cfg, "checkpoint": {"every": 1}, "output": {"overwrite": True}}
    with fedray.Session(cfg) as s:
        s.run("flacc", params, output=run_dir, progress=True, on_round=[hook])
    return run_dir


def separation_round(run_dir: Path) -> int | None:
    """FLACC's separation round S: from the finished trunk's summary, or, while the trunk still runs,
    from its merging checkpoints (copied up to round S, the last round that starts in the merging
    phase) once the trunk's own checkpoint is past them. None: not separated (yet)."""
    if _finished(run_dir):
        sep = json.loads((run_dir / "summary.json").read_text())["final"].get("separation_round")
        return None if sep is None else int(sep)
    kept = sorted((run_dir.parent / "merging-checkpoints").glob("round-*.pkl"))
    live = run_dir / "checkpoint" / fedray.CHECKPOINT_FILE
    if not kept or not live.exists():
        return None
    last = int(kept[-1].stem.split("-")[1])
    return last if int(fedray.load_checkpoint(live)["server"]["round"]) > last + 1 else None


def branch_checkpoint(out: Path) -> Path | None:
    """The trunk's checkpoint after round S − 1 (None when FLACC has not separated, or never did)."""
    sep = separation_round(out / "flacc")
    if sep is None:
        return None
    path = out / "merging-checkpoints" / f"round-{sep - 1:04d}.pkl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the trunk's checkpoint before its separation round {sep} is missing")
    return path


def run_arm(out: Path, arm: str) -> Path | None:
    """Resume the trunk's last merging checkpoint with the arm's parameters into ``out/<arm>``."""
    run_dir = out / arm
    if _finished(run_dir):
        return run_dir
    if (run_dir / "checkpoint" / fedray.CHECKPOINT_FILE).exists():
        log.info("%s: resuming %s", arm, run_dir)
        fedray.resume(run_dir, progress=True)
        return run_dir
    start = branch_checkpoint(out)
    if start is None:
        if not _finished(out / "flacc"):
            raise RuntimeError(f"{out / 'flacc'}: FLACC has not separated yet; start {arm} once it has")
        log.info("%s: FLACC never separated, so this arm is FLACC's run itself", arm)
        return None
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an arm that died before its first checkpoint starts again
    log.info("%s: from %s with %s", arm, start.name, ARMS[arm])
    fedray.resume(start, progress=True, output=run_dir, algorithm_params=ARMS[arm], adopt=True)
    return run_dir


def accuracy_at(checkpoint: Path) -> pd.Series:
    """Every client's test accuracy with the models of ``checkpoint`` (its final evaluation, no round run)."""
    blob = fedray.load_checkpoint(checkpoint, bound=False)
    blob["server"]["max_rounds"] = int(blob["server"]["round"])  # nothing left to run: evaluate and stop
    blob["config"]["checkpoint"] = {"every": 0}
    with fedray.Session(blob["config"]) as s:
        res = s.run(output=False, progress=False, resume_from=blob)
    return res.clients.set_index("client_id")["accuracy"]


def per_cluster(out: Path) -> pd.DataFrame:
    """Accuracy per FLACC cluster: at separation (the global model), and at the end of each arm."""
    clients = pd.read_parquet(out / "flacc" / "clients.parquet").set_index("client_id")
    table = pd.DataFrame({"cluster": clients["cluster"], "n_train": clients["n_train"],
                          "flacc": clients["accuracy"]})
    start = branch_checkpoint(out)
    if start is not None:  # evaluated once (a session and a pass over every client), then read back
        cached = out / "at_separation.csv"
        if not cached.exists():
            accuracy_at(start).rename("accuracy").to_csv(cached)
        table["at_separation"] = pd.read_csv(cached, index_col="client_id")["accuracy"]
    for arm in ARMS:
        if _finished(out / arm):
            table[arm] = pd.read_parquet(out / arm / "clients.parquet").set_index("client_id")["accuracy"]
    cols = [c for c in ("at_separation", "flacc", "flacc-control", "fedavg") if c in table]
    grouped = table.groupby("cluster")
    res = grouped[cols].mean().mul(100).round(2)
    res.insert(0, "writers", grouped.size())
    res.insert(1, "train_rows", grouped["n_train"].sum())
    return res.reset_index()


def summary_row(run_dir: Path) -> dict[str, Any]:
    """What runs.csv keeps of one run: accuracy, clusters, separation, and the time its rounds took."""
    s = json.loads((run_dir / "summary.json").read_text())
    fin = s["final"]
    hist = pd.read_parquet(run_dir / "rounds.parquet")
    return {"accuracy": 100 * float(fin["accuracy"]), "n_clusters": fin.get("n_clusters"),
            "separation_round": fin.get("separation_round"), "rounds": int(s["rounds"]),
            "round_s_total": float(hist["wall_s"].sum())}


def main(argv: list[str] | None = None) -> None:
    """Run one arm by itself (e.g. beside the trunk, once the trunk has separated: the arms and the rest
    of the trunk are independent runs from the same checkpoint)."""
    p = argparse.ArgumentParser(description="run one arm of a branched FLACC folder")
    p.add_argument("folder", type=Path, help="the branches folder (e.g. OUT/branches_seed0)")
    p.add_argument("arm", choices=sorted(ARMS))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("fedray").setLevel(logging.WARNING)
    run_arm(args.folder, args.arm)


if __name__ == "__main__":
    main()
