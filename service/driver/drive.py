"""The driver of one submitted sweep (``python -m service.driver SWEEP_ID``, a Ray job: __main__.py).

It reads the sweep record, runs the sweep (service.driver.sweeps.run_sweep), and writes the sweep's
and every trial's state back to the record as it goes. Started for a sweep whose record says
``running``, it replaces a driver that died (service.control.reconciler starts it): the sweep
continues from Tune's experiment state and its MLflow runs, and finished trials are not rerun.
It imports neither torch nor matplotlib: the trials train in Ray's workers, the footprints are
measured by Ray tasks (service.driver.observations), and a sweep's figures are drawn by whoever
asks for them.
"""
from __future__ import annotations

import signal
import sys

from search_spaces import SweepSpec
from service.driver.sweeps import failure_reason, run_sweep
from service.driver.trial_states import TrialStateRecorder
from service.records import TERMINAL_STATES, SweepStore, utcnow
from service.runs.store import RunStore
from service.settings import get_settings
from workers.trial import GridPoint


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # Ray stops a job with SIGTERM: stop Tune as on Ctrl-C


def drive(sweep_id: str) -> int:
    settings = get_settings()
    store = SweepStore(settings.resolved_database_url, patience_s=settings.outage_patience_s)
    record = store.get(sweep_id)
    if record is None:
        print(f"no sweep {sweep_id} in {settings.resolved_database_url}", file=sys.stderr)
        return 2
    if record.state in TERMINAL_STATES:  # cancelled before the job started
        return 0
    resume_parent_run_id = record.mlflow_parent_run_id if record.state == "running" else None
    if resume_parent_run_id is None and not store.transition(sweep_id, "running", started_at=utcnow()):
        return 0  # cancelled (or failed) while its job was starting
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        spec = SweepSpec.model_validate(record.spec)
        positions = {GridPoint(trial.activation, trial.lr, trial.dropout, trial.seed).key(): trial.position for trial in record.trials}
        outcome = run_sweep(
            spec, settings, sweep_id=sweep_id, quick=record.quick, name=record.name,
            callbacks=(TrialStateRecorder(settings.resolved_database_url,
                                          RunStore(settings.resolved_tracking_uri, patience_s=settings.outage_patience_s),
                                          sweep_id, positions, patience_s=settings.outage_patience_s),),
            on_parent_run=lambda exp_id, run_id: store.update(
                sweep_id, mlflow_experiment_id=exp_id, mlflow_parent_run_id=run_id),
            on_reused=lambda reused: _record_reused(store, sweep_id, positions, reused, spec.epochs),
            on_round=lambda state, points: _record_round(store, sweep_id, positions, state, points),
            on_plan=lambda plan: store.update(sweep_id, plan=plan.as_dict()),
            resume_parent_run_id=resume_parent_run_id,
            figures_later=True)  # (no matplotlib here: the API draws a sweep's figures when asked, in its worker)
    except KeyboardInterrupt:
        store.finish(sweep_id, "cancelled")
        return 0
    except Exception as exc:
        store.finish(sweep_id, "failed", error=failure_reason(exc))
        raise
    if store.get(sweep_id).cancel_requested:
        store.finish(sweep_id, "cancelled")
    elif outcome.errors:
        store.finish(sweep_id, "failed", error=f"{outcome.errors} of {outcome.trials} trials failed; the first: "
                                               f"{outcome.first_error}")
    else:
        store.finish(sweep_id, "succeeded")
    return 0


def _record_round(store: SweepStore, sweep_id: str, positions: dict, state: dict, points) -> None:
    """until_decided: the look's state on the record, and the next round's trials as pending ones
    (a replaced driver finds those it had added already)."""
    store.update(sweep_id, sequential={k: v for k, v in state.items() if k != "pairs"})
    new = [p for p in points if p.key() not in positions]
    if new:
        positions.update(store.add_trials(sweep_id, [p.as_dict() for p in new]))


def _record_reused(store: SweepStore, sweep_id: str, positions: dict, reused, epochs: int) -> None:
    for trial in reused:
        position = positions.get(trial.point.key())
        if position is not None and trial.phase == "grid":
            metrics = {k: v for k, v in trial.metrics.items() if k.endswith(("_loss", "_error", "_eval"))}
            store.update_trial(sweep_id, position, state="reused", epoch=epochs, metrics=metrics,
                               mlflow_run_id=trial.run_id)

