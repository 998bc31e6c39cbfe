"""When centres have settled under partial participation.

With every client taking part, federated k-means and fuzzy c-means are the central
algorithms, and the centre shift ‖V_t − V_{t−1}‖_F falls to zero: ``tol`` stops them. With a
fraction γ < 1 each round's centres are those of that round's cohort (one Lloyd or FCM step
on a random part of the union), so the shift falls only to a floor set by how much cohorts
differ, and never below a small ``tol`` where clients are non-IID (Corcuera Bárcena et al.
2021 report ‖ΔV‖ at γ < 1 in the same way). :class:`Settling` stops such a run when the
shift has stopped falling — the mean shift of the last ``window`` rounds is at least
``1 - drop`` times that of the ``window`` rounds before — and hands back the mean of the
last ``window`` centres (a running average, which cancels much of the cohort noise).
Runs at full participation never use it: their bits and stopping rounds are unchanged.
"""
from __future__ import annotations

from collections import deque

import numpy as np

#: The least relative fall of the windowed mean shift that counts as still converging.
DROP = 0.1


class Settling:
    """The partial-participation stopping rule (see the module docstring).

    Parameters
    ----------
    window : int
        Rounds per window W; the rule looks at the last 2 W shifts.
    """

    def __init__(self, window: int) -> None:
        self.window = int(window)
        self.shifts: deque[float] = deque(maxlen=2 * self.window)
        self.recent: deque[np.ndarray] = deque(maxlen=self.window)

    def settled(self, shift: float, centers: np.ndarray) -> bool:
        """Record a round's shift and centres (k, d); True once the shift has stopped falling."""
        self.shifts.append(float(shift))
        self.recent.append(np.array(centers, dtype=np.float64, copy=True))
        if len(self.shifts) < 2 * self.window:
            return False
        s = np.asarray(self.shifts)
        before, last = float(s[: self.window].mean()), float(s[self.window:].mean())
        return last >= (1.0 - DROP) * before

    def averaged(self) -> np.ndarray:
        """The mean of the last ``window`` centres (k, d)."""
        return np.mean(np.stack(list(self.recent)), axis=0)

    def reason(self) -> str:
        s = np.asarray(self.shifts)
        return (f"settled: partial participation, the mean centre shift of the last {self.window} rounds "
                f"({s[self.window:].mean():.3g}) no longer falls; centres averaged over them")
