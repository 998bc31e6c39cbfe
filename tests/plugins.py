"""What the tests plug into fedray, shared between test files (``from tests import plugins``).

A plug-in that must be imported by name in another process (a CLI run, a Ray worker that gets it
shipped) has to live in a file outside fedray; :data:`MEAN` is the source of the smallest one, a
method that sums each client's rows for ``last`` rounds and returns their mean, and
:func:`write_module` puts it (with extra classes) in a folder. :func:`installed_distribution`
makes a folder look like an installed package declaring entry points; :class:`Interrupt` stops a
run as Ctrl-C would, :func:`interrupt_after_checkpoint` right after a checkpoint is written;
:func:`assert_same_training` compares two supervised runs bit for bit. :func:`column_sums` and
:func:`crash_listed` are client functions for tests that call the clients themselves.
"""
from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import numpy as np

from fedray.core.stats import Stats

#: ``Mean``: the mean of the union of the clients' rows, from summed statistics (``fn`` gives them)
#: for ``last`` rounds; subclasses change ``fn``, ``last`` or a hook to misbehave on purpose.
MEAN = '''
import numpy as np
import fedray


def moments(payload, shared, client):
    X = client.data.X
    return fedray.Stats(s=X.sum(axis=0), n=np.array(float(X.shape[0])))


class Mean(fedray.Algorithm):
    fn = staticmethod(moments)
    last = 2

    def configure_round(self, ctx):
        return None if ctx.round >= self.last else {c: fedray.Task(self.fn) for c in ctx.sampled}

    def aggregate(self, ctx, replies):
        t = fedray.total(r.update for r in replies)
        self.mean = t["s"] / t["n"]
        return {"n": float(t["n"])}

    def result(self):
        return {"mean": self.mean}
'''


def write_module(folder: Path, name: str, extra: str = "") -> Path:
    """``folder/name.py`` holding :data:`MEAN` and then ``extra`` (more classes); its path."""
    path = Path(folder) / f"{name}.py"
    path.write_text(MEAN + extra)
    return path


def forget(*prefixes: str) -> None:
    """Drop the modules under ``prefixes`` from ``sys.modules`` (a plug-in written afresh by the next test)."""
    for name in [m for m in sys.modules if m.split(".")[0] in prefixes]:
        del sys.modules[name]



def assert_same_training(a, b, columns: tuple[str, ...] = ("accuracy", "train_loss")) -> None:
    """Two supervised runs bit for bit: the final weights, ``columns`` of every round's history, and the
    final per-client accuracies."""
    import numpy as np

    assert np.array_equal(a.model["weights"], b.model["weights"])
    for col in columns:
        assert a.history[col].tolist() == b.history[col].tolist(), col
    assert a.final["client_accuracy"] == b.final["client_accuracy"]


class Interrupt:
    """An ``on_round`` function that interrupts a run (KeyboardInterrupt, as Ctrl-C) after round ``at``."""

    def __init__(self, at: int) -> None:
        self.at = at

    def __call__(self, row: dict) -> None:
        if row["round"] == self.at:
            raise KeyboardInterrupt


def interrupt_after_checkpoint(round_: int):
    """A patch (use it with ``with``) that stops the driver right after the checkpoint of ``round_`` was
    written (KeyboardInterrupt, as a kill would); the checkpoint must have been written."""
    from fedray.api import checkpoint

    orig = checkpoint.Checkpointer.after_round

    def after_round(self, r, snapshot):
        path = orig(self, r, snapshot)
        if r == round_:
            assert path is not None
            raise KeyboardInterrupt
        return path

    return mock.patch.object(checkpoint.Checkpointer, "after_round", after_round)


def column_sums(payload, shared, client) -> Stats:
    """A client function: the client's column sums ``s`` and its number of rows ``n``."""
    X = client.data.X
    return Stats(s=X.sum(axis=0), n=np.array(float(X.shape[0])))


def crash_listed(payload, shared, client) -> Stats:
    """:func:`column_sums`, but the clients listed in ``payload["crash"]`` raise (they drop out)."""
    if client.id in payload["crash"]:
        raise RuntimeError(f"client {client.id} dropped out")
    return column_sums(payload, shared, client)


def installed_distribution(folder: Path, name: str, group: str, entries: str) -> None:
    """Make ``folder`` (put it on ``sys.path``) hold an installed distribution ``name`` 1.0 whose entry-point
    ``group`` lists ``entries`` (``"key = module:attr"`` lines)."""
    info = Path(folder) / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entries}")
