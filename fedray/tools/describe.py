"""``fedray describe NAME``: the parameters of an algorithm, a partition or federation, a
configuration section or a data set, with types, defaults, bounds and one-line meanings.

Algorithm parameters and configuration sections come from their pydantic models
(``Params`` and the sections of :mod:`fedray.api.config`; a field's meaning is its
``Field(description=...)``); partitions, federation builders and scenarios from
their signatures and the ``Parameters`` section of their numpydoc docstrings; the
generated ``blobs`` data set from :data:`fedray.data.federation.BLOBS_OPTIONS`.
Every parameter of every registered name has a meaning (a test holds this).
"""
from __future__ import annotations

import argparse
import difflib
import inspect
import re
import typing
from typing import Any, NamedTuple

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from fedray.api.config import ExperimentConfig
from fedray.core.errors import ConfigError
from fedray.core.plugins import entry_points
from fedray.core.registry import ALGORITHMS, available_algorithms, get_algorithm
from fedray.data import available_datasets, available_partitions
from fedray.data.datasets import IMAGE_OPTION_DEFAULTS, IMAGE_SETS, SCENARIOS, check_dataset_name
from fedray.data.federation import BLOBS_DEFAULTS, BLOBS_OPTIONS, available_federations
from fedray.data.partitions import FEDERATION_BUILDERS, PARTITIONS
from fedray.nn import MODEL_DESCRIPTIONS, available_models

#: Configuration sections that `describe` knows (the keys of ExperimentConfig), and ``config``:
#: the top level (seed, extra and one line per section).
SECTIONS = ("algorithm", "data", "federation", "runtime", "evaluation", "output", "faults", "privacy", "checkpoint")
TOP = "config"


class Row(NamedTuple):
    """One parameter: its dotted key, type, default, bounds and one-line meaning."""

    key: str
    type: str
    default: str
    bounds: str
    meaning: str


class Description(NamedTuple):
    """What ``describe`` knows of a name: a title, the thing's own one-line summary, its parameters."""

    title: str
    doc: str
    rows: list[Row]


def _type_name(ann: Any) -> str:
    """``Literal['a', 'b'] | list[float] | None`` -> ``'a' | 'b' | list[float] | None``."""
    if ann is type(None):
        return "None"
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is typing.Union or type(ann).__name__ == "UnionType":
        return " | ".join(_type_name(a) for a in args)
    if origin is not None and args:
        name = getattr(origin, "__name__", str(origin).replace("typing.", ""))
        inner = ", ".join("..." if a is Ellipsis else _type_name(a) for a in args)
        return f"{name}[{inner}]"
    if ann is Any:
        return "any"
    return getattr(ann, "__name__", None) or str(ann).replace("typing.", "")


def _bounds(field: Any) -> str:
    parts = []
    for m in getattr(field, "metadata", ()):
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("pattern", "matches")):
            v = getattr(m, attr, None)
            if v is not None:
                parts.append(f"{sym} {v}")
        if getattr(m, "allow_inf_nan", None) is False:
            parts.append("finite")
    return ", ".join(parts)


def _model_of(ann: Any) -> type | None:
    """The pydantic model inside ``ann`` (``Model`` or ``Model | None``), else None."""
    for a in (ann, *typing.get_args(ann)):
        if inspect.isclass(a) and issubclass(a, BaseModel):
            return a
    return None


def describe_model(model: type, prefix: str) -> list[Row]:
    """Rows of a pydantic model's fields (nested models, optional ones too, as dotted keys)."""
    rows = []
    for name, f in model.model_fields.items():
        default = "required" if f.default is PydanticUndefined and f.default_factory is None else (
            repr(f.default_factory()) if f.default_factory is not None else repr(f.default))
        sub = _model_of(f.annotation)
        if sub is not None:
            if f.default is None:  # an optional section: say what turns it on, then its keys
                rows.append(Row(f"{prefix}{name}", f"{sub.__name__} | None", "None", "", f.description or ""))
            rows += describe_model(sub, f"{prefix}{name}.")
            continue
        rows.append(Row(f"{prefix}{name}", _type_name(f.annotation), default, _bounds(f), f.description or ""))
    return rows


def doc_parameters(fn: Any) -> dict[str, str]:
    """Meanings from the ``Parameters`` section of a numpydoc docstring: ``{name: first sentence}``.

    ``a, b : float`` gives both names the same meaning; the meaning is the indented
    text under the entry, joined into one line.
    """
    lines = inspect.cleandoc(getattr(fn, "__doc__", None) or "").splitlines()
    out: dict[str, str] = {}
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "Parameters"
                     and i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"})
    except StopIteration:
        return out
    names: list[str] = []
    text: list[str] = []

    def flush() -> None:
        for n in names:
            out[n] = " ".join(text).strip()

    for ln in lines[start + 2:]:
        if ln and not ln[0].isspace():
            if set(ln.strip()) == {"-"}:  # the underline of the next section: the header was the last entry
                names = []
                break
            flush()
            head = ln.split(" : ")[0] if " : " in ln else ln
            if not re.fullmatch(r"[A-Za-z_][\w]*(\s*,\s*[A-Za-z_][\w]*)*", head.strip()):
                names, text = [], []
                break
            names, text = [n.strip() for n in head.split(",")], []
        elif ln.strip():
            text.append(ln.strip())
    flush()
    return {k: v for k, v in out.items() if v}


def _signature_rows(fn: Any, skip: int, prefix: str, hidden: tuple[str, ...] = ()) -> list[Row]:
    meanings = doc_parameters(fn)
    rows = []
    for i, (name, p) in enumerate(inspect.signature(fn).parameters.items()):
        if i < skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or name in hidden:
            continue
        default = "required" if p.default is p.empty else repr(p.default)
        ann = p.annotation if p.annotation is not p.empty else Any
        if isinstance(ann, str):  # postponed annotations: show them as written
            ann_text = ann
        else:
            ann_text = _type_name(ann)
        rows.append(Row(f"{prefix}{name}", ann_text, default, "", meanings.get(name, "")))
    return rows


def _first_line(doc: str | None) -> str:
    return (inspect.cleandoc(doc or "").splitlines() or [""])[0]


def format_description(d: Description) -> str:
    """The text table ``fedray describe`` prints."""
    out = [d.title]
    if d.doc:
        out.append("  " + d.doc.replace("``", "`"))
    if not d.rows:
        out.append("  (no parameters)")
        return "\n".join(out)
    heads = ("parameter", "type", "default", "bounds")
    widths = [min(max(len(h), *(len(r[i]) for r in d.rows)), 44) for i, h in enumerate(heads)]

    def cell(text: str, w: int) -> str:
        return (text if len(text) <= w else text[: w - 3] + "...").ljust(w)

    out.append("  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths)) + "  meaning")
    for r in d.rows:
        out.append("  " + "  ".join(cell(str(c), w) for c, w in zip(r[:4], widths)) + "  "
                   + r.meaning.replace("``", "`"))
    return "\n".join(out)


def _scenarios() -> dict[str, Any]:
    return SCENARIOS.entries()


def _describe_config(name: str) -> Description | None:
    """The top level (``config``) or a configuration section, else None."""
    if name == TOP:
        rows = []
        for key, f in ExperimentConfig.model_fields.items():
            sub = _model_of(f.annotation)
            if sub is not None:
                rows.append(Row(key, "section", "", "", f"{f.description} (`fedray describe {key}`)"))
            else:
                rows.append(Row(key, _type_name(f.annotation), repr(f.default_factory() if f.default_factory
                                                                    else f.default), _bounds(f), f.description or ""))
        return Description("configuration (top level)", _first_line(ExperimentConfig.__doc__), rows)
    if name in SECTIONS:
        model = _model_of(ExperimentConfig.model_fields[name].annotation)
        return Description(f"configuration section {name!r}", _first_line(model.__doc__),
                           describe_model(model, f"{name}."))
    return None


def _describe_image_set(name: str) -> Description | None:
    """An image data set read from its authors' files (``cifar10``, ``emnist:SPLIT``, ``images:FOLDER``...)."""
    kind, _, rest = name.partition(":")
    image_set = IMAGE_SETS.get(kind)
    if image_set is None or not image_set.files:
        return None
    if rest and rest != image_set.arg:
        check_dataset_name(name)  # a bad split: one line naming the choices
    doc = (f"{image_set.summary}\n  files under data.data_dir: {image_set.files}\n  distributed by: "
           f"{image_set.source} (fedray reads the files; it never downloads them)")
    defaults = {**IMAGE_OPTION_DEFAULTS, **image_set.defaults}
    rows = [Row(f"data.options.{k}", type(defaults.get(k, "")).__name__,
                repr(defaults.get(k)), "", meaning) for k, meaning in image_set.options.items()]
    return Description(f"data set {name!r} (read from files under data.data_dir)", doc, rows)


def _describe_data_set(name: str, datasets: list[str]) -> Description | None:
    """A scenario, a data set named by kind (benchmark, csv, parquet) or a listed data set other than blobs.

    Raises ConfigError for an unknown data set of a known kind; None when ``name`` is no data set.
    """
    scenarios = _scenarios()
    if name.startswith("scenario:") and name[len("scenario:"):] in scenarios:
        fn = scenarios[name[len("scenario:"):]]
        return Description(f"data set {name!r} (generated from the run's seed)", _first_line(fn.__doc__),
                           _signature_rows(fn, 0, "data.options.", hidden=("seed",)))
    image_set = _describe_image_set(name)
    if image_set is not None:
        return image_set
    kind, _, rest = name.partition(":")
    if kind in ("sklearn", "scenario", "benchmark", "csv", "parquet") and name not in datasets:
        if kind == "benchmark" and rest:
            return Description(f"data set {name!r} (a benchmark file under data.data_dir)", "no options of its "
                               "own; `fedray describe PARTITION` for how it is split", [])
        if kind in ("csv", "parquet") and rest:
            return Description(f"data set {name!r} (a table read by the clients)", "no options of its own; "
                               "data.feature_columns, data.label_column and data.client_column pick its columns "
                               "(`fedray describe data`)", [])
        choices = [d for d in datasets if d.startswith(f"{kind}:")]
        raise ConfigError(f"describe: unknown data set {name[:80]!r}; choose one of {', '.join(choices)}")
    if name in datasets and name != "blobs":
        return Description(f"data set {name!r}", "no options of its own; see `fedray describe data` and "
                           "`fedray describe PARTITION` for how it is split", [])
    return None


def _describe_component(name: str, algos: dict[str, Any]) -> Description | None:
    """An algorithm, a model, a federation builder, a partition or the ``blobs`` data set, else None."""
    if name in algos or ALGORITHMS.builtin(name) or ":" in name or name in entry_points():
        cls = get_algorithm(name)
        title = f"algorithm {name!r}" + (f" ({cls.__module__}:{cls.__qualname__})" if ":" not in name else "")
        doc = cls.description or _first_line(cls.__doc__)
        return Description(title, doc, describe_model(cls.Params, "algorithm.params."))
    if name in MODEL_DESCRIPTIONS:
        return Description(f"model {name!r} (algorithm.params.model of supervised methods)", MODEL_DESCRIPTIONS[name],
                           [])
    if name in available_federations():
        fn = FEDERATION_BUILDERS[name]
        return Description(f"federation {name!r} (data.partition.name)", _first_line(fn.__doc__),
                           _signature_rows(fn, 4, "data.partition."))
    if name in PARTITIONS:
        fn = PARTITIONS[name]
        return Description(f"partition {name!r} (data.partition.name)", _first_line(fn.__doc__),
                           _signature_rows(fn, 4, "data.partition.", hidden=("groups",)))
    if name == "blobs":
        rows = [Row(f"data.options.{k}", type(v).__name__ if v is not None else "list[float] | None", repr(v), "",
                    BLOBS_OPTIONS[k]) for k, v in BLOBS_DEFAULTS.items()]
        return Description("data set 'blobs' (generated inside each client)",
                           "Gaussian blobs drawn by each client from its own seeded stream", rows)
    return None


def _unknown_name(name: str, algos: dict[str, Any], datasets: list[str]) -> ConfigError:
    """The error for a name ``describe`` does not know, with the nearest known names."""
    known = sorted(set(algos) | set(entry_points()) | set(available_partitions()) | set(SECTIONS) | set(datasets)
                   | {TOP} | set(MODEL_DESCRIPTIONS))
    near = difflib.get_close_matches(name[:100], known, n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
    shown = name if len(name) <= 60 else f"{name[:60]}... ({len(name)} characters)"
    return ConfigError(f"describe: unknown name {shown!r}{hint}; `fedray list` shows algorithms, partitions and data "
                       f"sets; sections: {TOP}, {', '.join(SECTIONS)}")


def description(name: str) -> Description:
    """Title, summary and parameter rows of ``name`` (raises ConfigError with near names if unknown)."""
    found = _describe_config(name)
    if found is not None:
        return found
    algos = available_algorithms()
    datasets = available_datasets()
    found = _describe_data_set(name, datasets)
    if found is None:
        found = _describe_component(name, algos)
    if found is None:
        raise _unknown_name(name, algos, datasets)
    return found


def describe(name: str) -> str:
    """The text ``fedray describe NAME`` prints (raises ConfigError with near names if unknown)."""
    return format_description(description(name))


def describable_names() -> list[str]:
    """Every name ``describe`` knows without a file or a reference: algorithms, partitions and
    federations, configuration sections, data sets (those without a placeholder) and models."""
    return [*available_algorithms(), *available_partitions(), TOP, *SECTIONS,
            *(d for d in available_datasets() if "NAME" not in d and "PATH" not in d), *available_models()]


def cmd_describe(args: argparse.Namespace) -> int:
    print(describe(args.name))
    return 0


def add_cli(sub: Any) -> None:
    d = sub.add_parser("describe", help="parameters of an algorithm, partition, data set or config section")
    d.add_argument("name", help="e.g. kmeans, rotated, blobs, runtime, config, package.module:ClassName")
    d.set_defaults(func=cmd_describe)
