"""The failures log keeps its rows as columns and gives back exactly the rows it was given.

* Rows added as arrays (one reason for all, one each, or codes into a call's texts) read back, in
  order, as the records one row per client would have been; ``failures.parquet``'s table is the one
  built from those records, injected faults marked.
* Counts by kind, by reason and of evaluation passes are those of the records.
* A log survives pickling (checkpoints, the Ray server actor) and an earlier version's records load.
* The round loop records a late attempt in one chunk: the clock's reason for the clients it made late,
  "no answer" (and the spill-over note) for the others.
"""
from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pandas as pd

from fedray.layers.failure_log import SPILLOVER, FailureLog
from fedray.layers.faults import failures_table
from fedray.loop.clock import LateSet


def _records() -> list[dict]:
    rows = [{"round": 0, "attempt": 0, "client_id": 4, "kind": "failed", "error": "ValueError: bad"},
            {"round": 0, "attempt": 0, "client_id": 9, "kind": "failed", "error": "KeyError: 'x'"}]
    rows += [{"round": 1, "attempt": 0, "client_id": c, "kind": "late", "error": "deadline"} for c in (1, 2, 5)]
    rows += [{"round": -1, "attempt": 1, "client_id": c, "kind": "late", "error": e}
             for c, e in ((0, "gone"), (3, "deadline"), (7, "gone"))]
    return rows


def _log() -> FailureLog:
    log = FailureLog()
    log.add(0, 0, "failed", [4, 9], ["ValueError: bad", "KeyError: 'x'"])
    log.add(1, 0, "late", np.array([1, 2, 5]), "deadline")
    log.add(2, 0, "late", np.zeros(0, dtype=np.int64), "nobody")  # an empty call adds no row
    log.add_coded(-1, 1, "late", np.array([0, 3, 7]), np.array([1, 0, 1]), ("deadline", "gone"))
    return log


def _old_table(rows: list[dict], events: list[dict]) -> pd.DataFrame:
    """The table as it was built from one record per row."""
    planned = {(e["round"], e["attempt"], e["client_id"]) for e in events}
    cols = ["round", "attempt", "client_id", "kind", "injected", "error"]
    return pd.DataFrame([{**{k: f[k] for k in ("round", "attempt", "client_id", "kind", "error")},
                          "injected": (f["round"], f["attempt"], f["client_id"]) in planned} for f in rows],
                        columns=cols)


def test_rows_read_back_as_the_records():
    log = _log()
    assert list(log) == _records() and len(log) == 8 and bool(log) and not FailureLog()
    cols = log.columns()
    assert cols["client_id"].tolist() == [f["client_id"] for f in _records()]
    assert cols["error"].tolist() == [f["error"] for f in _records()]


def test_the_table_is_the_one_built_from_records():
    events = [{"round": 1, "attempt": 0, "client_id": 2}, {"round": -1, "attempt": 1, "client_id": 7},
              {"round": 1, "attempt": 1, "client_id": 5}]  # another attempt: not this row
    table = failures_table(_log(), events)
    pd.testing.assert_frame_equal(table, _old_table(_records(), events))
    assert table["injected"].tolist() == [False, False, False, True, False, False, False, True]
    pd.testing.assert_frame_equal(failures_table(_records(), events), table)  # records are still read
    empty = failures_table(FailureLog(), [])
    assert empty.empty and list(empty.columns) == list(table.columns)
    assert empty.dtypes.to_dict() == failures_table([], []).dtypes.to_dict()


def test_counts_are_those_of_the_records():
    log, rows = _log(), _records()
    assert log.count("failed") == sum(f["kind"] == "failed" for f in rows) == 2
    assert log.count("late") == 6 and log.count() == 8
    assert log.count(contains="deadline") == sum("deadline" in f["error"] for f in rows) == 4
    assert log.count("late", contains="gone") == 2 and log.count(contains="nothing") == 0
    assert log.count(evaluation=True) == sum(f["round"] < 0 for f in rows) == 3


def test_a_log_survives_pickling_and_old_records_load():
    log = _log()
    again = pickle.loads(pickle.dumps(log))
    assert list(again) == list(log)
    assert list(FailureLog.of(_records())) == _records() and FailureLog.of(log) is log
    assert list(FailureLog.of(None)) == []


def test_a_late_attempt_is_one_chunk_with_each_clients_reason():
    late = LateSet()
    late.add(np.array([8, 2]), np.array([0, 1]))
    late.add(np.array([2]), np.array([0]))  # late again in a retry: the newer reason
    assert late.ids.tolist() == [2, 8] and late.codes.tolist() == [0, 0]
    res = SimpleNamespace(failed=[6], errors={6: "Traceback ...\nValueError: no"}, late=[1, 2, 3, 8],
                          spillover=[3])
    log = FailureLog()
    expected = log.add_attempt(4, 0, res, 2.5, late, ("past the deadline", "went offline"))
    waited = "no answer within runtime.round_timeout=2.5"
    assert not expected  # clients 1 and 3 were late for another reason than the clock
    assert list(log) == [
        {"round": 4, "attempt": 0, "client_id": 6, "kind": "failed", "error": "ValueError: no"},
        {"round": 4, "attempt": 0, "client_id": 1, "kind": "late", "error": waited},
        {"round": 4, "attempt": 0, "client_id": 2, "kind": "late", "error": "past the deadline"},
        {"round": 4, "attempt": 0, "client_id": 3, "kind": "late", "error": waited + SPILLOVER},
        {"round": 4, "attempt": 0, "client_id": 8, "kind": "late", "error": "past the deadline"}]
    assert len(log.chunks) == 2
    only_clock = SimpleNamespace(failed=[], errors={}, late=[2, 8], spillover=[])
    assert FailureLog().add_attempt(5, 0, only_clock, None, late, ("d", "o"))
