"""The sweep driver: a validated spec in, a Ray Tune run of its grid out, every trial in MLflow."""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Callable

import ray
from mlflow.tracking import MlflowClient
from ray import tune

from search_spaces import SweepSpec
from service.aggregate import sweep_results
from service.figures import log_figures
from service.provenance import code_version, hardware
from service.trial_cache import Reused, reuse_finished, trial_key
from service.settings import Settings
from workers.datasets import Splits, load_dataset
from workers.tracking import MLflowTrialLogger, experiment_id, flatten, start_parent_run
from workers.trainable import members, run_trial


@dataclass
class SweepOutcome:
    sweep_id: str
    parent_run_id: str
    experiment_id: str
    trials: int
    errors: int
    reused: int = 0  # finished trials taken from earlier sweeps (service.trial_cache)


def new_sweep_id() -> str:
    return uuid.uuid4().hex[:12]


def mlflow_experiment_name(spec: SweepSpec) -> str:
    return f"actsweep/{spec.name}"


_dashboard_url: str | None = None


def connect_ray(settings: Settings) -> str | None:
    """Join the Ray at ACTSWEEP_RAY_ADDRESS, or start a local one; returns the dashboard URL."""
    global _dashboard_url
    if not ray.is_initialized():
        address = settings.ray_address or os.environ.get("RAY_ADDRESS")  # set inside a Ray job
        if address:
            context = ray.init(address=address, log_to_driver=False)
        else:  # "local": a new Ray, even where another one runs on this machine
            context = ray.init(address="local", num_cpus=settings.num_cpus, include_dashboard=settings.dashboard,
                               log_to_driver=False)
        _dashboard_url = f"http://{context.dashboard_url}" if context.dashboard_url else None
    return _dashboard_url


def load_splits(spec: SweepSpec, settings: Settings) -> Splits:
    """The spec's dataset; raises DatasetNotFound (with instructions) before anything starts."""
    return load_dataset(spec.dataset, settings.resolved_data_dir, settings.download, spec.val_size,
                        spec.train_subset, spec.data_options.model_dump())


def lr_search(spec: SweepSpec, activation: str, dropout: float) -> tuple:
    """The search point, searcher and sample count of one (activation, dropout)'s lr search."""
    from ray.tune.search import Repeater
    from ray.tune.search.optuna import OptunaSearch

    search = spec.search
    lr = (tune.loguniform if search.log else tune.uniform)(search.lr_low, search.lr_high)
    point = {"activation": activation, "dropout": dropout, "lr": lr}
    searcher = Repeater(OptunaSearch(metric=search.metric, mode="min", seed=search.seed), repeat=len(spec.seed_list))
    return point, searcher, search.num_samples * len(spec.seed_list)


def concurrent_slots(spec: SweepSpec) -> int:
    """How many trials of the spec the connected Ray cluster runs at once."""
    available = ray.cluster_resources()
    slots = available.get("CPU", 1) // spec.execution.cpus_per_trial
    if spec.execution.gpus_per_trial:
        slots = min(slots, available.get("GPU", 0) // spec.execution.gpus_per_trial)
    if spec.execution.max_concurrent_trials:
        slots = min(slots, spec.execution.max_concurrent_trials)
    return max(1, int(slots))


def fused_packs(points: list[dict], pack_size: int, slots: int = 1) -> list[dict]:
    """Grid points in packs of at most ``pack_size``, so that no slot idles while the last pack
    trains: the number of packs is a multiple of ``slots`` (the packs the cluster runs at once),
    and the points are dealt to them in turn, so each pack has the same mix of activations (a
    GELU costs more than a ReLU) and sizes that differ by one at most. Within a pack, members are
    sorted by activation and lr: one activation kernel and one Adam update per run of them."""
    ordered = sorted(points, key=lambda p: (p["activation"], p["lr"], p["dropout"], p["seed"]))
    count = -(-len(ordered) // pack_size)
    count = min(len(ordered), -(-count // slots) * slots)
    return [{"pack": ordered[k::count]} for k in range(count)]


def run_sweep(spec: SweepSpec, settings: Settings, *, splits: Splits | None = None, sweep_id: str | None = None,
              quick: bool = False, name: str | None = None, callbacks: tuple[tune.Callback, ...] = (),
              on_parent_run: Callable[[str, str], None] | None = None,
              on_reused: Callable[[list[Reused]], None] | None = None,
              resume_parent_run_id: str | None = None) -> SweepOutcome:
    """Run every trial of ``spec`` on Ray Tune and log them to MLflow; blocks until done.

    ``on_parent_run(experiment_id, parent_run_id)`` is called once the MLflow parent run exists;
    ``on_reused(reused)`` with the trials taken from the cache of finished trials (none with
    ``execution.rerun``). ``resume_parent_run_id`` continues a sweep whose driver died: its
    parent run is kept and each Tune experiment it had started is restored from its state on
    disk (Tuner.restore): finished trials stay finished, the others resume from their checkpoints.
    """
    sweep_id = sweep_id or new_sweep_id()
    splits = splits or load_splits(spec, settings)  # a missing dataset fails before anything is created

    # -- MLflow: the experiment, and the sweep's parent run ---------------------------------------
    client = MlflowClient(settings.resolved_tracking_uri)
    local_store = not settings.resolved_tracking_uri.startswith(("http://", "https://", "databricks"))
    exp_id = experiment_id(client, mlflow_experiment_name(spec), settings.artifact_root if local_store else None)
    sweep_tags = {"sweep_id": sweep_id, "experiment": spec.name}
    parent_tags = {**sweep_tags, "quick": str(quick).lower(), "data_source": splits.source,
                   "select_lr_by": spec.protocol.select_lr_by, "headline_metric": spec.protocol.headline_metric,
                   "code_version": code_version(), "hardware": hardware(),
                   **({"slice": spec.slice.label()} if spec.slice.label() else {})}
    params = {**flatten(spec.trial_base()), "trials": spec.trial_count, **{f"data.{k}": v for k, v in splits.sizes().items()}}
    parent_run_id = resume_parent_run_id or start_parent_run(client, exp_id, name or f"{spec.name}-{sweep_id}",
                                                             parent_tags, params, spec.model_dump(mode="json"))
    if on_parent_run:
        on_parent_run(exp_id, parent_run_id)

    # -- Ray Tune: one trial per grid point and seed ---------------------------------------------
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # progress is ours (callbacks); keep Tune's tables off
    connect_ray(settings)
    resources = {"cpu": spec.execution.cpus_per_trial, "gpu": spec.execution.gpus_per_trial}
    logger = MLflowTrialLogger(settings.resolved_tracking_uri, exp_id, parent_run_id, sweep_tags)

    reused_count = 0

    def with_cache(points: list[dict], phase: str, data: Splits) -> list[dict]:
        """The points still to train; the others' runs are copied from the trials that trained them."""
        nonlocal reused_count
        identity = {"dataset": spec.dataset, "val_size": spec.val_size, "train_subset": spec.train_subset,
                    "data_options": spec.data_options.model_dump(), "sizes": data.sizes(), "phase": phase}
        points = [{**p, "trial_key": trial_key(spec.trial_base(), p, identity)} for p in points]
        if spec.execution.rerun:
            return points
        to_train, reused = reuse_finished(client, points, exp_id, parent_run_id, {**sweep_tags, "phase": phase},
                                          resuming=resume_parent_run_id is not None)
        reused_count += len(reused)
        for r in reused:
            r.point["phase"] = phase
        if reused and on_reused:
            on_reused(reused)
        return to_train

    def fit(points, phase: str, data: Splits, name: str, search_alg=None, num_samples: int = 1):
        trainable = tune.with_resources(tune.with_parameters(run_trial, splits=data), resources)
        experiment = f"{spec.name}-{sweep_id}-{name}"
        path = f"{settings.ray_results}/{experiment}"
        if resume_parent_run_id and tune.Tuner.can_restore(path):  # the dead driver had started it
            return summarize(tune.Tuner.restore(path, trainable, resume_errored=True).fit())
        if isinstance(points, list):  # a grid: each point once, unless the cache has it already
            points = with_cache(points, phase, data)
            if not points:
                return 0, 0
            if spec.execution.mode == "fused":
                points = fused_packs(points, spec.execution.pack_size, concurrent_slots(spec))
            points = tune.grid_search(points)
        tuner = tune.Tuner(
            trainable,
            param_space={**spec.trial_base(), "phase": phase, "seeds": spec.seed_list, "point": points,
                         "checkpoint_root": path},  # each trial's state.pt goes in its folder there
            tune_config=tune.TuneConfig(max_concurrent_trials=spec.execution.max_concurrent_trials,
                                        search_alg=search_alg, num_samples=num_samples,
                                        reuse_actors=True,  # a worker process (torch imported) serves trial after trial
                                        trial_dirname_creator=lambda trial: trial.trial_id),
            run_config=tune.RunConfig(
                name=experiment, storage_path=settings.ray_results, callbacks=[logger, *callbacks], verbose=0,
                # a failed trial is retried, from its last epoch's state (workers.checkpoints)
                failure_config=tune.FailureConfig(max_failures=spec.execution.max_failures)),
        )
        return summarize(tuner.fit())

    def summarize(found) -> tuple[int, int]:
        """(grid points trained, grid points whose trial failed)"""
        sizes = [(len(members(result.config)), result.error is not None) for result in found]
        return sum(n for n, _ in sizes), sum(n for n, failed in sizes if failed)

    try:
        if spec.search:
            trials = errors = 0
            for activation, dropout in spec.searched_pairs():
                point, searcher, samples = lr_search(spec, activation, dropout)
                n, failed = fit(point, "grid", splits, f"{activation}-{dropout:g}", searcher, samples)
                trials, errors = trials + n, errors + failed
        else:
            trials, errors = fit(spec.grid_points(), "grid", splits, "grid")
        if spec.protocol.retrain_on_full and not errors:
            # GELU paper §3.5: the lr chosen on validation, then trained again on all the training data
            chosen = sweep_results(settings.resolved_tracking_uri, sweep_id).table
            chosen = chosen[chosen["lr_chosen"]]
            points = [{"activation": r.activation, "dropout": r.dropout, "lr": r.lr, "seed": seed}
                      for r in chosen.itertuples() for seed in spec.seed_list]
            n, failed = fit(points, "retrain", splits.with_validation_in_training(), "retrain")
            trials, errors = trials + n, errors + failed
    except BaseException:
        client.set_terminated(parent_run_id, "KILLED")
        raise
    log_figures(sweep_results(settings.resolved_tracking_uri, sweep_id), settings.resolved_tracking_uri)
    client.set_terminated(parent_run_id, "FINISHED" if not errors else "FAILED")
    return SweepOutcome(sweep_id, parent_run_id, exp_id, trials, errors, reused_count)
