"""``fedray describe NAME``: the parameters of an algorithm, a partition or federation, a
configuration section or a data set, with types, defaults, bounds and meanings.

Algorithm parameters and configuration sections come from their pydantic models
(``Params`` and the sections of :mod:`fedray.config`); partitions and federation
builders from their signatures and docstrings; data sets from their options.
"""
from __future__ import annotations

import argparse
import inspect
from typing import Any

from fedray.errors import ConfigError

#: Configuration sections that `describe` knows (the keys of ExperimentConfig).
SECTIONS = ("data", "federation", "runtime", "evaluation", "output", "faults", "privacy", "checkpoint")


def _type_name(ann: Any) -> str:
    text = getattr(ann, "__name__", None) if not getattr(ann, "__args__", None) else None
    text = text or str(ann).replace("typing.", "")
    return text.replace("NoneType", "None")


def _bounds(field: Any) -> str:
    parts = []
    for m in getattr(field, "metadata", ()):
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("pattern", "matches")):
            v = getattr(m, attr, None)
            if v is not None:
                parts.append(f"{sym} {v}")
    return ", ".join(parts)


def describe_model(model: type, prefix: str) -> list[tuple[str, str, str, str, str]]:
    """Rows (key, type, default, bounds, meaning) of a pydantic model's fields."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    rows = []
    for name, f in model.model_fields.items():
        default = "required" if f.default is PydanticUndefined and f.default_factory is None else (
            repr(f.default_factory()) if f.default_factory is not None else repr(f.default))
        ann = f.annotation
        if inspect.isclass(ann) and issubclass(ann, BaseModel):
            rows += describe_model(ann, f"{prefix}{name}.")
            continue
        rows.append((f"{prefix}{name}", _type_name(ann), default, _bounds(f), f.description or ""))
    return rows


def _table(title: str, rows: list[tuple[str, ...]], doc: str = "") -> str:
    out = [title]
    if doc:
        out.append(f"  {doc}")
    if not rows:
        out.append("  (no parameters)")
        return "\n".join(out)
    heads = ("parameter", "type", "default", "bounds", "meaning")
    widths = [min(max(len(h), *(len(r[i]) for r in rows)), 40) for i, h in enumerate(heads[:4])]
    out.append("  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths)) + "  meaning")
    for r in rows:
        out.append("  " + "  ".join(str(c)[:w].ljust(w) for c, w in zip(r, widths)) + f"  {r[4]}")
    return "\n".join(out)


def _first_line(doc: str | None) -> str:
    return (inspect.cleandoc(doc or "").splitlines() or [""])[0]


def _signature_rows(fn: Any, skip: int, prefix: str) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for i, (name, p) in enumerate(inspect.signature(fn).parameters.items()):
        if i < skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        default = "required" if p.default is p.empty else repr(p.default)
        ann = p.annotation if p.annotation is not p.empty else ""
        rows.append((f"{prefix}{name}", str(ann).replace("typing.", ""), default, "", ""))
    return rows


def describe(name: str) -> str:
    """The text ``fedray describe NAME`` prints (raises ConfigError with near names if unknown)."""
    import difflib

    from fedray.algorithm import _BUILTIN_MODULES, available_algorithms, get_algorithm
    from fedray.config import ExperimentConfig
    from fedray.data import available_datasets, available_partitions
    from fedray.data.federation import BLOBS_DEFAULTS, _BUILDERS, available_federations
    from fedray.data.partitions import _PARTITIONS
    from fedray.plugins import entry_points

    if name in SECTIONS:
        model = ExperimentConfig.model_fields[name].annotation
        return _table(f"configuration section {name!r}", describe_model(model, f"{name}."), _first_line(model.__doc__))
    algos = available_algorithms()
    datasets = available_datasets()
    if name in datasets and name != "blobs":
        return _table(f"data set {name!r}", [], "no options; see `fedray describe data` and data.partition")
    if name in algos or name in _BUILTIN_MODULES or ":" in name or name in entry_points():
        cls = get_algorithm(name)
        title = f"algorithm {name!r}" + (f" ({cls.__module__}:{cls.__qualname__})" if ":" not in name else "")
        doc = cls.description or _first_line(cls.__doc__)
        return _table(title, describe_model(cls.Params, "algorithm.params."), doc)
    if name in available_federations():
        fn = _BUILDERS[name]
        return _table(f"federation {name!r} (data.partition.name)", _signature_rows(fn, 4, "data.partition."),
                      _first_line(fn.__doc__))
    if name in _PARTITIONS:
        fn = _PARTITIONS[name]
        return _table(f"partition {name!r} (data.partition.name)", _signature_rows(fn, 4, "data.partition."),
                      _first_line(fn.__doc__))
    if name == "blobs":
        rows = [(f"data.options.{k}", type(v).__name__, repr(v), "", "") for k, v in BLOBS_DEFAULTS.items()]
        return _table("data set 'blobs' (generated inside each client)", rows,
                      "Gaussian blobs drawn by each client from its own seeded stream")
    known = sorted(set(algos) | set(entry_points()) | set(available_partitions()) | set(SECTIONS) | set(datasets))
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
    raise ConfigError(f"describe: unknown name {name!r}{hint}; `fedray list` shows algorithms, partitions and data "
                      f"sets; sections: {', '.join(SECTIONS)}")


def cmd_describe(args: argparse.Namespace) -> int:
    print(describe(args.name))
    return 0


def add_cli(sub: Any) -> None:
    d = sub.add_parser("describe", help="parameters of an algorithm, partition, data set or config section")
    d.add_argument("name", help="e.g. kmeans, rotated, blobs, runtime, package.module:ClassName")
    d.set_defaults(func=cmd_describe)
