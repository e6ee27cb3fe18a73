"""The sweep driver: a validated spec in, a Ray Tune run of its plan out, every trial in MLflow.

A sweep's plan (search_spaces.Plan) has phases: the grid (or an Optuna lr search per activation
and dropout), then, where the protocol asks, the chosen lrs retrained on all the training data.
Each phase is one Tune experiment; each grid point one Tune trial, or a fused pack of them one.
"""
from __future__ import annotations

import errno
import logging
import os
import pickle
import re
import shutil
import sys
from dataclasses import dataclass, field
from typing import Callable

import ray
from ray import tune
from ray.tune.logger import JsonLoggerCallback

from search_spaces import LrSearch, SweepSpec, packs
from service.driver.data import load_splits  # (re-exported: callers import it from here)
from service.driver.execution_plan import ExecutionPlan
from service.driver.observations import Footprints, KeptFootprints, observe_cluster, plan_sweep, trains_on_gpu
from service.driver.provenance import code_version, hardware
from service.lock import environment_lock
from service.patience import cannot_write
from service.background import in_background
from service.ray_session import connect_ray  # (re-exported: callers import it from here)
from service.records import new_sweep_id
from service.reporting.aggregate import FINAL_METRICS
from service.reporting.results import sweep_results
from service.runs.cache import Reused, reuse_finished
from service.runs.logger import MLflowTrialLogger
from service.runs.store import (EXPERIMENT, PHASE, SWEEP_ID, DatasetRef, Provenance, RunStore, RunsUnavailable,
                                configure_mlflow_client)
from service.settings import Settings
from workers.data import Splits
from workers.trial_entry import run_trial  # (torch-free: the trial imports the training code)
from workers.trial import KEY_FIELD, GridPoint, flatten, members, trial_key, tune_config


logger = logging.getLogger("actsweep.sweeps")


class _NotTunesResumeAdvice(logging.Filter):
    """After Ctrl-C Tune advises ``Tuner.restore(...)``; a sweep resumes through actsweep (the same
    command again: the trial cache), which says so itself (service.cli)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Resume experiment with: Tuner.restore" not in record.getMessage()


logging.getLogger("ray.tune.tune").addFilter(_NotTunesResumeAdvice())


@dataclass
class SweepOutcome:
    sweep_id: str
    parent_run_id: str
    experiment_id: str
    trials: int
    errors: int
    reused: int = 0  # finished trials taken from earlier sweeps (service.runs.cache)
    first_error: str | None = None  # the first failed trial's error, its last line ("OSError: [Errno 28] ...")


def mlflow_experiment_name(spec: SweepSpec) -> str:
    return f"actsweep/{spec.name}"


@dataclass
class _Sweep:
    """One run of a spec's plan: where it logs and what it has done so far. ``spec`` is resolved:
    its execution holds the plan's values, no ``auto``."""

    spec: SweepSpec
    plan: ExecutionPlan
    settings: Settings
    sweep_id: str
    runs: RunStore
    experiment_id: str
    parent_run_id: str
    callbacks: list
    on_reused: Callable[[list[Reused]], None] | None
    resuming: bool
    footprints: Footprints
    splits: Splits  # the sweep's data, put once into Ray's object store (splits_ref): every fit of it reads that copy
    splits_ref: ray.ObjectRef
    trained: int = 0
    errors: int = 0
    first_error: str | None = None
    reused: list[Reused] = field(default_factory=list)

    @property
    def sweep_tags(self) -> dict[str, str]:
        return {SWEEP_ID: self.sweep_id, EXPERIMENT: self.spec.name}

    def not_yet_finished(self, points: list[GridPoint], phase: str, data: Splits) -> list[dict]:
        """The points still to train, each with its trial-cache key; the others' runs are copied
        from the trials that trained them (none with ``execution.rerun``)."""
        spec = self.spec
        identity = {"dataset": spec.dataset, "val_size": spec.val_size, "train_subset": spec.train_subset,
                    "data_options": spec.data_options.model_dump(), "sizes": data.sizes(), "phase": phase,
                    "fingerprint": data.fingerprint()}
        execution = {"dtype": spec.execution.dtype}  # (not the mode: a member and its lone trial agree to rounding)
        keyed = [{**p.as_dict(), KEY_FIELD: trial_key(spec.trial_base(), p, identity, execution)} for p in points]
        if spec.execution.rerun:
            return keyed
        to_train, reused = reuse_finished(self.runs, keyed, self.experiment_id, self.parent_run_id,
                                          {**self.sweep_tags, PHASE: phase}, resuming=self.resuming)
        self.reused += reused
        if reused and self.on_reused:
            self.on_reused(reused)
        return to_train

    def fit(self, phase: str, data: Splits, name: str, points: list[GridPoint] | None = None,
            search: LrSearch | None = None) -> None:
        """One Tune experiment: a phase's grid points (as trials or fused packs), or one lr search."""
        spec, settings = self.spec, self.settings
        shared = self.splits_ref if data is self.splits else data  # (the retraining phase's data: its own)
        trainable = tune.with_resources(tune.with_parameters(run_trial, splits=shared),
                                        {"cpu": spec.execution.cpus_per_trial, "gpu": spec.execution.gpus_per_trial})
        experiment = f"{spec.name}-{self.sweep_id}-{name}"
        path = f"{settings.ray_results}/{experiment}"
        if self.resuming and tune.Tuner.can_restore(path):  # the dead driver had started it
            return self._count(tune.Tuner.restore(path, trainable, resume_errored=True).fit())
        placement = {"phase": phase, "seeds": spec.seed_list, "checkpoint_root": path,  # state.pt goes there
                     "memory_limit_bytes": trial_memory_limit(spec, self.footprints.trial_bytes)}
        search_alg, samples, units = None, 1, [None]
        if search is not None:
            point, search_alg, samples = _lr_search(search)
            space = tune_config(spec.trial_base(), point, **placement)
        else:
            to_train = self.not_yet_finished(points, phase, data)
            if not to_train:
                return
            units = to_train
            if self.plan.mode == "fused":  # (the plan's pack size and slots; this phase's points)
                by_key = {GridPoint.of(p).key(): p for p in to_train}
                points = [GridPoint.of(p) for p in to_train]
                units = [{"pack": [by_key[m.key()] for m in pack.points]}
                         for pack in packs(points, self.plan.pack_size, self.plan.slots)]
            space = {**tune_config(spec.trial_base(), {}, **placement),
                     "point": tune.grid_search(units)}
        tuner = tune.Tuner(
            trainable, param_space=space,
            tune_config=tune.TuneConfig(max_concurrent_trials=spec.execution.max_concurrent_trials,
                                        search_alg=search_alg, num_samples=samples,
                                        reuse_actors=True,  # a worker process (torch imported) serves trial after trial
                                        trial_dirname_creator=lambda trial: trial.trial_id),
            run_config=tune.RunConfig(
                name=experiment, storage_path=settings.ray_results, callbacks=[*self.callbacks, JsonLoggerCallback()],
                verbose=0,
                # a failed trial is retried, from its last epoch's state (workers.checkpoints)
                failure_config=tune.FailureConfig(max_failures=spec.execution.max_failures)))
        try:
            found = tuner.fit()
        except (EOFError, OSError, pickle.UnpicklingError) as exc:  # (a result file cut short by a full disk)
            raise_if_storage_full(exc, settings.ray_results)
            raise
        self._count(found, expected=samples * len(units))

    def _count(self, found, expected: int | None = None) -> None:
        """Grid points trained, and those whose trial failed (a pack counts its members). Raises
        SweepInterrupted where Tune stopped mid-way: its own Ctrl-C handler ends ``fit`` normally,
        with trials neither done nor failed, and fewer than the ``expected`` trials made."""
        stopped = 0 if expected is None else max(0, expected - len(found))
        for result in found:
            n = len(members(result.config)) if result.config else 1  # (a trial killed before it reported has none)
            if result.error is not None:
                self.errors += n
                self.first_error = self.first_error or failure_reason(result.error)
            elif not (result.metrics or {}).get("done"):
                stopped += n
                continue
            self.trained += n
        if stopped:
            raise SweepInterrupted(f"{stopped} trial(s) or member(s) stopped mid-way or never started")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep, after Tune's own handler stopped its trials (their state saved)."""


def raise_if_storage_full(exc: BaseException, storage: str) -> None:
    """Names a full disk under Tune's storage as the cause of ``exc``. Tune writes a failed trial's
    error to a file beside its results and reads it back to build them: on a full disk the file is
    empty, and the read fails (``EOFError: Ran out of input``), hiding why the trials failed."""
    try:
        free = shutil.disk_usage(storage).free
    except OSError:  # (not a local folder, or gone)
        return
    if free < 2 ** 20:
        raise OSError(errno.ENOSPC, f"No space left on device: Tune's storage {storage} is full "
                                    f"({free} bytes free), and its trials' results cannot be read back") from exc


def trial_memory_limit(spec: SweepSpec, trial_bytes: Callable[[], float]) -> int | None:
    """The bytes a trial's process may allocate beyond what it held at its start, on CPUs: the
    spec's ``execution.memory_limit_gb``, or 3 × the trial's estimated footprint (``trial_bytes()``,
    asked only here: the sweep's Footprints measure it once) + 2 GiB (a trial past it fails alone,
    FAILED with "can't allocate memory"; Ray's own memory monitor, left to itself, kills sweeps'
    drivers first). None (no limit) on GPUs and for fused packs."""
    if spec.execution.memory_limit_gb is not None:
        return int(spec.execution.memory_limit_gb * 1e9)
    if spec.execution.gpus_per_trial or spec.execution.mode == "fused":
        return None
    one = trial_bytes()
    return int(3 * one) + 2 * 2 ** 30 if one else None


def _end_runs(runs: RunStore, sweep_id: str, parent_run_id: str, status: str) -> None:
    runs.end_open_runs(sweep_id, "KILLED" if status == "KILLED" else "FAILED")
    runs.end_run(parent_run_id, status)


def failure_reason(error: BaseException) -> str:
    """One line that says why. A full disk, where the error or its causes name one, is that line;
    an error that carries a remote traceback in its message (Tune's, Ray's) is that traceback's last
    exception line ("OSError: [Errno 28] ..."); any other error is its type and first line."""
    lines, cause = [], error
    while cause is not None and len(lines) < 10_000:
        lines += [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
        cause = cause.__cause__ or cause.__context__
    full = [line for line in lines if cannot_write(line)]
    if full:
        return f"{type(error).__name__}: {full[-1]}"[:500]
    own = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    raised = [line for line in own[1:] if _EXCEPTION_LINE.match(line)]
    if raised:  # a traceback carried in the message (RayTaskError, TuneError): where it ended
        return raised[-1][:500]
    return f"{type(error).__name__}: {own[0] if own else ''}"[:500]


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Unavailable)(:|$)")


def _lr_search(search: LrSearch) -> tuple[dict, object, int]:
    """The search point, searcher and sample count of one (activation, dropout)'s lr search."""
    from ray.tune.search import Repeater
    from ray.tune.search.optuna import OptunaSearch

    lr = (tune.loguniform if search.log else tune.uniform)(search.lr_low, search.lr_high)
    searcher = Repeater(OptunaSearch(metric=search.metric, mode="min", seed=search.sampler_seed),
                        repeat=len(search.seeds))
    return {"activation": search.activation, "dropout": search.dropout, "lr": lr}, searcher, search.trials


def _open_sweep(spec: SweepSpec, settings: Settings, runs: RunStore, sweep_id: str, splits: Splits, quick: bool,
                name: str | None, resume_parent_run_id: str | None, plan: ExecutionPlan) -> tuple[str, str]:
    """(experiment id, parent run id): the MLflow experiment and the sweep's parent run, made or kept."""
    exp_id = runs.experiment_id(mlflow_experiment_name(spec), settings.artifact_root)
    if resume_parent_run_id:
        return exp_id, resume_parent_run_id
    provenance = Provenance(sweep_id, spec.name, quick, splits.source, spec.protocol.select_lr_by,
                            spec.protocol.headline_metric, code_version(), environment_lock(), hardware(),
                            spec.slice.label())
    params = {**flatten(spec.trial_base()), "trials": spec.trial_count, "plan": plan.summary(),
              **{f"data.{k}": v for k, v in splits.sizes().items()}}
    return exp_id, runs.start_sweep(exp_id, name or f"{spec.name}-{sweep_id}", provenance, params,
                                    spec.model_dump(mode="json"), plan.as_dict())


def run_sweep(spec: SweepSpec, settings: Settings, *, splits: Splits | None = None, sweep_id: str | None = None,
              quick: bool = False, name: str | None = None, callbacks: tuple[tune.Callback, ...] = (),
              on_parent_run: Callable[[str, str], None] | None = None,
              on_reused: Callable[[list[Reused]], None] | None = None,
              on_round: Callable[[dict, list[GridPoint]], None] | None = None,
              on_plan: Callable[[ExecutionPlan], None] | None = None,
              resume_parent_run_id: str | None = None, figures_later: bool = False) -> SweepOutcome:
    """Run every trial of ``spec`` on Ray Tune and log them to MLflow; blocks until done.

    ``on_parent_run(experiment_id, parent_run_id)`` is called once the MLflow parent run exists;
    ``on_reused(reused)`` with the trials taken from the cache of finished trials (none with
    ``execution.rerun``). ``resume_parent_run_id`` continues a sweep whose driver died: its
    parent run is kept and each Tune experiment it had started is restored from its state on
    disk (Tuner.restore): finished trials stay finished, the others resume from their checkpoints.
    With ``until_decided`` the grid is followed by rounds of seeds (:func:`seed_rounds`);
    ``on_round(state, points)`` is called after each look with the claims' state and the points
    the next round trains (none after the last).
    The spec's ``auto`` execution is resolved first, on the connected cluster
    (service.driver.execution_plan); ``on_plan(plan)`` is called with the plan before any trial.
    ``figures_later``: the parent run gets its figures from :func:`log_sweep_figures`, afterwards.
    Whatever happens, the parent run ends FINISHED, FAILED or KILLED.
    """
    sweep_id = sweep_id or new_sweep_id()
    splits = splits or load_splits(spec, settings)  # a missing dataset fails before anything is created
    runs = RunStore(settings.resolved_tracking_uri, settings.trial_cache_secret(), patience_s=settings.outage_patience_s)
    # the MLflow store made (its tables: 2 s on a new one) while Ray starts and the plan is measured
    store_ready = in_background(runs.experiment_id, mlflow_experiment_name(spec), settings.artifact_root)
    connect_ray(settings)
    local = not (settings.ray_address or os.environ.get("RAY_ADDRESS"))  # (a Ray started here, by this process)
    cluster = observe_cluster(local=local)
    splits_ref = ray.put(splits)  # (once: the footprint's task and the trials read it)
    code = code_version()  # (footprints are kept for committed code only: a changed one may measure otherwise)
    kept = None if code.endswith("+dirty") else KeptFootprints(
        settings.root / "footprints", {"data": splits.fingerprint(), "sizes": splits.sizes(), "code": code})
    here = local and "torch" in sys.modules  # (the CLI, torch imported for its checks: measured in its process)
    footprints = Footprints(spec, splits if here else splits_ref, on_gpu=trains_on_gpu(spec, cluster), kept=kept,
                            here=here)  # (by Ray tasks otherwise, once; here on the arrays: the store's are read-only)
    plan = plan_sweep(spec, splits_ref, settings.cuda_context_mb * 2 ** 20, cluster=cluster, footprints=footprints)
    spec = plan.resolved(spec)  # (from here on: no auto)
    if on_plan:
        on_plan(plan)
    store_ready.result()  # (raises what making the store raised)
    exp_id, parent_run_id = _open_sweep(spec, settings, runs, sweep_id, splits, quick, name, resume_parent_run_id, plan)
    if on_parent_run:
        on_parent_run(exp_id, parent_run_id)
    # progress is ours (callbacks): Tune's tables off (verbose=0 still prints its configuration table;
    # only this variable, read by Tune from the environment, stops it)
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    # Tune's default result files off but result.json (_Sweep.fit keeps it: Tune reads it back when a
    # fit ends): a fused pack's result, flattened, has a column per member and metric, and at 204
    # members the TensorBoard and CSV files took 0.35 s and 11 MB of the driver's memory a result
    # (docs/load.md). MLflow holds every metric.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    configure_mlflow_client(settings.mlflow_http_retries + 1, settings.mlflow_http_timeout_s)
    sweep = _Sweep(spec, plan, settings, sweep_id, runs, exp_id, parent_run_id, [], on_reused,
                   resume_parent_run_id is not None, footprints, splits, splits_ref)
    dataset = DatasetRef(spec.dataset, splits.fingerprint(), splits.source, splits.sizes())
    mlflow_logger = MLflowTrialLogger(runs, exp_id, parent_run_id, sweep.sweep_tags,
                                      resuming=resume_parent_run_id is not None, dataset=dataset,
                                      flush_s=settings.metrics_flush_s)
    for callback in callbacks:  # callbacks that want each trial's MLflow run ids read them from the logger
        if hasattr(callback, "mlflow_logger"):
            callback.mlflow_logger = mlflow_logger
    sweep.callbacks = [mlflow_logger, *callbacks]
    phases, status = spec.plan(), "KILLED"  # (a cancel, Ctrl-C or SIGTERM stops the sweep between these lines)
    try:
        for search in phases.searches:
            sweep.fit("grid", splits, f"{search.activation}-{search.dropout:g}", search=search)
        if phases.grid:
            sweep.fit("grid", splits, "grid", points=phases.grid)
        if spec.until_decided and phases.grid and not sweep.errors:
            seed_rounds(sweep, splits, on_round)
        if phases.retrain_on_full and not sweep.errors:
            # GELU paper §3.5: the lr chosen on validation, then trained again on all the training data
            table = sweep_results(runs, sweep_id).table
            chosen = [(r.activation, r.dropout, r.lr) for r in table[table["lr_chosen"]].itertuples()]
            sweep.fit("retrain", splits.with_validation_in_training(), "retrain", points=phases.retrain_points(chosen))
        status = "FINISHED" if not sweep.errors else "FAILED"
        _log_summary(runs, sweep_id, parent_run_id, figures=not figures_later)
    except Exception as failure:
        status = "FAILED"
        try:  # the runs end FAILED; where even that fails (the store away, its disk full), the first cause is raised
            _end_runs(runs, sweep_id, parent_run_id, status)
        except Exception as exc:
            logger.warning("the runs of sweep %s could not be ended: %s", sweep_id, failure_reason(exc))
        raise failure
    except BaseException:  # Ctrl-C, a cancel's SIGTERM: the runs end KILLED
        _end_runs(runs, sweep_id, parent_run_id, status)
        raise
    _end_runs(runs, sweep_id, parent_run_id, status)  # whatever happened, every run ends FINISHED, FAILED or KILLED
    return SweepOutcome(sweep_id, parent_run_id, exp_id, sweep.trained, sweep.errors, len(sweep.reused),
                        sweep.first_error)


def round_state(results, spec: SweepSpec) -> dict:
    """After a look: its seeds, the claims decided and open, and the (activation, dropout) pairs
    that the open claims involve."""
    from service.reporting.sequential import claim_key, sequential_verdicts

    outcome = sequential_verdicts(results.runs[results.runs["phase"] == "grid"], spec.model_dump(mode="json"))
    found = outcome.numbers + outcome.claims
    pairs = set()
    for v in outcome.open_claims:
        for activation in (v.better, v.worse):  # a claim per dropout rate: that rate; else every rate tuned
            pairs |= {(activation, d) for d in spec.dropouts_of(activation) if v.dropout in (None, d)}
    return {"look": len(outcome.looks), "seeds": outcome.looks[-1], "max_seeds": outcome.max_seeds,
            "decided": {claim_key(v): v.verdict for v in found if v.verdict not in ("inconclusive", "diverged")},
            "open": [claim_key(v) for v in outcome.open_claims], "pairs": sorted(pairs)}


def seed_rounds(sweep: "_Sweep", splits: Splits, on_round: Callable[[dict, list[GridPoint]], None] | None) -> None:
    """until_decided: look at the claims; while some are open and seeds are left, train the next
    round's seeds for the configurations (every lr) the open claims involve, and look again."""
    spec = sweep.spec
    order, sizes = spec.sequential_seeds(), spec.look_sizes()
    for look, n in enumerate(sizes):
        state = round_state(sweep_results(sweep.runs, sweep.sweep_id), spec)
        last = look + 1 >= len(sizes) or not state["open"]
        points = [] if last else [GridPoint(a, lr, d, seed) for a, d in state["pairs"] for lr in spec.lr
                                  for seed in order[n:sizes[look + 1]]]
        if on_round:
            on_round(state, points)
        if last:
            return
        sweep.fit("grid", splits, f"grid-seeds-{sizes[look + 1]}", points=points)
        if sweep.errors:
            return


def median_metrics(results) -> dict[str, float]:
    """Each configuration's medians over seeds as metric names MLflow accepts and its UI sorts:
    ``median/test_error/gelu_tanh lr:0.001 d:0.5`` (the retraining phase's under ``median_retrain/``)."""
    found = {}
    for prefix, table in (("median", results.table), ("median_retrain", results.retrained)):
        if table is None or not len(table):
            continue
        for row in table.to_dict("records"):
            config = f"{row['activation']} lr:{row['lr']:g} d:{row['dropout']:g}"
            for metric in FINAL_METRICS:
                if metric in row and row[metric] == row[metric]:  # (NaN: no seed reported it)
                    found[f"{prefix}/{metric}/{config}"] = float(row[metric])
    return found


def _log_summary(runs: RunStore, sweep_id: str, parent_run_id: str, figures: bool = True) -> None:
    """The sweep's medians, report and (with ``figures``) figures, logged with its parent run (what
    MLflow's UI shows of the sweep); a figure or report that cannot be drawn is no failed sweep."""
    from service.reporting.render import render  # (scipy's statistics: needed only at the end)

    try:
        results = sweep_results(runs, sweep_id)
        runs.log_sweep_summary(parent_run_id, median_metrics(results), render(results, "md"))
        if figures:
            from service.reporting.figures import render_figures  # (matplotlib: a Ray job's driver draws none)

            runs.log_figures(parent_run_id, render_figures(results))
    except RunsUnavailable:
        raise
    except Exception as exc:
        logger.warning("the report of sweep %s could not be drawn: %s: %s", sweep_id, type(exc).__name__, exc)


def log_sweep_figures(tracking_uri: str, outcome: SweepOutcome) -> None:
    """The figures of a sweep run with ``figures_later``, logged with its parent run now (the CLI
    prints its tables first: matplotlib takes seconds to import and draw)."""
    from service.reporting.figures import render_figures  # (matplotlib: imported by the process that draws)

    runs = RunStore(tracking_uri)
    try:
        runs.log_figures(outcome.parent_run_id, render_figures(sweep_results(runs, outcome.sweep_id)))
    except RunsUnavailable:
        raise
    except Exception as exc:
        logger.warning("the figures of sweep %s could not be drawn: %s: %s", outcome.sweep_id, type(exc).__name__, exc)
