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


#: fedray's declared dependencies (pyproject.toml), by the module name they install.
DEPENDENCY_MODULES = {"ray", "numpy", "scipy", "sklearn", "pandas", "pyarrow", "matplotlib", "yaml", "pydantic",
                      "pydantic_core", "tqdm", "psutil", "cryptography", "numba"}


def test_every_module_fedray_imports_is_the_standard_library_a_dependency_or_resolved_before_the_folder():
    """`grpc` (imported by `fedray run` with runtime.address) was missing from the list of optional
    libraries, so a `grpc.py` in the working folder ran. Every top-level module imported anywhere in
    fedray's source must be in the standard library, a declared dependency, or OPTIONAL_LIBRARIES
    (resolved before the working folder goes on sys.path); a dependency's module is resolved too when it
    may be absent."""
    import ast
    from pathlib import Path

    import fedray

    root = Path(fedray.__file__).parent
    found: dict[str, str] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                found.setdefault(n.split(".")[0], str(path.relative_to(root)))
    unknown = {m: where for m, where in found.items()
               if m not in sys.stdlib_module_names and m not in DEPENDENCY_MODULES and m != "fedray"
               and m not in extras.OPTIONAL_LIBRARIES}
    assert unknown == {}
    assert "grpc" in extras.OPTIONAL_LIBRARIES


def test_an_absent_grpc_is_blocked_before_the_working_folder_is_used(tmp_path, monkeypatch):
    """With grpc absent, a `grpc.py` in the working folder does not run after the CLI's set-up."""
    (tmp_path / "grpc.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    real = extras.missing
    monkeypatch.setattr(extras, "missing", lambda names: list(names) if names == ("grpc",) else real(names))
    saved = sys.modules.pop("grpc", None)
    try:
        cli._plugins_from_current_folder()
        with pytest.raises(ImportError):
            importlib.import_module("grpc")
        assert not (tmp_path / "ran").exists()
    finally:
        sys.modules.pop("grpc", None)
        if saved is not None:
            sys.modules["grpc"] = saved
