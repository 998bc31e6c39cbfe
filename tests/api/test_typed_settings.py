"""The floors below the API take frozen settings read from the configuration by name, not the raw
configuration (DESIGN.md, "no floor below api reads the raw config")."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import fedray
from fedray.api.config import DPConfig, PrivacyConfig, RuntimeConfig
from fedray.api.settings import fault_settings, privacy_settings, runtime_settings
from fedray.layers.settings import DPSettings, FaultSettings, PrivacySettings
from fedray.runtime.settings import ClientResourceSettings, RuntimeSettings

PACKAGE = Path(fedray.__file__).resolve().parent
BELOW_API = ("core", "runtime", "layers", "loop")
#: Functions below the API that still take the whole configuration (``cfg: Any``): none.
STILL_RAW: set[str] = set()


def _raw_config_parameters() -> set[str]:
    """``module:function`` of every function below the API with a parameter ``cfg`` or ``config`` typed
    ``Any`` (the algorithms' ``check_config`` hook excepted: it is given the configuration on purpose)."""
    out = set()
    for floor in BELOW_API:
        for path in sorted((PACKAGE / floor).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name == "check_config":
                    continue
                for a in node.args.args + node.args.kwonlyargs:
                    if a.arg in ("cfg", "config") and (a.annotation is None or ast.unparse(a.annotation) == "Any"):
                        out.add(f"{path.relative_to(PACKAGE).as_posix()}:{node.name}")
    return out


def test_no_new_function_below_the_api_takes_the_raw_configuration():
    found = _raw_config_parameters()
    assert found <= STILL_RAW, f"new functions below the API take the raw configuration: {sorted(found - STILL_RAW)}"
    assert not {f for f in found if f.split("/")[0] in ("layers", "loop")}


def test_the_settings_carry_every_key_of_their_section_by_name_and_are_frozen():
    cfg = fedray.make_config(privacy={"secure_aggregation": True, "min_cohort": 4, "release_rule": "count",
                                      "dp": {"clip": 2.0, "noise_multiplier": 1.5, "adjacency": "add-remove"},
                                      "feature_bounds": [[0, 1], [-2, 2]]},
                             faults={"crashes": [[1, 2]], "crash_probability": 0.1},
                             runtime={"backend": "local", "call_timeout": 12.5,
                                      "client_resources": {"num_gpus": 0.5, "custom": {"edge": 1}}})
    p, f, rt = privacy_settings(cfg), fault_settings(cfg), runtime_settings(cfg)
    for settings, section, model in ((p, cfg.privacy, PrivacyConfig), (rt, cfg.runtime, RuntimeConfig),
                                     (p.dp, cfg.privacy.dp, DPConfig), (f, cfg.faults, type(cfg.faults))):
        assert {x.name for x in dataclasses.fields(settings)} == set(model.model_fields)
        for name in model.model_fields:
            mine, theirs = getattr(settings, name), getattr(section, name)
            if name in ("feature_bounds", "crashes"):
                assert [list(x) for x in mine] == [list(x) for x in theirs]
            elif name not in ("dp", "client_resources"):
                assert mine == theirs, name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(settings, next(iter(model.model_fields)), None)
    assert isinstance(p, PrivacySettings) and isinstance(p.dp, DPSettings) and isinstance(f, FaultSettings)
    assert p.active and f.active and p.dp.adjacency == "add-remove" and p.feature_bounds == ((0.0, 1.0), (-2.0, 2.0))
    assert isinstance(rt, RuntimeSettings) and rt.client_resources == ClientResourceSettings(None, 0.5, {"edge": 1})
    assert not privacy_settings(fedray.make_config()).active and not fault_settings(fedray.make_config()).active


def test_a_sessions_privacy_layer_holds_the_typed_settings_and_secure_sums_go_through_it():
    from fedray.layers.privacy import PrivacyLayer
    from fedray.layers.stack import find_layer

    with fedray.Session(data={"dataset": "sklearn:iris"}, federation={"n_clients": 4},
                        privacy={"secure_aggregation": True}, runtime={"backend": "local", "progress": False}) as s:
        layer = find_layer(s.layers, PrivacyLayer)
        assert layer.cfg == privacy_settings(s.config)
        assert s.secure_sum_layer() is layer
