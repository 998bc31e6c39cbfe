"""The algorithm registry reads which module registers which name from the modules themselves.

Properties held: a module added to ``fedray.algorithms`` that decorates a class with ``@register``
is found by its name (and aliases) with no other edit, and only that module is imported; every
built-in name maps to the module that defines it; a module whose names cannot be read from its
source is imported when a name is missed, so it still registers itself.
"""
from __future__ import annotations

import sys
import textwrap

import pytest

import fedray
from fedray.core import registry
from fedray.core.registry import ALGORITHMS, Registry, declared_names, get_algorithm
from tests import plugins

NEW_MODULE = '''
from fedray import register


@register
class NewMean(Mean):
    """A method that exists only in this module."""
    name = "fr-new-mean"
    aliases = ("fr-new-mean-alias",)
'''

NOT_IMPORTED = "raise ImportError('this module must not be imported when another name is asked for')\n"


@pytest.fixture
def extra_algorithms(tmp_path, monkeypatch):
    """A second folder of ``fedray.algorithms`` (as a new file in algorithms/ would be), holding a new
    method and a module that fails if imported; the registry forgets what it read before."""
    import fedray.algorithms as package

    plugins.write_module(tmp_path, "fr_new_mean", NEW_MODULE)
    (tmp_path / "fr_broken.py").write_text(NOT_IMPORTED + "\n@register\nclass Other:\n    name = 'fr-broken'\n")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    monkeypatch.setattr(ALGORITHMS, "_scanned", None)
    yield tmp_path
    for name in ("fr-new-mean", "fr-new-mean-alias"):
        ALGORITHMS._items.pop(name, None)
    sys.modules.pop("fedray.algorithms.fr_new_mean", None)
    ALGORITHMS._scanned = None


def test_a_new_algorithm_module_registers_itself_and_runs_by_name(extra_algorithms):
    assert "fedray.algorithms.fr_new_mean" not in sys.modules
    cls = get_algorithm("fr-new-mean")
    assert cls.__module__ == "fedray.algorithms.fr_new_mean" and cls.name == "fr-new-mean"
    assert get_algorithm("fr-new-mean-alias") is cls
    assert "fedray.algorithms.fr_broken" not in sys.modules  # only the module that declares the name
    res = fedray.run(algorithm={"name": "fr-new-mean"}, data={"dataset": "sklearn:iris"},
                     federation={"n_clients": 3}, runtime={"backend": "local", "progress": False}, output=False)
    from sklearn.datasets import load_iris

    X = load_iris().data
    assert res.model["mean"] == pytest.approx(X.mean(axis=0))


def test_declared_names_are_read_from_source_without_importing(extra_algorithms):
    names, unread = declared_names("fedray.algorithms")
    assert names["fr-new-mean"] == names["fr-new-mean-alias"] == "fedray.algorithms.fr_new_mean"
    assert names["fr-broken"] == "fedray.algorithms.fr_broken" and unread == []
    assert "fedray.algorithms.fr_broken" not in sys.modules


BUILTIN = {"kmeans": "kmeans", "federated-fcm": "fcm", "fedkmeans": "fedkmeans", "kfed": "kfed", "fedfcm": "fedfcm",
           "fedfcm-avg": "fedfcm", "flacc": "flacc", "fedavg": "baselines", "local": "baselines",
           "ifca": "baselines", "cfl": "baselines", "flhc": "baselines", "fedcref": "fedcref"}


def test_every_builtin_name_maps_to_the_module_that_defines_it():
    names, unread = declared_names("fedray.algorithms")
    assert {k: v for k, v in names.items()} == {k: f"fedray.algorithms.{v}" for k, v in BUILTIN.items()}
    assert unread == []
    for name in names:
        assert ALGORITHMS.builtin(name)
    for name, module in names.items():
        cls = ALGORITHMS[name]
        assert cls.__module__ == module and name in (cls.name, *cls.aliases)


def test_a_module_without_a_literal_name_is_imported_when_a_name_is_missed(tmp_path, monkeypatch):
    pkg = tmp_path / "fr_scan_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "computed.py").write_text(textwrap.dedent('''
        from fedray.core.registry import Registry
        REG = None

        def register(cls):
            import fr_scan_pkg
            fr_scan_pkg.REG.register(cls.name, cls)
            return cls

        @register
        class Made:
            name = "made-" + "here"
    '''))
    (pkg / "plain.py").write_text("from fr_scan_pkg.computed import register\n\n@register\nclass P:\n"
                                  "    name = 'plain'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fr_scan_pkg

    try:
        reg: Registry = Registry("thing", scan=("fr_scan_pkg",))
        fr_scan_pkg.REG = reg
        assert declared_names("fr_scan_pkg") == ({"plain": "fr_scan_pkg.plain"}, ["fr_scan_pkg.computed"])
        assert reg.get("made-here").__name__ == "Made"  # found by importing the module it could not read
        assert reg.get("plain").__name__ == "P" and reg.names() == ["made-here", "plain"]
        assert reg.get("nothing") is None
    finally:
        for name in [m for m in sys.modules if m.startswith("fr_scan_pkg")]:
            del sys.modules[name]


def test_the_registry_module_names_no_algorithm():
    """Adding an algorithm is one edit: the registry's source names none of the built-in methods."""
    source = registry.__file__
    text = open(source, encoding="utf-8").read()
    for name in BUILTIN.values():
        assert f"fedray.algorithms.{name}" not in text
