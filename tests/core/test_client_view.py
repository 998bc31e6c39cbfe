"""``fedray.ClientView``: the public type of a client function's ``client`` argument."""
from __future__ import annotations

import numpy as np
import pytest

import fedray
from fedray.runtime.clients import Client, TrainingView


def test_both_views_a_client_function_receives_are_client_views():
    """The view with labels (evaluation, supervised) and the training view without them both offer
    every member of the protocol, with the values the host keeps."""
    states: dict = {}
    c = Client(3, "c3", np.zeros((2, 2)), np.array([0, 1]), 5, False, (2,), states, {}, {"group": 1}, 4)
    for view in (c, TrainingView(c)):
        assert isinstance(view, fedray.ClientView)
        assert (view.id, view.name, view.round, view.meta) == (3, "c3", 4, {"group": 1})
        view.state["k"] = 1
    assert states == {3: {"k": 1}}
    with pytest.raises(AttributeError):
        TrainingView(c).labels  # noqa: B018 - training tasks of unsupervised algorithms see no labels


def test_an_object_missing_a_member_is_not_a_client_view():
    class Partial:
        id, name, round = 0, "", 0
        data = state = secrets = meta = None

    assert not isinstance(Partial(), fedray.ClientView)  # no rng
