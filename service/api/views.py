"""Sweep records as the API shows them (the Public and Detail schemas)."""
from __future__ import annotations

from service.api.schemas import Links, Progress, SweepDetail, SweepPublic, TrialPublic
from service.control.local_head import dashboard_url_of
from service.records import SweepRecord, TrialCounts
from service.runs.links import experiment_link, run_link
from service.settings import Settings


def _progress(record: SweepRecord, counts: TrialCounts) -> Progress:
    total_epochs = record.trials_total * record.epochs
    return Progress(trials_total=record.trials_total, trials_done=counts.done, trial_epochs_done=counts.epochs_done,
                    trial_epochs_total=total_epochs,
                    fraction=round(counts.epochs_done / total_epochs, 4) if total_epochs else 1.0)


def _links(record: SweepRecord, settings: Settings) -> Links:
    dashboard, ui = dashboard_url_of(settings), settings.resolved_mlflow_ui_url
    exp, run = record.mlflow_experiment_id, record.mlflow_parent_run_id
    return Links(ray_dashboard=dashboard,
                 ray_job=f"{dashboard}/#/jobs/{record.ray_job_id}" if dashboard and record.ray_job_id else None,
                 mlflow_experiment=experiment_link(ui, exp, record.id) if exp else None,
                 mlflow_parent_run=run_link(ui, exp, run) if exp and run else None)


def to_public(record: SweepRecord, settings: Settings, counts: TrialCounts,
              queue: dict[str, int] | None = None) -> SweepPublic:
    """(``queue``: SweepStore.queue_positions, each waiting sweep's place.)"""
    return SweepPublic(id=record.id, name=record.name, experiment=record.experiment, quick=record.quick,
                       overrides=record.overrides, state=record.state, error=record.error,
                       created_at=record.created_at, started_at=record.started_at, finished_at=record.finished_at,
                       progress=_progress(record, counts), links=_links(record, settings),
                       sequential=record.sequential, plan=record.plan, queue_position=(queue or {}).get(record.id))


def to_detail(record: SweepRecord, settings: Settings, counts: TrialCounts,
              queue: dict[str, int] | None = None) -> SweepDetail:
    """(``record`` with its trials, as SweepStore.get gives it.)"""
    return SweepDetail(**to_public(record, settings, counts, queue).model_dump(), spec=record.spec,
                       trials=[TrialPublic.model_validate(t) for t in record.trials])
