"""Command line: ``fedray run | quickstart | list`` (and commands other modules add).

Errors a user can cause (:class:`~fedray.core.errors.FedrayError`) print one clear
message and exit with status 2, without a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from fedray.api.checkpoint import load
from fedray.api.config import make_config
from fedray.api.progress import showing
from fedray.api.run import resume, run
from fedray.core.errors import ConfigError, FedrayError
from fedray.core.extras import block_absent_optionals
from fedray.core.plugins import ENTRY_POINT_GROUP, entry_points
from fedray.core.registry import available_algorithms
from fedray.data import available_datasets, available_partitions
from fedray.data.datasets import IMAGE_SETS
from fedray.data.federation import available_federations
from fedray.nn import available_models

log = logging.getLogger("fedray.tools.cli")

# Modules that add sub-commands with ``add_cli(subparsers)``; each is optional.
_PLUGINS = (
    "fedray.analysis.kselect",
    "fedray.analysis.sweep",
    "fedray.tools.cluster",
    "fedray.api.checkpoint",
    "fedray.tools.describe",
)

QUICKSTART = {
    "seed": 0,
    "algorithm": {"name": "federated-fcm", "params": {"n_clusters": 3}},
    "data": {"dataset": "sklearn:iris", "scale": "standard", "partition": {"name": "dirichlet", "alpha": 1.0}},
    "federation": {"n_clients": 8, "fraction": 1.0},
    "runtime": {"backend": "ray", "num_cpus": 2},
    "evaluation": {"central_baseline": True},
}


def _default_out(name: str) -> Path:
    """``fedray-output/NAME-TIMESTAMP``, numbered ``-2``, ``-3``, ... when a run of the same second has it."""
    base = Path("fedray-output") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def cmd_run(args: argparse.Namespace) -> int:
    if getattr(args, "resume", None):
        _check_resume_config(args)
        result = resume(args.resume, progress=not args.quiet, output=args.out)
    else:
        cfg = make_config(args.config, overrides=args.set or [])
        if args.central_baseline:
            cfg = make_config(cfg, overrides=["evaluation.central_baseline=true"])
        if args.overwrite:
            cfg = make_config(cfg, overrides=["output.overwrite=true"])
        out = args.out or cfg.output.directory or _default_out(cfg.algorithm.name)
        result = run(cfg, output=out, progress=None if not args.quiet else False)
    print(result.table(color=sys.stdout.isatty()))
    print(f"outputs: {result.output_dir}")
    return 0


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _check_resume_config(args: argparse.Namespace) -> None:
    """``--resume`` continues with the configuration saved in the checkpoint: a configuration or
    ``--set`` given with it must be that one (output and checkpoint folders aside), else one line."""
    if args.overwrite:
        raise ConfigError("--overwrite cannot be given with --resume: a resumed run writes into its own folder "
                          "(or a new one given with --out) and deletes nothing")
    if not (args.config or args.set or args.central_baseline):
        return
    saved = load(args.resume)["config"]
    given = make_config(args.config or saved, overrides=args.set or []).to_dict()  # --set alone: on the saved one
    if args.central_baseline:
        given["evaluation"]["central_baseline"] = True
    if given["federation"].get("rounds") is None:  # the saved one holds the round cap the run had
        given["federation"]["rounds"] = saved["federation"].get("rounds")
    a, b = _flat(saved), _flat(given)
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and not k.startswith(("output.", "checkpoint.")))
    if differ:
        shown = ", ".join(f"{k} ({a.get(k)!r} in the checkpoint, {b.get(k)!r} given)" for k in differ[:3])
        raise ConfigError(f"--resume continues the run with the configuration saved in its checkpoint; the one "
                          f"given differs in {len(differ)} key(s): {shown}; drop it, or start a new run")


def cmd_quickstart(args: argparse.Namespace) -> int:
    print("fedray quickstart: federated fuzzy c-means on scikit-learn's iris, 8 clients with label skew, on Ray",
          flush=True)
    cfg = make_config(QUICKSTART, overrides=args.set or [])
    out = args.out or Path("fedray-output") / "quickstart"
    if args.overwrite or not args.out:  # the default folder is the quickstart's own: rerunning replaces it
        cfg = make_config(cfg, overrides=["output.overwrite=true"])
    result = run(cfg, output=out, progress=None if not args.quiet else False)
    print(result.table(color=sys.stdout.isatty()))
    print(f"outputs: {result.output_dir} (summary.json, rounds.parquet, clients.parquet, model.npz, plots/)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    print("algorithms:")
    for name, cls in available_algorithms().items():
        print(f"  {name:<16} {cls.description}")
    installed = entry_points()
    print(f"plug-ins (entry-point group {ENTRY_POINT_GROUP}; or any package.module:ClassName):")
    if not installed:
        print("  (none installed)")
    for name, ep in sorted(installed.items()):
        print(f"  {name:<16} {ep.value}")
    print("datasets (those read from files: the files under data.data_dir, and where their authors distribute them):")
    for d in available_datasets():
        print(f"  {d}")
        image_set = IMAGE_SETS.get(d.partition(":")[0])
        if image_set is not None and image_set.files:
            print(f"      files: {image_set.files}\n      from:  {image_set.source}")

    builders = set(available_federations())
    print("partitions (data.partition.name; * builds a federation with hidden groups):")
    for p in available_partitions():
        print(f"  {p}{' *' if p in builders else ''}")
    print("models (algorithm.params.model of supervised methods; or package.module:function):")
    print("  " + ", ".join(available_models()))
    print("`fedray describe NAME` shows the parameters of any of these.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedray", description="Federated clustering and clustered FL simulated on Ray")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run an experiment from a YAML config")
    r.add_argument("config", nargs="?", help="YAML config (optional; defaults apply)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="override, e.g. federation.n_clients=100")
    r.add_argument("--out", help="output folder (default: fedray-output/NAME-TIMESTAMP)")
    r.add_argument("--central-baseline", action="store_true", help="also run the central algorithm on the union")
    r.add_argument("--resume", metavar="DIR", help="continue an interrupted run from its output folder")
    r.add_argument("--overwrite", action="store_true", help="replace the contents of a non-empty output folder")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_run)

    q = sub.add_parser("quickstart", help="run the embedded example (no files needed)")
    q.add_argument("--set", action="append", metavar="KEY=VALUE")
    q.add_argument("--out", help="output folder (default: fedray-output/quickstart, replaced on each run)")
    q.add_argument("--overwrite", action="store_true", help="replace the contents of a non-empty --out folder")
    q.add_argument("-q", "--quiet", action="store_true")
    q.set_defaults(func=cmd_quickstart)

    lst = sub.add_parser("list", help="list algorithms, datasets and partitions")
    lst.set_defaults(func=cmd_list)

    for mod in _PLUGINS:
        if importlib.util.find_spec(mod) is not None:
            m = importlib.import_module(mod)
            if hasattr(m, "add_cli"):
                m.add_cli(sub)
    for command in sub.choices.values():  # `fedray run -v ...` as well as `fedray -v run ...`
        try:
            command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                                 help="more logging (-vv for debug)")
        except argparse.ArgumentError:  # the command has a -v of its own
            pass
        try:  # every command shows progress for its long steps (Ray start-up included); -q silences it
            command.add_argument("-q", "--quiet", action="store_true", help="no progress lines or bar")
        except argparse.ArgumentError:
            pass
    return p


def _plugins_from_current_folder() -> None:
    """Let ``package.module:Name`` plug-ins be found in the current folder, after every library.

    The current folder goes last on ``sys.path`` (where ``python -c`` / ``python -m`` put it
    first), so a ``matplotlib.py`` or ``numpy.py`` lying there never shadows the library; an optional
    library that is not installed (``dp_accounting``, ...) is marked absent first, never imported from there.
    """
    cwd = os.getcwd()
    here = {"", ".", cwd}
    sys.path[:] = [p for p in sys.path if p not in here]
    block_absent_optionals()  # an optional library that is not installed is not looked for in the folder
    sys.path.append(cwd)


def main(argv: list[str] | None = None) -> int:
    _plugins_from_current_folder()
    parser = build_parser()
    args = parser.parse_args(argv)
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]  # -v: progress notes, -vv: debug
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # warnings in one line, without the source path and line of the library

        def _show(message: Any, category: type, filename: str, lineno: int, file: Any = None,
                  line: Any = None) -> None:
            print(f"fedray: {category.__name__}: {message}", file=sys.stderr)

        warnings.showwarning = _show
    if not args.verbose:  # Ray's banners (e.g. that token authentication is on) only with -v
        for name in ("ray._private.authentication.authentication_token_setup", "ray.util.client"):
            logging.getLogger(name).setLevel(logging.ERROR)
    if not getattr(args, "quiet", False):  # progress lines where no bar can be drawn (pipes, CI logs)
        progress = logging.getLogger("fedray.api.progress")
        progress.setLevel(min(level, logging.INFO))
        if not progress.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            progress.addHandler(handler)
            progress.propagate = False
    try:
        with showing(False if getattr(args, "quiet", False) else None):
            return int(args.func(args) or 0)
    except FedrayError as exc:
        if args.verbose and (exc.__cause__ is not None or args.verbose > 1):  # e.g. a plug-in's own error
            log.info("traceback", exc_info=True)
        print(f"fedray: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedray: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - a defect or an unexpected environment: one line unless -v
        if args.verbose:
            raise
        text = " ".join(str(exc).split())[:300]
        print(f"fedray: internal error: {type(exc).__name__}: {text} (run with -v for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
