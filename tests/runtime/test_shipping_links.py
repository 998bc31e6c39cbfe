"""Shipping a plug-in ships no link (inside or out of its package), judges a link by its own path
against .gitignore, and logs each shipped file."""
from __future__ import annotations

import logging

from fedray.runtime.ship_files import plugin_files
from fedray.runtime.shipping import stage_plugin


def _package(tmp_path):
    pkg = tmp_path / "proj" / "fr_links"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("X = 1\n")
    (pkg / "keep.txt").write_text("shipped\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / "key").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (pkg / "notes.txt").symlink_to(home / "key")  # an innocent name, a private key behind it
    (home / "lib").mkdir()
    (home / "lib" / "__init__.py").write_text("SECRET = 1\n")
    (pkg / "lib").symlink_to(home / "lib", target_is_directory=True)
    (pkg / "alias.txt").symlink_to(pkg / "keep.txt")  # a link inside the package, ignored by its own name
    (pkg / ".gitignore").write_text("alias.txt\n")
    return pkg


def test_a_link_out_of_the_package_is_never_shipped(tmp_path, caplog):
    """Property: no shipped file resolves outside the package (the key behind notes.txt, the folder
    behind lib/); on today's main notes.txt was shipped with the key's content."""
    pkg = _package(tmp_path)
    with caplog.at_level(logging.WARNING, logger="fedray"):
        files = plugin_files(pkg)
    assert "fr_links/notes.txt" not in files and not any(k.startswith("fr_links/lib") for k in files)
    assert all(pkg.resolve() in p.resolve().parents for p in files.values())
    assert "a link (to" in caplog.text


def test_gitignore_applies_to_a_link_by_its_own_path(tmp_path):
    """alias.txt is listed in .gitignore; its target keep.txt is not: the link is not shipped (on
    today's main the ignore test resolved the link first and shipped it)."""
    files = plugin_files(_package(tmp_path))
    assert "fr_links/alias.txt" not in files and "fr_links/keep.txt" in files


def test_each_shipped_file_is_logged(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))
    pkg = _package(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="fedray"):
        staged = stage_plugin("fr_links", pkg, 10.0)
    for rel in ("fr_links/mod.py", "fr_links/keep.txt", "fr_links/__init__.py"):
        assert f"shipping {rel} (from " in caplog.text
    assert not (staged / "notes.txt").exists()


def test_a_link_inside_the_package_to_an_excluded_file_ships_nothing(tmp_path):
    """Links whose names pass every rule but whose targets are inside the package and excluded (.env,
    id_rsa, a gitignored file, data/): none ships, nor any other link (the review: 4 of 4 shipped the
    target's content)."""
    pkg = _package(tmp_path)
    (pkg / ".env").write_text("TOKEN=secret\n")
    (pkg / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (pkg / "private.csv").write_text("1,2\n")
    (pkg / ".gitignore").write_text("alias.txt\nprivate.csv\n")
    (pkg / "data").mkdir()
    (pkg / "data" / "rows.csv").write_text("3,4\n")
    for name, target in (("settings.py", ".env"), ("utils.py", "id_rsa"), ("table.txt", "private.csv"),
                         ("rows.txt", "data/rows.csv"), ("same.txt", "keep.txt")):
        (pkg / name).symlink_to(pkg / target)
    files = plugin_files(pkg)
    assert not any(p.is_symlink() for p in files.values())
    assert set(files) == {"fr_links/__init__.py", "fr_links/mod.py", "fr_links/keep.txt"}
