"""Reading a configuration file: YAML text holding a mapping, with one-line errors for every way it can
be unusable, and a bound on what a small file may expand to (:func:`load_yaml`, :func:`parse_yaml`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fedray.core.errors import ConfigError

#: Largest config file read, and most nodes its YAML may expand to (aliases counted each time
#: they are used), so that an alias "bomb" of a few hundred bytes fails at once.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_NODES = 100_000


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file (one-line errors for every way it can be unusable)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} is not a file (a directory?)")
    size = p.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {str(p)!r} has {size} bytes; a config is at most {MAX_CONFIG_BYTES}")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(p)!r} cannot be read: {exc.strerror}") from None
    return parse_yaml(text, f"config file {str(p)!r}")


def parse_yaml(text: str, what: str) -> dict[str, Any]:
    """Parse YAML text holding a mapping, refusing documents that expand beyond MAX_CONFIG_NODES."""
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()
        raise ConfigError(f"{what} is not valid YAML: {' '.join(ln.strip() for ln in first[:3])}") from None
    if _expanded_nodes(raw, MAX_CONFIG_NODES) > MAX_CONFIG_NODES:
        raise ConfigError(f"{what} expands to more than {MAX_CONFIG_NODES} values (nested YAML aliases?); "
                          "refusing to read it")
    if not isinstance(raw, dict):
        raise ConfigError(f"{what} must hold a mapping at the top level")
    return raw


def _expanded_nodes(obj: Any, limit: int) -> int:
    """Nodes of ``obj`` counting shared sub-trees each time they appear; stops past ``limit``."""
    count = 0
    stack = [obj]
    while stack:
        cur = stack.pop()
        count += 1
        if count > limit:
            return count
        if isinstance(cur, dict):
            stack.extend(cur.keys())
            stack.extend(cur.values())
        elif isinstance(cur, (list, tuple)):
            stack.extend(cur)
    return count
