"""Ray Tune: one fedray experiment as one Tune trial (the ``tune`` extra, ``ray[tune]``).

:func:`trainable` turns a base configuration into a Tune function trainable::

    from ray import tune
    from fedray.tune import trainable

    tuner = tune.Tuner(
        trainable("flacc.yaml"),
        param_space={"algorithm.params.alpha_0": tune.grid_search([0.5, 0.7]),
                     "algorithm.params.lr": tune.loguniform(1e-3, 1e-1)},
        tune_config=tune.TuneConfig(metric="accuracy", mode="max", scheduler=tune.schedulers.ASHAScheduler()))
    results = tuner.fit()

* **Search space.** A trial's configuration is a mapping of dotted keys applied to the
  base configuration like ``--set``: the value of a dotted key replaces the base's
  (``"data.partition": {"name": "iid"}`` drops the base's partition options); nested
  mappings under plain keys (``{"algorithm": {"params": {"lr": ...}}}``) are walked
  down to their leaves, each leaf a dotted key.
* **Reports.** Every round's history row is reported to Tune (its numeric columns, and
  ``phase``); the keys in ``metrics`` (default: fedray's headline metrics) are in every
  report, NaN in a round without them, so a scheduler's metric is never missing. ASHA or
  median stopping stop a trial between two rounds. After the last round one more report
  adds the final evaluation as ``final_NAME`` (``final_accuracy``, ``final_ari``, ...).
* **Checkpoints.** Each trial saves fedray's exact checkpoint every ``checkpoint_every``
  rounds into its own folder and hands it to Tune with that round's report. A restarted
  trial (``FailureConfig(max_failures=...)``, a resumed experiment) goes on from it with
  :func:`fedray.api.run.resume`, bit for bit: the same rounds, the same final metrics as a
  trial that was never interrupted. A trial PBT restores from another trial's checkpoint
  resumes that state exactly, with the ``algorithm.params`` values PBT mutated applied from
  the next round (``resume(..., algorithm_params=...)``); other keys that differ keep the
  checkpoint's values (a warning names them).
* **Resources.** A trial reserves, as one placement group, bundle 0 for itself (the
  driver: ``driver_cpus``) and one bundle per client actor
  (:func:`fedray.runtime.placement.client_bundles`, its ``"auto"`` layout filling
  ``client_cpus`` CPUs). The trial's run puts its client actors into those bundles
  instead of asking the cluster for more, so trials never starve each other of the
  CPUs their actors need (the pitfall of nested actors in Ray issue 38706). A run on
  the local backend needs bundle 0 only.
* **Outputs.** Each trial's fedray outputs (``summary.json``, ``rounds.parquet``, plots,
  checkpoints) are in ``fedray/`` inside the trial's folder.
* **Client state in Tune's storage.** A checkpoint holds every client's state (its shard's
  statistics, its model, its random streams), and Tune copies each one into its
  ``storage_path`` (local or cloud): keep that storage as private as the data. Local copies
  are made owner-only (files 0600, folders 0700), and so is the trial's whole folder (fedray's outputs
  and checkpoints, Tune's own files): the trial's process creates files owner-only (umask 077) and
  the tree is made so again when the run ends. That folder is Tune's staging copy: Tune's driver
  copies the experiment's staging folder (every trial's folder, the release journal) into
  ``storage_path`` with its own umask (files 0644 in folders 0755), so every trial closes the
  experiment's folder there (0700) when it starts and again when it ends: nothing in it can then be
  reached by another user, whatever the modes of the copies. A cloud bucket's access is yours to set.
* **Secure aggregation.** Under ``privacy.secure_aggregation`` the trials of one experiment share
  one release journal, ``release_log/`` in the experiment's folder (unless ``privacy.release_log``
  names another), so the release rule weighs every trial's sums over the same clients together
  (:mod:`fedray.layers.privacy.journal`); trials on other nodes share it only if that folder is
  shared storage: name one with ``privacy.release_log``.
* **Keys.** Checkpoints are signed (:mod:`fedray.api.checkpoint`); the trials get the
  driver's signing key through the object store, never through their configuration.

``fedray sweep`` (:mod:`fedray.analysis.sweep`) is the other tool: one configuration at a
time with timings and memory, for scaling studies. It never uses Tune.
"""
from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedray.api.checkpoint import FILENAME, KEY_ENV, load, signing_key
from fedray.api.config import ExperimentConfig, make_config
from fedray.api.progress import HEADLINE
from fedray.api.run import resume, run
from fedray.api.settings import client_bundles
from fedray.api.tracking import flatten, numeric_items
from fedray.core.errors import ConfigError

log = logging.getLogger(__name__)

#: Metrics every report carries (NaN in a round without them) unless ``metrics=`` says otherwise.
DEFAULT_METRICS = tuple(k for k in HEADLINE if k != "phase")
OUTPUT = "fedray"
#: Metrics whose value in a trial's last report is the run's final one (the last round's is ``round_NAME``).
FINAL_REPLACES = ("accuracy",)


def trial_config(base: Any, config: Mapping[str, Any], checkpoint_every: int) -> ExperimentConfig:
    """The validated configuration of one trial: ``base`` with the trial's dotted keys, its checkpoints
    every ``checkpoint_every`` rounds in its own output folder."""
    overrides = search_keys(config)
    overrides.update({"checkpoint.every": int(checkpoint_every), "checkpoint.directory": None,
                      "output.directory": None, "output.overwrite": True, "runtime.progress": False})
    return make_config(base, overrides=overrides)


def search_keys(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A trial's configuration as ``--set`` overrides: a dotted key's value as it is (it replaces the
    base's, mappings included); a mapping under a plain key walked down to its leaves."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if "." not in str(k) and isinstance(v, Mapping) and v:
            out.update(search_keys(v, key + "."))
        else:
            out[key] = v
    return out


def trial_bundles(cfg: ExperimentConfig, client_cpus: float = 1.0, driver_cpus: float = 1.0
                  ) -> list[dict[str, float]]:
    """Bundle 0 (the trial's driver) and one bundle per client actor of ``cfg`` (ray backend)."""
    driver = {"CPU": float(driver_cpus)}
    if cfg.runtime.backend != "ray":
        return [driver]
    return [driver] + client_bundles(cfg, total_cpus=float(client_cpus))


class Reporter:
    """Reports each round's history row to Tune, with the round's checkpoint when one was saved."""

    def __init__(self, out: Path, every: int, metrics: Sequence[str]) -> None:
        self.folder = out / "checkpoint"
        self.every = every
        self.metrics = tuple(metrics)
        self.last: dict[str, Any] = {}

    def row_metrics(self, row: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: math.nan for k in self.metrics}
        out.update(numeric_items(row))
        if "phase" in row:
            out["phase"] = str(row["phase"])
        return out

    def __call__(self, row: dict[str, Any]) -> None:
        from ray import tune

        self.last = self.row_metrics(row)
        checkpoint = None
        if (int(row["round"]) + 1) % self.every == 0 and (self.folder / FILENAME).is_file():
            checkpoint = tune.Checkpoint.from_directory(str(self.folder))
        # Tune copies the checkpoint (every client's state) into its storage while reporting: the
        # copies get owner-only modes (files 0600, folders 0700), as fedray's own checkpoint has.
        old = os.umask(0o077)
        try:
            tune.report(dict(self.last), checkpoint=checkpoint)
        finally:
            os.umask(old)


def run_trial(config: Mapping[str, Any], *, base: Any, checkpoint_every: int = 5,
              metrics: Sequence[str] = DEFAULT_METRICS, key: str | None = None,
              on_round: Sequence[Callable[[dict[str, Any]], None]] = ()) -> Any:
    """Run one trial inside Tune (the body of :func:`trainable`); returns the run's Result.

    Starts afresh, or resumes from ``tune.get_checkpoint()`` when Tune restores the trial.
    ``on_round`` functions are called after each round's report.
    """
    from ray import tune

    if key and not os.environ.get(KEY_ENV):
        os.environ[KEY_ENV] = key
    # Everything this trial's process writes (fedray's outputs and checkpoints, Tune's own files and the
    # copies Tune syncs into storage_path) is owner-only: files 0600, folders 0700.
    os.umask(0o077)
    trial_dir = Path(tune.get_context().get_trial_dir())
    storage = storage_folder()
    closed(storage)  # the experiment's folder in storage_path, before anything of this trial is copied there
    owner_only(trial_dir)
    out = trial_dir / OUTPUT
    reporter = Reporter(out, int(checkpoint_every), metrics)
    hooks = [reporter, *on_round]
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        result = run(shared_release_log(trial_config(base, config, checkpoint_every), trial_dir.parent), output=out,
                     progress=False, on_round=hooks)
    else:
        with checkpoint.as_directory() as folder:
            params = _mutated_params(trial_config(base, config, checkpoint_every),
                                     load(folder, bound=False)["config"])
            result = resume(folder, output=out, progress=False, on_round=hooks, algorithm_params=params, adopt=True)
    owner_only(trial_dir)
    closed(storage)
    tune.report(final_report(reporter.last, numeric_items(result.final)))
    return result


def shared_release_log(cfg: ExperimentConfig, experiment: Path) -> ExperimentConfig:
    """Under secure aggregation, the trials of one experiment share one release journal (``release_log/``
    in the experiment's folder, unless ``privacy.release_log`` names one): each trial runs in a process
    of its own, and the release rule must weigh every trial's sums over the same clients together."""
    p = cfg.privacy
    if not p.secure_aggregation or p.release_log is not None:
        return cfg
    return cfg.model_copy(update={"privacy": p.model_copy(update={"release_log": str(experiment / "release_log")})})


def storage_folder() -> Path | None:
    """The experiment's folder in Tune's ``storage_path`` where that is a local folder (None: a bucket, or a Ray
    without the storage context). A trial writes into its staging folder (``get_trial_dir``); Tune's driver copies
    the experiment's staging folder (every trial's folder, fedray's outputs, the release journal) there."""
    from ray import tune

    try:
        storage = tune.get_context().get_storage()
        local = getattr(storage.storage_filesystem, "type_name", "") == "local"
        return Path(storage.experiment_fs_path) if local else None
    except Exception:  # noqa: BLE001 - a developer API of Ray's: an older or newer Ray may lack it
        return None


def closed(folder: Path | None) -> None:
    """Make ``folder`` (the experiment's folder in Tune's storage) 0700, so that nothing in it can be reached by
    another user whatever the modes of the copies Tune's driver makes (its umask: files 0644 in folders 0755);
    a folder that is a link or is not there is left alone, and one that cannot be changed is logged."""
    if folder is None or not folder.is_dir() or folder.is_symlink():
        return
    try:
        os.chmod(folder, 0o700)
    except OSError as exc:
        log.warning("Tune's experiment folder %s could not be made owner-only (%s): files Tune's driver wrote "
                    "in it may be readable by other users", folder, exc.strerror or exc)


def owner_only(tree: Path) -> None:
    """Make ``tree`` and everything in it owner-only (folders 0700, files 0600); links are left alone."""
    if not tree.is_dir() or tree.is_symlink():
        return
    os.chmod(tree, 0o700)
    for root, dirs, files in os.walk(tree):
        for name in dirs:
            p = Path(root) / name
            if not p.is_symlink():
                os.chmod(p, 0o700)
        for name in files:
            p = Path(root) / name
            if not p.is_symlink():
                os.chmod(p, 0o600)


def final_report(last: dict[str, Any], final: dict[str, float]) -> dict[str, Any]:
    """The trial's last report: the metrics of :data:`FINAL_REPLACES` hold the run's final values (``accuracy``
    is the final accuracy of ``docs/results.md``, the number of ``summary.json``, the table and the trackers), so
    that a search ranking finished trials by their last report ranks them by it; ``final_NAME``
    repeats them and ``round_NAME`` keeps the last round's values they replace."""
    out = dict(last)
    for k, v in final.items():
        if k in FINAL_REPLACES:
            out[f"round_{k}"] = last.get(k, math.nan)
            out[k] = v
        out[f"final_{k}"] = v
    return out


def _mutated_params(cfg: ExperimentConfig, saved: dict[str, Any]) -> dict[str, Any]:
    """The algorithm parameters in which the trial's configuration differs from its checkpoint's (PBT's
    mutations); a warning names other keys that differ, which the restored run does not take."""
    now, then = flatten(cfg.to_dict()), flatten(saved)
    changed = sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k)
                     and not (k == "federation.rounds" and now.get(k) is None))  # the run saved its cap
    prefix = "algorithm.params."
    others = [k for k in changed if not k.startswith(prefix)]
    if others:
        log.warning("this trial resumes its checkpoint's values of %s; the trial's new values are not applied",
                    others)
    return {k[len(prefix):]: cfg.algorithm.params[k[len(prefix):]] for k in changed
            if k.startswith(prefix) and "." not in k[len(prefix):] and k[len(prefix):] in cfg.algorithm.params}


def _check_arguments(checkpoint_every: Any, client_cpus: Any, driver_cpus: Any, metrics: Any) -> None:
    """One-line ConfigErrors for :func:`trainable`'s arguments (no string or float silently taken apart or cut)."""
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every: must be >= 1, an integer; got {checkpoint_every!r}")
    cpus = (client_cpus, driver_cpus)
    if not all(isinstance(c, (int, float)) and not isinstance(c, bool) and 0 < c < math.inf for c in cpus):
        raise ConfigError(f"client_cpus, driver_cpus: must be > 0; got {client_cpus!r}, {driver_cpus!r}")
    if isinstance(metrics, str) or not all(isinstance(m, str) and m for m in metrics):
        raise ConfigError(f"metrics: must be a list of metric names, e.g. ['accuracy']; got {metrics!r}")


def trainable(base: Any, *, checkpoint_every: int = 5, client_cpus: float = 1.0, driver_cpus: float = 1.0,
              metrics: Sequence[str] = DEFAULT_METRICS) -> Any:
    """A Tune function trainable running ``base`` (a configuration, mapping or YAML path) per trial.

    Parameters
    ----------
    base : ExperimentConfig, mapping or path
        The configuration each trial's search-space keys override.
    checkpoint_every : int
        Rounds between the trial's checkpoints (Tune restores trials from them; a restored trial computes
        the rounds after its last checkpoint again). Default 5.
    client_cpus : float
        CPUs of a trial's client actors (their ``"auto"`` layout fills this many); ray backend.
    driver_cpus : float
        CPUs of the trial itself (bundle 0; the run's driver and server).
    metrics : sequence of str
        Keys in every report (NaN when a round has none): include your scheduler's metric.

    Returns
    -------
    The trainable for :class:`ray.tune.Tuner`, with its resources (a ``PlacementGroupFactory``
    per trial, from the trial's configuration).
    """
    from ray import tune

    _check_arguments(checkpoint_every, client_cpus, driver_cpus, metrics)
    cfg = make_config(base)
    key = os.environ.get(KEY_ENV) or signing_key(create=True).hex()

    def resources(config: Mapping[str, Any]) -> Any:
        bundles = trial_bundles(trial_config(cfg, config, checkpoint_every), client_cpus, driver_cpus)
        return tune.PlacementGroupFactory(bundles, strategy="PACK")

    fn = tune.with_parameters(fedray_trial, base=cfg, checkpoint_every=int(checkpoint_every), metrics=tuple(metrics),
                              key=key)
    return tune.with_resources(fn, resources)


def fedray_trial(config: dict[str, Any], base: Any = None, checkpoint_every: int = 5,
               metrics: Sequence[str] = DEFAULT_METRICS, key: str | None = None) -> None:
    """The function :func:`trainable` hands to Tune (its name names the trials)."""
    run_trial(config, base=base, checkpoint_every=checkpoint_every, metrics=metrics, key=key)
