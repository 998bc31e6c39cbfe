"""The lab's shared pieces: claims, recorded runs, and the claim tables generated from them.

A *claim* is one quantitative result of a paper (a table cell, column or figure). A *record* is one run
that speaks to a claim: one row of ``reproductions/<paper>/results/<records>.csv`` with the commit, the
configuration, the seed, the scale, the device, the wall time, the load and the metrics. The claim
tables in each paper's README and the index in ``docs/reproductions.md`` are generated from the claims
and their records (``python -m reproductions tables``); ``--check`` fails on any difference, so a
table cannot drift from what was run.

Verdicts
--------
``reproduced``      the paper's ordering and its level (every method within ``tolerance`` of the paper);
``same ordering``   the paper's ordering at another level;
``reversed``        a different ordering;
``stand-in data``   run, but on data other than the paper's (the row says which);
``not attempted``   never run; the row says why and what it would take.

When a claim names the paper's ``order`` of methods, the verdict is derived from the records and a
declared verdict that disagrees is an error.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime as _dt
import importlib
import io
import json
import logging
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

log = logging.getLogger("reproductions")

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
PAPERS = ("stallmann2022", "triebe2019", "barcena2021", "mehta2023", "fedcref2025")
VERDICTS = ("reproduced", "same ordering", "reversed", "stand-in data", "not attempted")
COLUMNS = ("claim", "method", "variant", "seed", "scale", "sizes", "metrics", "config", "wall_s", "load",
           "device", "commit", "date", "source")
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
INDEX = REPO / "docs" / "reproductions.md"
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class LabError(Exception):
    """A claim, a record or a command of the lab is malformed; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """One quantitative result of a paper, and where ours comes from.

    Parameters
    ----------
    id : kebab-case name, unique within the paper (``table1-rotated-mnist``).
    where : the paper's table, figure or cell ("Table I, rotated MNIST").
    quantity : what the numbers are ("test accuracy (%)").
    paper : the paper's numbers as printed, per method (``{"flacc": "90.05 ± 0.17"}``); ``{"": text}``
        for a claim that is not per method.
    metric : the key of the records' ``metrics`` shown as ours.
    methods : the recorded methods to show, in this order (default: every recorded method); with ``by``,
        values of that column instead.
    by : the records' column whose values label ours (``method``, or ``variant`` for a sweep of one method).
    order : the paper's ranking of methods, best first; the verdict is then derived from the records.
    higher_is_better : direction of ``metric`` for ``order``.
    tolerance : with ``order``, "reproduced" when every method's mean is within this of the paper's number.
    verdict : one of :data:`VERDICTS`.
    scale : "paper" or "reduced"; only records of this scale count.
    sizes : the federation's sizes at that scale, in words ("20 clients, 30 rounds, E = 5").
    command : the one command that reruns the claim (required unless ``not attempted``).
    reason : for ``not attempted`` (and optional otherwise): why, and what it would take.
    runner : ``module:function`` called as ``fn(claim=, scale=, seeds=, quick=, data_dir=)``.
    records : the results file stem (default ``id``), so several claims can read one file.
    select : extra filters on the records' columns: a value (``{"variant": "T=10"}``) or a tuple of values
        (``{"seed": (0, 1, 2)}``).
    digits : decimals shown for ours.
    note : one short line shown under the table.
    """

    id: str
    where: str
    quantity: str
    verdict: str
    paper: dict[str, str] = dataclasses.field(default_factory=dict)
    metric: str = ""
    methods: tuple[str, ...] = ()
    by: str = "method"
    order: tuple[str, ...] = ()
    higher_is_better: bool = True
    tolerance: float | None = None
    scale: str = "reduced"
    sizes: str = ""
    command: str = ""
    reason: str = ""
    runner: str = ""
    records: str = ""
    select: dict[str, Any] = dataclasses.field(default_factory=dict)
    digits: int = 2
    note: str = ""

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise LabError(f"claim id {self.id!r} must be kebab-case (a-z, 0-9, '-')")
        if self.verdict not in VERDICTS:
            raise LabError(f"claim {self.id}: verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        if self.scale not in ("paper", "reduced"):
            raise LabError(f"claim {self.id}: scale {self.scale!r} must be 'paper' or 'reduced'")
        if self.verdict == "not attempted" and not self.reason:
            raise LabError(f"claim {self.id}: 'not attempted' needs a reason (why, and what it would take)")
        if self.verdict != "not attempted" and not self.command:
            raise LabError(f"claim {self.id}: verdict {self.verdict!r} needs the command that reruns it")
        if self.order and not self.metric:
            raise LabError(f"claim {self.id}: an order needs the metric it ranks")
        if self.tolerance is not None and not self.order:
            raise LabError(f"claim {self.id}: a tolerance needs the paper's order")


# ---------------------------------------------------------------------------------------------- records

_RESULTS_OVERRIDE: list[Path] = []


def results_dir(paper: str) -> Path:
    """Where ``paper``'s records live (a temporary folder inside :func:`scratch_results`)."""
    _check_paper(paper)
    if _RESULTS_OVERRIDE:
        return _RESULTS_OVERRIDE[-1] / paper
    return ROOT / paper / "results"


@contextlib.contextmanager
def scratch_results(folder: Path | None = None) -> Iterator[Path]:
    """Send records to a scratch folder for the duration (``--quick`` runs and tests never touch the lab's)."""
    with contextlib.ExitStack() as stack:
        root = Path(folder) if folder is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        _RESULTS_OVERRIDE.append(root)
        try:
            yield root
        finally:
            _RESULTS_OVERRIDE.pop()


def _check_paper(paper: str) -> None:
    if paper not in PAPERS:
        raise LabError(f"unknown paper {paper!r}; the lab has {', '.join(PAPERS)}")


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--",
                                "fedray", "actors", "algorithms"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_name() -> str:
    """The device a run used: the GPU's name when torch already saw one, else the CPU and its core count."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (GPU)"
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs ({model})"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=_plain, allow_nan=True)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot record a value of type {type(value).__name__}")


def _local_paths_relative(text: str) -> str:
    """``text`` with the folder holding the checkout written as ``..`` (a record names no local path)."""
    return text.replace(str(REPO.parent) + os.sep, ".." + os.sep)


def _wall(wall_s: float | None) -> str:
    """A wall time in seconds to one decimal, or ``nan`` where it is not known (a transcribed number)."""
    if wall_s is None or (isinstance(wall_s, float) and math.isnan(wall_s)):
        return "nan"
    wall = float(wall_s)
    if wall < 0 or math.isinf(wall):
        raise LabError(f"wall time {wall_s!r} must be a finite number of seconds >= 0")
    return f"{wall:.1f}"


def record_run(paper: str, claim: str, *, method: str, seed: int, scale: str, metrics: dict[str, Any],
               config: dict[str, Any] | None = None, wall_s: float, sizes: str = "", variant: str = "",
               load: float | str | None = None, device: str | None = None, source: str = "run") -> dict[str, Any]:
    """Append one run to ``results/<claim>.csv`` of ``paper`` (written whole to a temporary file, then replaced).

    ``load`` defaults to the one-minute load average now; ``device`` to :func:`device_name`. ``source`` is
    ``run`` for a run of this lab, or ``notebook@<commit>`` for a number transcribed from the committed
    notebook of that commit (its raw records were not kept).
    """
    if not _ID.match(claim):
        raise LabError(f"claim id {claim!r} must be kebab-case")
    if scale not in ("paper", "reduced"):
        raise LabError(f"scale {scale!r} must be 'paper' or 'reduced'")
    if not metrics:
        raise LabError(f"{paper}/{claim}: a record needs at least one metric")
    row = {
        "claim": claim, "method": method, "variant": variant, "seed": int(seed), "scale": scale, "sizes": sizes,
        "metrics": _json(metrics), "config": _local_paths_relative(_json(config or {})), "wall_s": _wall(wall_s),
        "load": load if isinstance(load, str) else f"{(os.getloadavg()[0] if load is None else load):.1f}",
        "device": device or device_name(), "commit": _commit() if source == "run" else source.split("@")[-1],
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"), "source": source,
    }
    path = results_dir(paper) / f"{claim}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    if not old:
        writer.writeheader()
    writer.writerow(row)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(old + buf.getvalue())
    os.replace(tmp, path)
    log.info("recorded %s/%s: %s seed %s (%s) %s", paper, claim, method, seed, variant or "-",
             ", ".join(f"{k}={_fmt_any(v)}" for k, v in list(metrics.items())[:4]))
    return row


def recorded(paper: str, records: str) -> pd.DataFrame:
    """Every record of ``results/<records>.csv`` of ``paper``, with the metrics as columns ``m:<name>``."""
    path = results_dir(paper) / f"{records}.csv"
    if not path.exists():
        return pd.DataFrame(columns=list(COLUMNS))
    df = pd.read_csv(path, dtype={"variant": str, "sizes": str, "load": str, "commit": str}, keep_default_na=False)
    missing = set(COLUMNS) - set(df.columns)
    if missing:
        raise LabError(f"{path}: columns {sorted(missing)} are missing")
    metrics = pd.DataFrame([json.loads(m) for m in df["metrics"]], index=df.index)
    return pd.concat([df, metrics.add_prefix("m:")], axis=1)


def pending(paper: str, records: str, runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs (dicts with method, seed, scale and optionally variant) not yet recorded: resuming is skipping."""
    runs = list(runs)
    df = recorded(paper, records)
    have = {(str(r.method), str(r.variant), int(r.seed), str(r.scale)) for r in df.itertuples()}
    todo = [r for r in runs if (r["method"], r.get("variant", ""), int(r["seed"]), r["scale"]) not in have]
    if len(todo) < len(runs):
        log.info("%s/%s: %d of %d runs already recorded, %d to go", paper, records, len(runs) - len(todo),
                 len(runs), len(todo))
    return todo


# ---------------------------------------------------------------------------------------------- claims

def load_claims(paper: str) -> list[Claim]:
    """The claims of ``paper`` (its ``claims.py``), checked for unique ids."""
    _check_paper(paper)
    try:
        mod = importlib.import_module(f"reproductions.{paper}.claims")
    except ModuleNotFoundError as exc:
        if exc.name in (f"reproductions.{paper}", f"reproductions.{paper}.claims"):
            return []
        raise
    claims = list(mod.CLAIMS)
    ids = [c.id for c in claims]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise LabError(f"{paper}: claim ids {dup} appear more than once")
    return claims


def find_claim(ref: str) -> tuple[str, Claim]:
    """``paper/claim`` to its claim."""
    paper, _, cid = ref.partition("/")
    claims = {c.id: c for c in load_claims(paper)}
    if cid not in claims:
        raise LabError(f"{paper} has no claim {cid!r}; `python -m reproductions list {paper}` shows them")
    return paper, claims[cid]


def claim_records(paper: str, claim: Claim) -> pd.DataFrame:
    df = recorded(paper, claim.records or claim.id)
    df = df[df["scale"] == claim.scale]
    for key, value in claim.select.items():
        if key not in df.columns:
            raise LabError(f"{paper}/{claim.id}: select names {key!r}, which the records do not have")
        if isinstance(value, (tuple, list, set, frozenset)):  # any of these values (e.g. the seeds every variant has)
            df = df[df[key].astype(str).isin([str(v) for v in value])]
        else:
            df = df[df[key].astype(str) == str(value)]
    return df


@dataclasses.dataclass(frozen=True)
class Row:
    """A claim with what its records say."""

    paper: str
    claim: Claim
    ours: dict[str, tuple[float, float, int]]
    derived: str | None
    seeds: str
    device: str
    wall: str
    transcribed: bool

    @property
    def verdict(self) -> str:
        return self.claim.verdict


def summarise(paper: str, claim: Claim) -> Row:
    """Aggregate a claim's records: per method, mean, standard deviation and number of runs of its metric."""
    df = claim_records(paper, claim)
    ours: dict[str, tuple[float, float, int]] = {}
    if claim.metric and len(df):
        col = f"m:{claim.metric}"
        if col not in df.columns:
            raise LabError(f"{paper}/{claim.id}: no record has the metric {claim.metric!r}")
        if claim.by not in df.columns:
            raise LabError(f"{paper}/{claim.id}: by names {claim.by!r}, which the records do not have")
        methods = claim.methods or tuple(dict.fromkeys(df[claim.by]))
        for method in methods:
            vals = pd.to_numeric(df.loc[df[claim.by].astype(str) == method, col], errors="coerce").dropna()
            if len(vals):
                ours[method] = (float(vals.mean()), float(vals.std(ddof=1)) if len(vals) > 1 else 0.0, len(vals))
    derived = _derive(claim, ours)
    if claim.methods and len(df):  # the runs column speaks of the runs shown, where claims share a file
        df = df[df[claim.by].astype(str).isin(claim.methods)]
    seeds = _ranges(sorted({int(s) for s in df["seed"]})) if len(df) else ""
    devices = sorted(set(df["device"])) if len(df) else []
    wall = ""
    if len(df):
        w = pd.to_numeric(df["wall_s"], errors="coerce")
        loads = [float(x) for x in re.findall(r"[\d.]+", " ".join(df["load"].astype(str)))]
        lo = f"load {min(loads):.1f}" + (f"–{max(loads):.1f}" if loads and max(loads) > min(loads) else "") \
            if loads else "load unknown"
        wall = f"{_dur(w.min())}" + (f"–{_dur(w.max())}" if w.max() > w.min() else "") + f" a run, {lo}"
    return Row(paper, claim, ours, derived, seeds, "; ".join(devices), wall,
               bool(len(df)) and bool((df["source"] != "run").any()))


def _derive(claim: Claim, ours: dict[str, tuple[float, float, int]]) -> str | None:
    if not claim.order or any(m not in ours for m in claim.order):
        return None
    means = [ours[m][0] for m in claim.order]
    pairs = zip(means, means[1:])
    same = all((a > b) if claim.higher_is_better else (a < b) for a, b in pairs)
    if not same:
        return "reversed"
    if claim.tolerance is not None:
        papers = [_first_number(claim.paper.get(m, "")) for m in claim.order]
        if all(p is not None and abs(o - p) <= claim.tolerance for o, p in zip(means, papers)):
            return "reproduced"
    return "same ordering"


def _first_number(text: str) -> float | None:
    m = re.search(r"-?\d+(?:\.\d+)?", text.replace("−", "-"))
    return float(m.group()) if m else None


def check_claim(row: Row) -> list[str]:
    """What is wrong with a claim given its records (empty when nothing)."""
    c, problems = row.claim, []
    where = f"{row.paper}/{c.id}"
    if row.derived is not None and row.derived != c.verdict and c.verdict != "stand-in data":
        problems.append(f"{where}: declared {c.verdict!r} but the records give {row.derived!r}")
    if c.verdict in ("reproduced", "same ordering", "reversed", "stand-in data") and not row.ours and c.metric:
        problems.append(f"{where}: verdict {c.verdict!r} but no record of {c.metric!r} at scale {c.scale!r}")
    if c.order and row.derived is None and c.verdict != "not attempted":
        missing = [m for m in c.order if m not in row.ours]
        problems.append(f"{where}: the order names {missing}, which have no records")
    if c.runner and ":" not in c.runner:
        problems.append(f"{where}: runner {c.runner!r} must be module:function")
    return problems


# ---------------------------------------------------------------------------------------------- tables

def _fmt_any(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _fmt(mean: float, std: float, n: int, digits: int) -> str:
    if math.isnan(mean):
        return "nan"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f} (n={n})" if n > 1 else "")


def _dur(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _ranges(values: Sequence[int]) -> str:
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}–{v}")
            start = None
    return ", ".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _ours(row: Row) -> str:
    if not row.ours:
        return "—"
    mark = "†" if row.transcribed else ""
    parts = [f"{m} {_fmt(*v, row.claim.digits)}" if m else _fmt(*v, row.claim.digits) for m, v in row.ours.items()]
    return "; ".join(parts) + mark


def _paper(claim: Claim) -> str:
    return "; ".join(f"{m} {v}" if m else v for m, v in claim.paper.items()) or "—"


def paper_table(paper: str) -> str:
    """The generated claim table of one paper's README."""
    rows = [summarise(paper, c) for c in load_claims(paper)]
    lines = ["| claim | where, quantity | paper | ours | verdict | runs | command, or why not |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        c = r.claim
        scale = "" if c.verdict == "not attempted" and not r.seeds else c.scale + (f": {c.sizes}" if c.sizes else "")
        runs = "; ".join(x for x in (f"seeds {r.seeds}" if r.seeds else "", scale, r.device, r.wall) if x)
        how = f"`{c.command}`" if c.command else ""
        if c.reason:
            how = f"{how} {c.reason}".strip()
        lines.append("| " + " | ".join(_cell(x) for x in (
            f"`{c.id}`", f"{c.where}: {c.quantity}", _paper(c), _ours(r), f"**{c.verdict}**", runs or "—", how,
        )) + " |")
    notes = [f"- `{r.claim.id}`: {r.claim.note}" for r in rows if r.claim.note]
    if any(r.transcribed for r in rows):
        notes.append("- † transcribed from the lab notebook of the commit in the records (its raw records were not "
                     "kept); rerun the command to replace it with a recorded run.")
    counts = verdict_counts(rows)
    head = f"{len(rows)} claims: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    return "\n".join([head, "", *lines, *([""] + notes if notes else [])])


def verdict_counts(rows: Iterable[Row]) -> dict[str, int]:
    counts = dict.fromkeys(VERDICTS, 0)
    for r in rows:
        counts[r.verdict] += 1
    return counts


def index_table() -> str:
    """The index of every claim of every paper, for ``docs/reproductions.md``: the counts of each verdict per
    paper, then a row per claim with a result, and per paper one row with the claims not attempted."""
    rows = [summarise(p, c) for p in PAPERS for c in load_claims(p)]
    counts = verdict_counts(rows)
    lines = ["| paper | claims | " + " | ".join(VERDICTS) + " |", "| --- | ---: |" + " ---: |" * len(VERDICTS)]
    for paper in PAPERS:
        mine = [r for r in rows if r.paper == paper]
        if mine:
            per = verdict_counts(mine)
            lines.append(f"| [{paper}](../reproductions/{paper}/README.md) | {len(mine)} | "
                         + " | ".join(str(per[v]) for v in VERDICTS) + " |")
    lines.append(f"| **all** | **{len(rows)}** | " + " | ".join(f"**{counts[v]}**" for v in VERDICTS) + " |")
    lines += ["", "| paper | claim | ours | verdict |", "| --- | --- | --- | --- |"]
    for paper in PAPERS:
        mine = [r for r in rows if r.paper == paper]
        for r in mine:
            if r.verdict != "not attempted":
                link = f"[{r.claim.id}](../reproductions/{r.paper}/README.md#claims)"
                lines.append(f"| {r.paper} | {link} | {_cell(_ours(r))} | {r.verdict} |")
        skipped = [r.claim.id for r in mine if r.verdict == "not attempted"]
        if skipped:
            lines.append(f"| {paper} | {', '.join(skipped)} ([why](../reproductions/{paper}/README.md#claims)) | — "
                         "| not attempted |")
    return "\n".join(lines)


def _replace_block(text: str, block: str, path: Path) -> str:
    if BEGIN not in text or END not in text:
        raise LabError(f"{path}: the markers {BEGIN} and {END} are missing")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def generated() -> dict[Path, str]:
    """Every file the tables live in, with the text it should have."""
    out: dict[Path, str] = {}
    for paper in PAPERS:
        readme = ROOT / paper / "README.md"
        if readme.exists():
            out[readme] = _replace_block(readme.read_text(), paper_table(paper), readme)
    if INDEX.exists():
        out[INDEX] = _replace_block(INDEX.read_text(), index_table(), INDEX)
    return out


def problems() -> list[str]:
    """Every claim that its records contradict, or that lacks what its verdict needs."""
    out = []
    for paper in PAPERS:
        for claim in load_claims(paper):
            out += check_claim(summarise(paper, claim))
    return out


# ---------------------------------------------------------------------------------------------- helpers for scripts

def markdown_table(df: pd.DataFrame, floatfmt: str = ".4f") -> str:
    """A pandas frame as a Markdown table (no extra dependency)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for rec in df.itertuples(index=False):
        cells = [format(v, floatfmt) if isinstance(v, float) else str(v) for v in rec]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def data_dir(value: str | None) -> str | None:
    """The benchmark data folder: the argument, else ``$FEDRAY_DATA_DIR``, else ``../shared/datasets`` if present."""
    if value:
        return value
    env = os.environ.get("FEDRAY_DATA_DIR")
    if env:
        return env
    guess = REPO.parent / "shared" / "datasets"
    return str(guess) if guess.is_dir() else None
