"""The commands of docs/reproductions.md's "papers' other data sets" section are accepted as written.

Each command (reduced and full) is parsed by its own script's argument parser (or, for ``fedray
run``, its ``--set`` keys by ``make_config``); the configuration the script would give each session
validates with ``make_config``, and every method it would run takes its parameters. No data is
read: a wrong option name, a misspelt flag, a bad JSON option or an invalid value fails here.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import re
import shlex
from pathlib import Path

import pytest

from fedray.api.config import make_config
from fedray.core.registry import get_algorithm, make_params
from fedray.data.datasets import IMAGE_SETS
from fedray.data.partitions import FEDERATION_BUILDERS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "notes" / "lab-notebook-2026.md"
SECTION = "## The papers' other data sets"
COMMAND = re.compile(r"`((?:python experiments/|fedray run )[^`]+)`")


#: scripts that moved into the lab (the archived notebook's commands keep their old paths), imported as modules
MOVED = {"flacc_table": "reproductions.mehta2023.table", "flacc_femnist": "reproductions.mehta2023.femnist",
         "fedcref_tables": "reproductions.fedcref2025.tables"}


def _module(name: str):
    if name in MOVED:
        return importlib.import_module(MOVED[name])
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def section_commands(text: str) -> list[str]:
    """The commands of the section (up to the next ``## `` heading)."""
    body = text.split(SECTION, 1)[1]
    body = body.split("\n## ", 1)[0]
    return COMMAND.findall(body)


COMMANDS = section_commands(DOC.read_text())


def test_the_section_holds_a_reduced_and_a_full_command_for_each_set():
    """Every set of the section has its commands (the extraction finds them, so the checks below run)."""
    scripts = [c.split()[1] for c in COMMANDS]
    assert scripts.count("experiments/flacc_table.py") == 4
    assert scripts.count("experiments/fedcref_tables.py") == 10
    for dataset in ("cifar10", "emnist:byclass", "emnist:digits", "kmnist", "k49", "fashion-mnist"):
        assert sum(f"--dataset {dataset} " in c for c in COMMANDS) >= 2, dataset


def _check_data(cfg) -> None:
    """The partition's options are its builder's, and data.options are the image set's."""
    part = dict(cfg.data.partition)
    builder = FEDERATION_BUILDERS[part.pop("name")]
    allowed = set(inspect.signature(builder).parameters) - {"ds", "data", "n_clients", "seed"}
    assert not set(part) - allowed, f"data.partition: unknown {sorted(set(part) - allowed)}"
    options = set(cfg.data.options or {})
    known = set(IMAGE_SETS[cfg.data.dataset.split(":")[0]].options)
    assert not options - known, f"data.options: unknown {sorted(options - known)}"


def _check_flacc_table(argv: list[str]) -> None:
    ft = _module("flacc_table")
    args = ft.parse_args(argv)
    for fed in args.federations:
        cfg = make_config(ft.session_config(args, fed, args.seeds[0]))
        assert cfg.data.dataset == args.dataset and cfg.federation.n_clients == args.n_clients
        _check_data(cfg)
        for method in args.methods:
            for _, extra in ft.variants(method, fed, args.quick, args.n_merge, args.plugin_params, args.flhc_d,
                                        args.flhc_normalize, args.ifca_k, args.baseline_weighted):
                make_params(get_algorithm(method), {**ft.train_params(args), **extra})


def _check_fedcref_tables(argv: list[str]) -> None:
    fc = _module("fedcref_tables")
    args = fc.parse_args(argv)
    base = {"preset": args.preset, **json.loads(args.params)}
    for table in args.tables:
        settings = ["default"] if table == "main" else (args.settings or fc.SWEEPS[table][1])
        for setting in settings:
            n_clients, overlap, params = fc.setting_values(args, table, setting, base)
            cfg = make_config(**fc.session_config(args.dataset, args.data_dir, n_clients, args.samples_per_class,
                                                  args.classes, overlap, args.seeds[0], params,
                                                  json.loads(args.data_options)))
            _check_data(cfg)
            for variant in args.variants or list(fc.VARIANTS):
                make_params(get_algorithm("fedcref"), {**params, **fc.VARIANTS[variant]})


def _check_flacc_femnist(argv: list[str]) -> None:
    """Its flags parse (the FEMNIST writers' federation is checked with FEMNIST's own section)."""
    ff = _module("flacc_femnist")
    args = ff.parse_args(argv)
    train = {"epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size, "eval_every": args.eval_every,
             "model": args.model}
    for method in args.methods:
        make_params(get_algorithm(method), {**train, **ff.extra(method, args)})


def _check_fedray_run(argv: list[str]) -> None:
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    make_config(None, overrides=sets)


@pytest.mark.parametrize("command", COMMANDS, ids=[f"cmd{i}" for i in range(len(COMMANDS))])
def test_each_command_of_the_section_is_accepted(command, tmp_path):
    """The command's flags parse, its sessions' configurations validate and its methods take their
    parameters (DATA stands for the data folder; nothing is read from it)."""
    argv = shlex.split(command.replace("DATA", str(tmp_path)))
    if argv[:2] == ["fedray", "run"]:
        _check_fedray_run(argv[2:])
        return
    script = Path(argv[1]).stem
    checks = {"flacc_table": _check_flacc_table, "fedcref_tables": _check_fedcref_tables,
              "flacc_femnist": _check_flacc_femnist}
    assert script in checks, f"no check for {argv[1]}"
    checks[script](argv[2:])
