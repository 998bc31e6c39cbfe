"""The failures of a run, column-wise: one row per client that failed or was late in an attempt of a call.

The round loop adds a call's missing clients at once, as arrays: their ids, and their reasons as
small integer codes into the call's distinct texts. A round in which 10^4 clients miss a deadline adds
a few arrays, not 10^4 records. The rows are those of ``failures.parquet`` (:meth:`FailureLog.table`):
round, attempt, client_id, kind (``failed`` / ``late``), injected, error; iterating the log gives them
as dictionaries, in the order they were added.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

COLUMNS = ("round", "attempt", "client_id", "kind", "error")
#: Added to the error of a late client whose actor was still busy with an earlier late task.
SPILLOVER = " (its actor was still busy with an earlier round's late task: spill-over)"


def last_line(error: str) -> str:
    """The last line of an error text (its traceback's message), or ''."""
    return (error.strip().splitlines() or [""])[-1]


class FailureLog:
    """Rows (round, attempt, client_id, kind, error), kept as one chunk of arrays per call.

    A chunk is ``(round, attempt, kind, ids, codes, texts)``: client ``ids[j]`` missed attempt ``attempt``
    of the call of stream round ``round`` (the round, or -1 - stage for an evaluation pass) for the
    reason ``texts[codes[j]]``.
    """

    def __init__(self) -> None:
        self.chunks: list[tuple[int, int, str, np.ndarray, np.ndarray, tuple[str, ...]]] = []

    @classmethod
    def of(cls, value: Any) -> FailureLog:
        """``value`` as a log: a log itself, or the rows as dictionaries (an earlier version's state)."""
        if isinstance(value, FailureLog):
            return value
        out = cls()
        for f in value or ():
            out.add(int(f["round"]), int(f["attempt"]), str(f["kind"]), [int(f["client_id"])], str(f.get("error", "")))
        return out

    def add(self, round_: int, attempt: int, kind: str, ids: Any, errors: str | Sequence[str]) -> None:
        """Rows for clients ``ids`` (in order): one reason for all (a text), or one each (a sequence)."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        if not ids.size:
            return
        if isinstance(errors, str):
            codes, texts = np.zeros(ids.size, dtype=np.int32), (errors,)
        else:
            uniq, codes = np.unique(np.asarray(list(errors), dtype=object).astype(str), return_inverse=True)
            if len(codes) != ids.size:
                raise ValueError(f"FailureLog.add: {len(codes)} errors for {ids.size} clients")
            codes, texts = codes.astype(np.int32).ravel(), tuple(str(t) for t in uniq)
        self.chunks.append((int(round_), int(attempt), str(kind), ids, codes, texts))

    def add_coded(self, round_: int, attempt: int, kind: str, ids: np.ndarray, codes: np.ndarray,
                  texts: Iterable[str]) -> None:
        """Rows for clients ``ids`` whose reasons are ``texts[codes[j]]`` (nothing per client is built)."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        if ids.size:
            self.chunks.append((int(round_), int(attempt), str(kind), ids,
                                np.asarray(codes, dtype=np.int32).ravel(), tuple(texts)))

    def add_attempt(self, round_: int, attempt: int, res: Any, round_timeout: float | None, clock_late: Any = None,
                    reasons: tuple[str, ...] = ()) -> bool:
        """Rows for the clients missing from one attempt ``res`` (an ExecResult): the failed ones with the last
        line of their error; the late ones with the simulated clock's reason (``clock_late.lookup(ids)``: who
        it made late and a code each into ``reasons``), else "no answer within runtime.round_timeout" (and
        why, for a spill-over). Returns whether the clock made every late client late."""
        if res.failed:
            self.add(round_, attempt, "failed", res.failed, [last_line(res.errors.get(c, "")) for c in res.failed])
        if not res.late:
            return True
        late = getattr(res.late, "array", None)  # the ids as an array too, where the list keeps them
        if late is None or len(late) != len(res.late):
            late = np.asarray(res.late, dtype=np.int64)
        waited = f"no answer within runtime.round_timeout={round_timeout}"
        if clock_late is not None and len(clock_late) == len(late) and np.array_equal(clock_late.ids, late):
            # every late client is the simulated clock's (the usual case): its codes as they are
            self.add_coded(round_, attempt, "late", late, clock_late.codes, (*reasons, waited, waited + SPILLOVER))
            return True
        spill = np.isin(late, np.asarray(res.spillover, dtype=np.int64)) if res.spillover else np.zeros(len(late), bool)
        codes = np.where(spill, len(reasons) + 1, len(reasons)).astype(np.int32)
        sim = np.zeros(len(late), dtype=bool)
        if clock_late is not None:
            sim, why = clock_late.lookup(late)
            codes[sim] = why[sim]
        self.add_coded(round_, attempt, "late", late, codes, (*reasons, waited, waited + SPILLOVER))
        return bool(sim.all())

    def __len__(self) -> int:
        return sum(c[3].size for c in self.chunks)

    def __bool__(self) -> bool:
        return any(c[3].size for c in self.chunks)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for r, a, kind, ids, codes, texts in self.chunks:
            for cid, code in zip(ids.tolist(), codes.tolist()):
                yield {"round": r, "attempt": a, "client_id": cid, "kind": kind, "error": texts[code]}

    def count(self, kind: str | None = None, contains: str | None = None, evaluation: bool | None = None) -> int:
        """Rows of ``kind`` (any when None) whose error contains ``contains`` (any when None), of evaluation
        passes (negative rounds) or not (``evaluation``; any when None)."""
        n = 0
        for r, _, k, ids, codes, texts in self.chunks:
            if (kind is not None and k != kind) or (evaluation is not None and (r < 0) != evaluation):
                continue
            if contains is None:
                n += ids.size
            else:
                hit = [i for i, t in enumerate(texts) if contains in t]
                n += int(np.isin(codes, hit).sum()) if hit else 0
        return n

    def columns(self) -> dict[str, np.ndarray]:
        """The rows as columns (round, attempt, client_id int64; kind, error object), in order."""
        if not self.chunks:
            return {"round": np.zeros(0, dtype=np.int64), "attempt": np.zeros(0, dtype=np.int64),
                    "client_id": np.zeros(0, dtype=np.int64), "kind": np.zeros(0, dtype=object),
                    "error": np.zeros(0, dtype=object)}
        sizes = [c[3].size for c in self.chunks]
        return {"round": np.repeat([c[0] for c in self.chunks], sizes).astype(np.int64),
                "attempt": np.repeat([c[1] for c in self.chunks], sizes).astype(np.int64),
                "client_id": np.concatenate([c[3] for c in self.chunks]),
                "kind": np.repeat(np.array([c[2] for c in self.chunks], dtype=object), sizes),
                "error": np.concatenate([np.asarray(c[5], dtype=object)[c[4]] for c in self.chunks])}

    def injected(self, events: list[dict[str, Any]]) -> np.ndarray:
        """Bool per row: whether an injected fault (``events``: round, attempt, client_id) planned it."""
        planned: dict[tuple[int, int], list[int]] = {}
        for e in events:
            planned.setdefault((int(e["round"]), int(e["attempt"])), []).append(int(e["client_id"]))
        parts = [np.isin(c[3], planned.get((c[0], c[1]), [])) for c in self.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)

    def table(self, events: list[dict[str, Any]]) -> Any:
        """``failures.parquet``: round, attempt, client_id, kind, injected, error."""
        import pandas as pd

        cols = self.columns()
        if not self.chunks:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
                ["round", "attempt", "client_id", "kind", "injected", "error"],
                ["int64", "int64", "int64", "object", "bool", "object"])})
        # texts as lists: pandas infers their type as it did from one record per row
        return pd.DataFrame({"round": cols["round"], "attempt": cols["attempt"], "client_id": cols["client_id"],
                             "kind": cols["kind"].tolist(), "injected": self.injected(events),
                             "error": cols["error"].tolist()})

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, (FailureLog, list)):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FailureLog({len(self)} rows in {len(self.chunks)} calls)"
