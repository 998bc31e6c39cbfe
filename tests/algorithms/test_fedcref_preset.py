"""FedCRef's defaults are the tuned dirty-start setting; ``preset: paper`` restores the paper's rules,
and parameters given explicitly override either preset."""
from __future__ import annotations

import warnings

import pytest

from fedray.algorithms.fedcref import PAPER_PRESET
from fedray.api.session import Session
from fedray.core.errors import ConfigError, SharedSamplesWarning
from fedray.core.registry import get_algorithm, make_params

#: The setting docs/reproductions.md documents as the dirty-start setting (relative, P 95, τ 0.1, ...).
TUNED = {"normalisation": "relative", "percentile": 95.0, "tau": 0.1, "fed_rounds": 40, "min_active_iterations": 3,
         "fed_trim": 0.2, "ratio": 0.5}
SMALL = {"hidden": [16, 8], "local_epochs": 2, "fed_rounds": 2, "max_iterations": 2, "batch_size": 32}


def _params(**given):
    cls = get_algorithm("fedcref")
    return make_params(cls, given)


def test_defaults_are_the_tuned_dirty_start_setting():
    p = _params()
    assert p.preset == "tuned"
    assert {k: getattr(p, k) for k in TUNED} == TUNED


def test_paper_preset_gives_the_papers_test_and_rules():
    p = _params(preset="paper")
    assert {k: getattr(p, k) for k in PAPER_PRESET} == PAPER_PRESET
    assert PAPER_PRESET == {"normalisation": "cluster", "percentile": 75.0, "tau": 0.2, "fed_rounds": 15,
                            "min_active_iterations": 1, "fed_trim": 0.0, "ratio": 0.0}
    # the parameters outside the preset keep their defaults
    assert _params(preset="paper").local_epochs == _params().local_epochs == 20


@pytest.mark.parametrize("preset", ["paper", "tuned"])
def test_explicit_parameters_override_the_preset(preset):
    p = _params(preset=preset, tau=0.3, fed_rounds=7)
    assert (p.tau, p.fed_rounds) == (0.3, 7)
    other = PAPER_PRESET if preset == "paper" else TUNED
    assert p.normalisation == other["normalisation"] and p.ratio == other["ratio"]


def test_an_unknown_preset_is_a_config_error_naming_key_value_and_choices():
    with pytest.raises(ConfigError, match=r"algorithm\.params \(fedcref\)\.preset: .*'tuned'.*'paper'.*'fedcref2025'"):
        _params(preset="fedcref2025")


def _session(params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedSamplesWarning)
        return Session(algorithm={"name": "fedcref", "params": params},
                       data={"dataset": "sklearn:digits",
                             "partition": {"name": "class-subsets", "classes": [2, 3], "samples_per_class": 25}},
                       federation={"n_clients": 4}, runtime={"backend": "local"}, seed=3)


def test_paper_preset_runs_bit_for_bit_as_the_papers_values_given_by_hand():
    """The preset is only a set of starting values: a run with ``preset: paper`` equals, model and metrics,
    one with the paper's values spelled out; the tuned default gives another run."""
    with _session({**SMALL, "preset": "paper"}) as s:
        preset = s.run(output=False)
        by_hand = s.run("fedcref", {**PAPER_PRESET, **SMALL, "preset": "tuned"}, output=False)
        tuned = s.run("fedcref", SMALL, output=False)
    assert preset.model["node_weights_sha1"] == by_hand.model["node_weights_sha1"]
    assert preset.final["history"] == by_hand.final["history"]
    assert tuned.model["node_weights_sha1"] != preset.model["node_weights_sha1"]


def test_describe_lists_the_preset_and_the_tuned_defaults():
    from fedray.tools.describe import describe

    text = describe("fedcref")
    assert "preset" in text and "paper" in text and "tuned" in text
    line = next(ln for ln in text.splitlines() if "fed_trim" in ln)
    assert "0.2" in line
