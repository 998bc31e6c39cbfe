"""One experiment from a configuration (:func:`run`), and continuing an interrupted one (:func:`resume`)."""
from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fedray.api.checkpoint import load
from fedray.api.config import make_config
from fedray.api.outputs import MARKER, prepare, release, run_id_of
from fedray.api.progress import showing
from fedray.api.results import Result, peak_memory_mb
from fedray.api.session import Session
from fedray.api.tracking import Trackers
from fedray.core.errors import ConfigError
from fedray.core.registry import algorithm_reference, get_algorithm, make_params

log = logging.getLogger(__name__)


def run(config: Any = None, *, overrides: list[str] | dict[str, Any] | None = None, output: str | Path | None = None,
        progress: bool | None = None, central_baseline: bool | None = None,
        on_round: Sequence[Callable[[dict[str, Any]], None]] = (), **kwargs: Any) -> Result:
    """Run one experiment and return its :class:`~fedray.api.results.Result`.

    Parameters
    ----------
    config : ExperimentConfig, mapping or path to a YAML file, optional
    overrides : ``["federation.n_clients=100", ...]`` or a mapping of dotted keys
    output : folder for ``summary.json``, ``rounds.parquet``, ... (default: ``output.directory``)
    progress : show progress, Ray start-up included (True), nothing (False), or by default a bar on a
        terminal or in a notebook and lines on standard error (or fedray's logger) otherwise
    central_baseline : also run the central algorithm on the union from the same start
    on_round : functions called with each round's history row (after its checkpoint, when one is due)
    **kwargs : configuration sections or dotted keys, e.g. ``algorithm={"name": "kmeans"}``

    Examples
    --------
    >>> import fedray
    >>> res = fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 3}},
    ...                  data={"dataset": "sklearn:iris"}, runtime={"backend": "local"})  # doctest: +SKIP
    """
    cfg = make_config(config, overrides=overrides, **kwargs)
    out = cfg.output.directory if output is None else output
    Trackers(cfg, out).check()  # the trackers' options and MLflow's store, before anything is written
    existed = isinstance(out, (str, os.PathLike)) and bool(out) and Path(out).exists()  # prepare checks the type
    if out:  # before Ray starts and before any data is read: claims the folder for this run
        prepare(out, cfg.output.overwrite)
    ok = False
    try:
        with showing(progress), Session(cfg) as session:  # start-up shows progress too, or nothing with False
            result = session.run(output=output, progress=progress, central_baseline=central_baseline,
                                 on_round=on_round)
            result.peak_memory_mb = peak_memory_mb()
            ok = True
            return result
    finally:
        if out:  # also when the session could not start: the folder is free again
            release(out)
            if not ok and not existed:
                _drop_if_only_marker(Path(out))


def _drop_if_only_marker(folder: Path) -> None:
    """A run that failed before writing anything leaves no folder holding only fedray's marker."""
    try:
        if [p.name for p in folder.iterdir()] == [MARKER]:
            (folder / MARKER).unlink()
            folder.rmdir()
    except OSError:
        pass


def resume(directory: str | Path, progress: bool | None = None, output: str | Path | None = None,
           on_round: Sequence[Callable[[dict[str, Any]], None]] = (),
           algorithm_params: dict[str, Any] | None = None, adopt: bool = False) -> Any:
    """Continue an interrupted run from its checkpoint; returns its :class:`~fedray.api.results.Result`.

    Parameters
    ----------
    directory : str or Path
        The run's output folder (or its checkpoint folder or file).
    progress : bool, optional
    output : str or Path, optional
        Where to write the outputs (default: the run's own output folder).
    on_round : functions called with each round's history row, as in :func:`run`
    algorithm_params : dict, optional
        Algorithm parameters that replace the checkpoint's from the next round on (validated;
        e.g. a hyperparameter a population-based search mutates). The rest of the state is the
        checkpoint's.
    adopt : bool
        For callers that keep their own checkpoint lineage (:mod:`fedray.analysis.tune`: Ray
        Tune restores a trial, or PBT hands it another trial's checkpoint, from a copy outside
        any fedray output folder): the checkpoint need not sit in its run's folder, and the run
        goes on under the run id of ``output`` (a new one for a new folder). Default False:
        the checkpoint must be the one of the folder that holds it.
    """

    blob = load(directory, bound=not adopt)
    if adopt:
        if output is None:
            raise ConfigError("resume(adopt=True) needs output=: the folder the adopted run writes to")
        blob["run_id"] = run_id_of(output) or secrets.token_hex(16)
    if algorithm_params:
        _replace_params(blob, algorithm_params)
    # New checkpoints go to <output>/checkpoint and nothing is deleted: a folder or an overwrite
    # read from the file never decides where fedray writes.
    cfg = make_config(blob["config"], overrides={"checkpoint.directory": None, "output.directory": None,
                                                 "output.overwrite": False})
    named, folder = Path(directory), Path(blob["path"]).parent
    # The folder the user named (or the one holding the checkpoint folder they named),
    # never a path stored in the file.
    out = output or (named if folder != named and not named.is_file() else folder.parent)
    Trackers(cfg, out).check()
    done = int(blob["server"]["round"])
    log.info("resuming %s after round %d from %s", cfg.algorithm.name, done - 1, blob["path"])
    with showing(progress), Session(cfg) as session:
        result = session.run(output=out, progress=progress, resume_from=blob, on_round=on_round)
        result.peak_memory_mb = peak_memory_mb()
    return result


def _replace_params(blob: dict[str, Any], changed: dict[str, Any]) -> None:
    """Give the checkpoint's algorithm (and its saved configuration) the ``changed`` parameters."""
    alg = blob["server"]["algorithm"]
    params = make_params(type(alg), {**alg.params.model_dump(), **changed})
    alg.params = params
    alg.validate()
    saved = blob["config"].setdefault("algorithm", {})
    ref = algorithm_reference(type(alg))
    if ref is not None and not _names(saved.get("name"), type(alg)):
        # a run given another algorithm than its session's config (a checkpoint written before the run's
        # config named the algorithm it ran): the parameters are checked against the algorithm run
        saved.update(name=ref, params=params.model_dump())
    else:
        saved.setdefault("params", {}).update({k: getattr(params, k) for k in changed})
    log.info("resuming with new algorithm parameters %s", sorted(changed))


def _names(name: Any, cls: type) -> bool:
    """Whether the algorithm ``name`` of a saved config is ``cls``."""
    try:
        return get_algorithm(name) is cls
    except ConfigError:
        return False
