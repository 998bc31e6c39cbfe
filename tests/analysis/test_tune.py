"""fedray.tune on the session's Ray instance: a grid equals fedray runs, ASHA stops trials between rounds,
a restored trial equals an uninterrupted one, and a trial's client actors live in its placement group."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import fedray
from fedray.core.errors import ConfigError
from tests import plugins

pytest.importorskip("ray.tune")

ROUNDS = 6
BASE = {"algorithm": {"name": "kmeans", "params": {"n_clusters": 8, "tol": 1e-12}},
        "data": {"dataset": "sklearn:digits"}, "federation": {"n_clients": 4, "rounds": ROUNDS},
        "runtime": {"backend": "local"}, "output": {"plots": False}}
GRID = [16, 8, 4, 2]  # fewer clusters, larger objective: later trials are the worse ones
WALL = ("wall_s",)


def _fit(tmp_path, trainable, grid, scheduler=None, failure=None, name="exp"):
    from ray import tune

    tuner = tune.Tuner(
        trainable, param_space={"algorithm.params.n_clusters": tune.grid_search(grid)},
        tune_config=tune.TuneConfig(metric="objective", mode="min", scheduler=scheduler, max_concurrent_trials=2),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path / "tune"), verbose=0,
                                  failure_config=failure))
    results = tuner.fit()
    assert not results.errors, results.errors
    return {r.config["algorithm.params.n_clusters"]: r for r in results}


def _reference(k):
    return fedray.run(BASE, overrides={"algorithm.params.n_clusters": k}, progress=False)


def _trial_history(result):
    return pd.read_parquet(Path(result.path) / "fedray" / "rounds.parquet").drop(columns=list(WALL))


def test_a_grid_of_four_trials_gives_the_final_metrics_of_four_fedray_runs(ray_session, tmp_path):
    """Each trial's last report holds the final metrics (and last round) of `fedray.run` with the same
    values, exactly; its output folder holds the same history; it reported every round."""
    from fedray.tune import trainable

    results = _fit(tmp_path, trainable(BASE, checkpoint_every=3, driver_cpus=1), GRID)
    assert sorted(results) == sorted(GRID)
    for k, res in results.items():
        ref = _reference(k)
        m = res.metrics
        for name, value in ref.final.items():
            if isinstance(value, float):
                assert m[f"final_{name}"] == value, (k, name)
        assert m["objective"] == ref.history["objective"].iloc[-1]
        assert m["round"] == ROUNDS - 1 and m["training_iteration"] == ROUNDS + 1  # a report a round, then final
        pd.testing.assert_frame_equal(_trial_history(res), ref.history.drop(columns=list(WALL)))
        assert res.checkpoint is not None  # the round-6 checkpoint (every 3 rounds)


def test_asha_stops_a_trial_between_rounds(ray_session, tmp_path):
    """ASHA (grace period 2 rounds) stops the trials whose objective is behind at a rung: they report fewer
    rounds than the cap, and the trials it keeps run to the end."""
    from ray.tune.schedulers import ASHAScheduler

    from fedray.tune import trainable

    asha = ASHAScheduler(time_attr="training_iteration", max_t=ROUNDS + 1, grace_period=2, reduction_factor=2)
    results = _fit(tmp_path, trainable(BASE, checkpoint_every=ROUNDS), GRID, scheduler=asha)
    rounds = {k: int(r.metrics["round"]) for k, r in results.items()}
    stopped = [k for k, r in rounds.items() if r < ROUNDS - 1]
    assert stopped, rounds
    assert rounds[16] == ROUNDS - 1  # the best trial is never stopped
    for k in stopped:
        assert "final_ari" not in results[k].metrics  # stopped before its evaluation


def _failing_trainable(base, flag_dir, fail_at):
    """fedray's trial body, with the trial's process killed by an error after round ``fail_at`` the first time."""
    from ray import tune

    from fedray.analysis.tune import run_trial

    def fail_once(row):
        with open(Path(flag_dir) / "rounds.txt", "a") as fh:  # every round the trial computes, in order
            fh.write(f"{row['round']}\n")
        flag = Path(flag_dir) / f"failed-{tune.get_context().get_trial_id()}"
        if row["round"] == fail_at and not flag.exists():
            flag.write_text("1")
            raise RuntimeError("injected trial failure")

    def body(config):
        run_trial(config, base=base, checkpoint_every=2, on_round=[fail_once])

    return tune.with_resources(body, {"CPU": 1})


def test_a_restored_trial_equals_an_uninterrupted_one(ray_session, tmp_path):
    """A trial that fails after round 4 is restored by Tune from its round-3 checkpoint (every 2 rounds),
    computes round 4 again, and ends with the same history and final metrics as fedray.run, bit for bit."""
    from ray import tune

    flags = tmp_path / "flags"
    flags.mkdir()
    results = _fit(tmp_path, _failing_trainable(BASE, str(flags), 4), [8], failure=tune.FailureConfig(max_failures=1))
    assert len(list(flags.glob("failed-*"))) == 1  # it did fail once
    res, ref = results[8], _reference(8)
    for name, value in ref.final.items():
        if isinstance(value, float):
            assert res.metrics[f"final_{name}"] == value, name
    pd.testing.assert_frame_equal(_trial_history(res), ref.history.drop(columns=list(WALL)))
    computed = [int(r) for r in (flags / "rounds.txt").read_text().split()]
    assert computed == [0, 1, 2, 3, 4, 4, 5]  # restored after round 3 (its checkpoint), not started over


def test_a_trial_reserves_its_client_actors_in_its_placement_group(ray_session, tmp_path):
    """On the ray backend the trial's resources are bundle 0 plus one bundle per client actor, and the run's
    client actors are scheduled into that placement group (not beside it, where they could starve others)."""
    import ray
    from ray import tune
    from ray.util import get_current_placement_group

    from fedray.analysis.tune import run_trial, trial_bundles, trial_config

    base = {**BASE, "runtime": {"backend": "ray", "clients_per_actor": 2}}
    assert trial_bundles(trial_config(base, {}, 1), client_cpus=1, driver_cpus=0.5) == [
        {"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 0.5}]
    seen = tmp_path / "seen.json"

    def body(config):
        def look(row):
            if row["round"] == 1:
                group = get_current_placement_group()
                gid = group.id.hex()
                free = {k: v for k, v in ray.available_resources().items() if gid in k}
                seen.write_text(json.dumps({"group": gid, "specs": group.bundle_specs, "free": free}))
        run_trial(config, base=base, checkpoint_every=ROUNDS, on_round=[look])

    resources = tune.PlacementGroupFactory(trial_bundles(trial_config(base, {}, 1), 1, 0.5))
    results = _fit(tmp_path, tune.with_resources(body, resources), [8])
    info = json.loads(seen.read_text())
    assert info["specs"] == [{"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 0.5}]
    # Ray names a group's resources <resource>_group_<bundle>_<group id>; each task or actor placed in a bundle
    # takes 0.001 of its bundle_group_<i>_<id>. Bundles 1 and 2 each hold a client actor (the CPU-less server
    # actor may sit in any bundle), and no CPU of the group is left free (zero entries are left out).
    gid, free = info["group"], info["free"]
    assert free[f"bundle_group_1_{gid}"] < 1000 - 0.0005 and free[f"bundle_group_2_{gid}"] < 1000 - 0.0005
    assert not [k for k in free if k.startswith("CPU_group_")]
    assert results[8].metrics["final_ari"] == _reference(8).final["ari"]


def test_trainable_checks_its_arguments():
    """Bad arguments are one-line ConfigErrors, before Tune starts anything."""
    from fedray.tune import trainable

    with pytest.raises(ConfigError, match="checkpoint_every: must be >= 1"):
        trainable(BASE, checkpoint_every=0)
    with pytest.raises(ConfigError, match="client_cpus, driver_cpus: must be > 0"):
        trainable(BASE, client_cpus=0)
    with pytest.raises(ConfigError, match="algorithm.params"):
        trainable({**BASE, "algorithm": {"name": "kmeans", "params": {"n_clusters": 0}}})
    # a string is not taken apart into one metric per character, nor a float or a text cut to an integer
    with pytest.raises(ConfigError, match=r"metrics: must be a list of metric names, e.g. \['accuracy'\]; got 'ari'"):
        trainable(BASE, metrics="ari")
    for bad in (2.5, "3", True):
        with pytest.raises(ConfigError, match="checkpoint_every: must be >= 1, an integer"):
            trainable(BASE, checkpoint_every=bad)
    for bad in ("1", float("inf"), True):
        with pytest.raises(ConfigError, match="client_cpus, driver_cpus: must be > 0"):
            trainable(BASE, client_cpus=bad)


def test_reports_carry_the_scheduler_metric_in_every_round():
    """A round without the metric (k-means' initialisation round has no objective) reports it as NaN, so
    Tune never sees a report without its metric."""
    from fedray.analysis.tune import Reporter

    rep = Reporter(Path("."), 1, ("objective", "accuracy"))
    row = rep.row_metrics({"round": 0, "phase": "init", "clients_answered": 4})
    assert math.isnan(row["objective"]) and math.isnan(row["accuracy"])
    assert row["phase"] == "init" and row["clients_answered"] == 4.0


def test_sweep_calls_tune_for_nothing(tmp_path):
    """fedray.sweep runs its grid without importing ray.tune (a fresh interpreter)."""
    code = ("import sys; from fedray.analysis.sweep import sweep; "
            "sweep({'algorithm': {'name': 'kmeans'}, 'data': {'dataset': 'sklearn:iris'}, "
            "'federation': {'n_clients': 2, 'rounds': 2}, 'runtime': {'backend': 'local'}, "
            f"'output': {{'plots': False}}}}, {{'federation.n_clients': [2, 3]}}, out={str(tmp_path)!r}); "
            "assert 'ray.tune' not in sys.modules, 'sweep imported ray.tune'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_restore_takes_the_algorithm_params_pbt_mutated(tmp_path):
    """What PBT's exploit does: a checkpoint resumed with other algorithm parameters keeps the saved state and
    uses the new values from the next round (a looser tol stops k-means at once), the saved configuration says
    so; keys outside algorithm.params are named in a warning and keep the checkpoint's values."""
    from fedray.analysis.tune import _mutated_params, trial_config

    out = tmp_path / "run"
    cfg = trial_config(BASE, {}, 2)
    with pytest.raises(KeyboardInterrupt):
        fedray.run(cfg, output=out, on_round=[plugins.Interrupt(3)])
    saved = fedray.api.checkpoint.load(out)["config"]
    mutated = trial_config(BASE, {"algorithm.params.tol": 1e6, "seed": 5}, 2)
    params = _mutated_params(mutated, saved)
    assert params == {"tol": 1e6}
    looser = fedray.resume(out, algorithm_params=params)
    assert looser.history["round"].tolist() == [0, 1, 2, 3, 4]  # converged by the new tol at round 4
    assert looser.config.algorithm.params["tol"] == 1e6 and looser.config.seed == 0
    same = fedray.resume(out, output=tmp_path / "again", algorithm_params=_mutated_params(cfg, saved))
    ref = _reference(8)
    pd.testing.assert_frame_equal(same.history.drop(columns=list(WALL)), ref.history.drop(columns=list(WALL)))
    with pytest.raises(ConfigError, match="algorithm.params"):
        fedray.resume(out, algorithm_params={"tol": -1.0})


def test_a_dotted_search_key_replaces_its_value_as_set_does_and_nested_keys_reach_their_leaves():
    """`"data.partition": {"name": "iid"}` in a trial gives the partition `fedray run --set
    'data.partition={name: iid}'` gives (the base's dirichlet alpha is not merged into it: iid would
    refuse it); `{"algorithm": {"params": {...}}}` still changes one parameter and keeps the others."""
    from fedray.analysis.tune import trial_config
    from fedray.api.config import make_config

    base = make_config({**BASE, "data": {"dataset": "sklearn:iris", "partition": {"name": "dirichlet", "alpha": 0.5}}})
    as_set = make_config(base, overrides=["data.partition={name: iid}"])
    assert trial_config(base, {"data.partition": {"name": "iid"}}, 5).data.partition == as_set.data.partition
    nested = trial_config(base, {"algorithm": {"params": {"n_clusters": 4}}}, 5)
    assert nested.algorithm.params["n_clusters"] == 4
    assert {k: v for k, v in nested.algorithm.params.items() if k != "n_clusters"} == {
        k: v for k, v in base.algorithm.params.items() if k != "n_clusters"}
