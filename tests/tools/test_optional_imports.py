"""An optional library that is not installed is never imported from the working folder."""
from __future__ import annotations

import importlib
import sys

import pytest

from fedray.core import extras
from fedray.tools import cli


def test_a_missing_optional_library_is_not_imported_from_the_current_folder(tmp_path, monkeypatch):
    """`fr_probe_optional` stands for an optional library (dp_accounting) not installed here; a file of
    its name in the current folder must not run, while a plug-in module there still imports (on
    today's main the folder's file was imported in the library's place)."""
    name = f"fr_probe_optional_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n")
    (tmp_path / f"{name}_plugin.py").write_text("OK = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(extras, "OPTIONAL_LIBRARIES", [name])
    monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        cli._plugins_from_current_folder()
        with pytest.raises(ImportError):
            importlib.import_module(name)
        assert not (tmp_path / "ran").exists()
        assert importlib.import_module(f"{name}_plugin").OK == 1
        assert extras.missing((name,)) == [name]
    finally:
        sys.modules.pop(name, None)
        sys.modules.pop(f"{name}_plugin", None)
