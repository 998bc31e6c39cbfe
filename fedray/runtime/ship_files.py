"""Which files of a plug-in reach the Ray workers: its Python package, never secrets or data.

A plug-in named by ``algorithm.name: "pkg.mod:Class"`` is shipped as a copy of package ``pkg``
that holds only

* the folders of the package (those with an ``__init__.py``), not other folders beside or
  inside it (``data/``, ``notebooks/``);
* files that no ``.gitignore`` ignores (those of the package's folders and of the folders
  above it, up to the repository's root);
* no link at all (a link to a file is left out with a warning, whatever its target, inside the
  package or not: its name could pass every rule while its target is ``.env``, a key, a gitignored
  file or ``data/``; links to folders are not followed);
* no dotfile or dot-folder (``.env``, ``.git/``, ``.ssh/``) and no key file (``id_rsa``,
  ``*.pem``, ``*.key``, ...);

and the copy must be smaller than ``runtime.ship_max_mb``, else the run stops with one line
naming the largest files. :func:`plugin_files` selects; :mod:`fedray.runtime.shipping` stages
the copy and logs what was shipped and how large it was.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from fedray.core.errors import ConfigError

log = logging.getLogger(__name__)

_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")
#: Names of private keys and credential files (never shipped, whatever the folder).
_KEY_NAME = re.compile(r"id_(rsa|dsa|ecdsa|ed25519)(_sk)?(\.pub)?|authorized_keys|known_hosts|credentials"
                       r"|.*\.(pem|key|p12|pfx|jks|keystore|ppk|gpg|asc|kdbx|der|crt)", re.IGNORECASE)


def is_secret(name: str) -> bool:
    """Dotfiles and key files: never shipped."""
    return name.startswith(".") or bool(_KEY_NAME.fullmatch(name))


# --- .gitignore ---------------------------------------------------------------------------
def _glob_to_regex(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = glob.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                out.append("[" + glob[i + 1:j].replace("!", "^", 1) + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


class GitIgnore:
    """The patterns of the ``.gitignore`` files that apply to a folder (a subset of git's rules:
    globs, ``**``, anchors, ``dir/`` and ``!`` negation)."""

    def __init__(self) -> None:
        self.rules: list[tuple[Path, re.Pattern[str], bool, bool, bool]] = []

    def add_file(self, gitignore: Path) -> None:
        try:
            lines = gitignore.read_text(errors="replace").splitlines()
        except OSError:
            return
        base = gitignore.parent.resolve()
        for line in lines:
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            line = line[1:] if negate else line
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            self.rules.append((base, re.compile(_glob_to_regex(line.lstrip("/"))), negate, dir_only, anchored))

    def ignored(self, path: Path, is_dir: bool) -> bool:
        # the entry's own path (its folder resolved, never the entry: a link is judged by its name)
        path = path.parent.resolve() / path.name
        result = False
        for base, rx, negate, dir_only, anchored in self.rules:
            try:
                rel = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if dir_only and not is_dir:
                continue
            if rx.fullmatch(rel if anchored else path.name):
                result = not negate
        return result


def _gitignores_above(folder: Path) -> GitIgnore:
    """The ``.gitignore`` files of ``folder`` and its parents, up to the repository's root."""
    ignore = GitIgnore()
    chain = []
    for d in [folder.resolve(), *folder.resolve().parents]:
        chain.append(d)
        if (d / ".git").exists():
            break
    else:
        chain = chain[:1]  # not in a repository: only the package's own .gitignore files
    for d in reversed(chain):
        ignore.add_file(d / ".gitignore")
    return ignore


# --- selection ------------------------------------------------------------------------------
def plugin_files(path: Path) -> dict[str, Path]:
    """What is shipped of plug-in ``path`` (a package folder or a ``.py`` file): relative name -> file."""
    if path.is_file():
        return {path.name: path}
    ignore = _gitignores_above(path.parent)
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(path):  # links to folders are not followed
        here = Path(dirpath)
        ignore.add_file(here / ".gitignore")
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not is_secret(d)
                             and not (here / d).is_symlink()
                             and (here / d / "__init__.py").is_file() and not ignore.ignored(here / d, True))
        for name in sorted(filenames):
            if name.endswith(_SKIP_SUFFIXES) or is_secret(name) or ignore.ignored(here / name, False):
                continue
            if (here / name).is_symlink():  # its target would ship under a name that passed the rules
                log.warning("not shipping %s: a link (to %s); plug-in packages ship plain files only", here / name,
                            (here / name).resolve())
                continue
            files[(Path(path.name) / here.relative_to(path) / name).as_posix()] = here / name
    return files


def check_size(name: str, files: dict[str, Path], max_mb: float) -> int:
    """Total bytes of ``files``; raises a one-line error naming the largest ones above ``max_mb``."""
    sizes = {rel: p.stat().st_size for rel, p in files.items()}
    total = sum(sizes.values())
    if total > max_mb * 1e6:
        largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        listed = ", ".join(f"{rel} ({size / 1e6:.1f} MB)" for rel, size in largest)
        raise ConfigError(f"runtime.ship_max_mb={max_mb:g}: plug-in {name!r} would ship {total / 1e6:.1f} MB to the "
                          f"Ray workers; largest files: {listed}; keep data out of the package (or list it in "
                          ".gitignore), or raise runtime.ship_max_mb")
    return total
