"""What a run's accuracy was measured on, said once for the table and ``summary.json``.

The **final accuracy** (``summary["final"]["accuracy"]``) is the mean over clients of each
client's accuracy on its own test rows, with the model the algorithm assigns it at the end
(FedAvg's one model, FLACC's or IFCA's cluster model, a client's own model for ``local``),
evaluated once after the last round has been aggregated (the evaluation pass). The round
accuracy in ``rounds.parquet`` is the same mean in that round's evaluation, taken *before* the
round's training, so the last round's value is that of the models one aggregation earlier,
with the assignment of that time; the difference from the final accuracy is what the last
round's training (and, for clustered methods, its re-assignment) changed. ``docs/results.md``
gives the definitions; the table, ``summary.json``, Tune's last report (``accuracy``) and the
trackers' ``final/accuracy`` carry the same number.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from fedray.layers.failure_log import FailureLog


def accuracy_account(history: pd.DataFrame, clients: pd.DataFrame) -> dict[str, Any]:
    """``accuracy_measured_on`` (clients and test rows of the final accuracy) and
    ``last_round_accuracy`` (round and value), for runs that report an accuracy per client."""
    out: dict[str, Any] = {}
    if "accuracy" in clients:
        acc = clients["accuracy"].astype(float)
        measured = acc.notna()
        on: dict[str, Any] = {"clients": int(measured.sum()), "of_clients": int(len(clients))}
        if "n_test" in clients:
            on["test_rows"] = int(clients.loc[measured, "n_test"].sum())
            on["train_rows"] = int(clients.loc[measured, "n_train"].sum())
        out["accuracy_measured_on"] = on
    if "accuracy" in history and history["accuracy"].notna().any():
        last = history[history["accuracy"].notna()].iloc[-1]
        out["last_round_accuracy"] = {"round": int(last["round"]), "accuracy": float(last["accuracy"])}
    return out


def accuracy_lines(summary: dict[str, Any]) -> list[str]:
    """The table's lines for the final accuracy, what it was measured on, and the last round's."""
    fin = summary.get("final", {})
    value = fin.get("accuracy")
    if not isinstance(value, (int, float)) or math.isnan(float(value)):
        return []
    on = summary.get("accuracy_measured_on") or {}
    rows = f", {on['test_rows']} test rows" if "test_rows" in on else ""
    lines = [f"{'accuracy (final)':<28}{value:.4f}  mean over {on.get('clients', '?')} clients, each on its own "
             f"test rows{rows}, after the last round"]
    last = summary.get("last_round_accuracy")
    if last:
        lines.append(f"{'accuracy, round ' + str(last['round']):<28}{last['accuracy']:.4f}  the same, before that "
                     "round's training (docs/results.md)")
    return lines


def simulated_account(history: pd.DataFrame, federation: Any, failures: Any) -> dict[str, Any]:
    """``summary["simulated"]``: the simulated clock at the end of the run, its rounds' durations, the clients the
    clock made late (past the deadline or gone offline), and the simulated time at which
    ``federation.target`` was first reached (None: never; ``target_note`` says why)."""
    t = history["sim_time_s"].to_numpy(float)
    rounds = history["sim_round_s"].to_numpy(float)
    out: dict[str, Any] = {
        "time_s": float(t[-1]) if len(t) else 0.0,
        "round_s": {"mean": float(rounds.mean()), "max": float(rounds.max())} if len(rounds) else {},
        "late_deadline": FailureLog.of(failures).count(contains="federation.deadline"),
        "late_offline": FailureLog.of(failures).count(contains="went offline"),
        "deadline_s": federation.deadline,
    }
    target = federation.target
    if target is not None:
        out["target"] = {"metric": target.metric, "value": target.value, "direction": target.direction,
                         "time_s": None, "round": None}
        if target.metric not in history.columns:
            out["target"]["note"] = (f"{target.metric!r} is not recorded by the rounds; they record "
                                     f"{sorted(c for c in history.columns if c not in ('phase',))}")
        else:
            y = pd.to_numeric(history[target.metric], errors="coerce").to_numpy(float)
            hit = (y >= target.value) if target.direction == "above" else (y <= target.value)
            if hit.any():
                i = int(hit.argmax())
                out["target"].update(time_s=float(t[i]), round=int(history["round"].iloc[i]))
    return out


def simulated_lines(summary: dict[str, Any]) -> list[str]:
    """The simulated clock in the text table: the time simulated, and the time to the target."""
    sim = summary.get("simulated")
    if not sim:
        return []
    lines = [f"{'simulated time':<28}{_duration(sim['time_s'])}"
             + (f" ({sim['late_deadline']} late past the deadline)" if sim.get("late_deadline") else "")]
    tgt = sim.get("target")
    if tgt:
        sign = ">=" if tgt["direction"] == "above" else "<="
        when = (f"{_duration(tgt['time_s'])} (round {tgt['round']})" if tgt["time_s"] is not None
                else "not reached")
        label = f"to {tgt['metric']} {sign} {tgt['value']:g}"
        lines.append(f"{label:<27} {when}")
    return lines


def _duration(s: float) -> str:
    return f"{s:.2f} s" if s < 120 else f"{s / 3600:.2f} h ({s:.0f} s)"
