"""What the REST routes do: submit, cancel and refresh sweeps (plain functions, no HTTP)."""
from __future__ import annotations

import time
from typing import Any, Protocol

from search_spaces import SpecError, load_spec
from service.orchestration.jobs import TERMINAL_JOB_STATES, RayJobs, job_id_for, restart_count
from service.orchestration.records import TERMINAL_STATES, DuplicateIdempotencyKey, SweepRecord, SweepStore
from service.orchestration.sweeps import new_sweep_id
from service.runs.store import RunStore
from service.settings import Settings


class SweepRequest(Protocol):
    """What a submission asks for (the REST body, service.api.schemas.SweepCreate)."""

    experiment: str
    quick: bool
    overrides: dict[str, Any]
    name: str | None
    rerun: bool


class SubmissionError(Exception):
    """A request that cannot be carried out; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, detail):
        super().__init__(str(detail))
        self.status, self.detail = status, detail


def _spec_errors(exc: SpecError) -> list[dict]:
    detail = []
    for error in exc.errors:
        loc = list(error["loc"])
        where = ["body", "experiment"] if loc[:1] == ["experiment"] else ["body", "overrides", *loc]
        detail.append({"loc": where, "msg": error["msg"], "type": "value_error"})
    return detail


def submit_sweep(store: SweepStore, jobs: RayJobs, settings: Settings, body: SweepRequest,
                 idempotency_key: str | None = None) -> tuple[SweepRecord, bool]:
    """Validate, record and start a sweep; returns (record, replayed). A repeated
    Idempotency-Key returns the first sweep made with it."""
    if idempotency_key:
        first = store.by_idempotency_key(idempotency_key)
        if first is not None:
            return first, True
    try:
        spec = load_spec(body.experiment, quick=body.quick,
                         overrides={**body.overrides, **({"execution.rerun": True} if body.rerun else {})})
    except SpecError as exc:
        raise SubmissionError(422, _spec_errors(exc)) from None
    if spec.trial_count > settings.max_trials_per_sweep:
        raise SubmissionError(422, [{"loc": ["body", "overrides"], "type": "value_error",
                                     "msg": f"the grid has {spec.trial_count} trials; at most "
                                            f"{settings.max_trials_per_sweep} per sweep (ACTSWEEP_MAX_TRIALS_PER_SWEEP)"}])
    record = SweepRecord(id=new_sweep_id(), name=body.name, experiment=spec.name, quick=body.quick,
                         overrides=body.overrides, spec=spec.model_dump(mode="json"), state="queued",
                         trials_total=spec.trial_count, epochs=spec.epochs, idempotency_key=idempotency_key)
    try:
        record = store.create(record, [p.as_dict() for p in spec.grid_points()])
    except DuplicateIdempotencyKey:  # a concurrent request with the same key won the race
        return store.by_idempotency_key(idempotency_key), True
    try:
        job_id = jobs.submit(record.id)
    except Exception as exc:
        store.finish(record.id, "failed", error=f"could not start the Ray job: {exc}".splitlines()[0])
        raise SubmissionError(503, f"the Ray cluster at {settings.ray_dashboard_url} did not take the sweep: "
                                   f"{type(exc).__name__}") from exc
    return store.update(record.id, ray_job_id=job_id), False


def refresh(store: SweepStore, jobs: RayJobs, record: SweepRecord, settings: Settings | None = None) -> SweepRecord:
    """The record, corrected where its driver ended without saying so (killed, lost).

    A running sweep whose driver died is continued by a new driver (service.orchestration.driver
    restores its Tune experiments), up to ``settings.driver_restarts`` times; after that it is failed."""
    if record.state in TERMINAL_STATES or not record.ray_job_id:
        return record
    status = jobs.status(record.ray_job_id)
    if status is not None and status not in TERMINAL_JOB_STATES:
        return record
    record = store.get(record.id)  # the driver may have finished between the two reads
    if record.state in TERMINAL_STATES:
        return record
    restarts = restart_count(record.ray_job_id)
    if record.cancel_requested:
        store.finish(record.id, "cancelled")
    elif record.state == "running" and settings is not None and restarts < settings.driver_restarts:
        try:
            return store.update(record.id, ray_job_id=jobs.submit(record.id, restarts + 1))
        except Exception as exc:
            if jobs.status(job_id_for(record.id, restarts + 1)) is not None:  # a concurrent request restarted it
                return store.update(record.id, ray_job_id=job_id_for(record.id, restarts + 1))
            store.finish(record.id, "failed", error=f"the sweep's driver died and could not be restarted: {exc}"
                         .splitlines()[0])
    else:
        store.finish(record.id, "failed", error=f"the sweep's driver (Ray job {record.ray_job_id}) ended "
                                                 f"with status {status or 'unknown to the cluster'}")
    return store.get(record.id)


def cancel_sweep(store: SweepStore, jobs: RayJobs, settings: Settings, sweep_id: str,
                 wait_s: float = 20.0) -> SweepRecord:
    """Stop a sweep's driver; trials that finished stay in MLflow, running ones end KILLED."""
    record = refresh(store, jobs, get_sweep(store, sweep_id))  # (no restart: it is being cancelled)
    if record.state in TERMINAL_STATES:
        raise SubmissionError(409, f"sweep {sweep_id} already {record.state}")
    store.update(sweep_id, cancel_requested=True)
    if record.ray_job_id:
        try:
            jobs.stop(record.ray_job_id)
        except Exception:  # already gone: nothing to stop
            pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and jobs.status(record.ray_job_id) not in TERMINAL_JOB_STATES:
            time.sleep(0.5)
    if store.get(sweep_id).state not in TERMINAL_STATES:
        store.finish(sweep_id, "cancelled")
    RunStore(settings.resolved_tracking_uri).kill_open_runs(sweep_id)
    return store.get(sweep_id)


def get_sweep(store: SweepStore, sweep_id: str) -> SweepRecord:
    record = store.get(sweep_id)
    if record is None:
        raise SubmissionError(404, f"no sweep {sweep_id!r}")
    return record
