"""The API's one background loop: it keeps each sweep's record true to its driver, whether or not
anybody reads the sweep.

Every ``settings.reconcile_s`` seconds, the API replica that holds the ``reconciler`` lease (one
row in the sweep database, renewed each round: two replicas never act on one sweep) looks at every
sweep not yet over and

- restarts a driver that died (a new Ray job that restores the sweep's Tune experiments), up to
  ``settings.driver_restarts`` times, and fails the sweep after that;
- submits the driver of a sweep left queued without one (an API that died between recording the
  sweep and submitting it);
- ends the MLflow runs that a sweep which did not succeed left open.

Reads (``GET /sweeps/{id}``) have no side effects: they show what the record says.
"""
from __future__ import annotations

import logging
import threading
import uuid

from service.control.jobs import TERMINAL_JOB_STATES, ClusterUnreachable, RayJobs, job_id_for, restart_count
from service.records import TERMINAL_STATES, SweepRecord, SweepStore, utcnow
from service.runs.store import RunStore, RunsUnavailable
from service.settings import Settings

logger = logging.getLogger("actsweep.reconciler")
LEASE = "reconciler"
UNSUBMITTED_GRACE_S = 120.0  # a queued sweep without a Ray job this long after it was recorded is submitted


def reconcile(store: SweepStore, jobs: RayJobs, record: SweepRecord, settings: Settings | None = None) -> SweepRecord:
    """The record, corrected where its driver ended without saying so (killed, lost).

    With ``settings``, a running sweep whose driver died is continued by a new driver
    (service.driver restores its Tune experiments), up to ``settings.driver_restarts``
    times; after that, or without ``settings`` (a sweep being cancelled), it is failed."""
    if record.state in TERMINAL_STATES or not record.ray_job_id:
        return record
    try:
        info = jobs.info(record.ray_job_id)
    except ClusterUnreachable:  # a blip in the cluster's reachability is no verdict: ask again next round
        return record
    status = info["status"] if info else None
    if status is not None and status not in TERMINAL_JOB_STATES:
        return record
    record = store.get(record.id, with_trials=False)  # the driver may have finished between the two reads
    if record.state in TERMINAL_STATES:
        return record
    restarts = restart_count(record.ray_job_id)
    if record.cancel_requested:
        store.finish(record.id, "cancelled")
    elif record.state in ("queued", "running") and settings is not None and restarts < settings.driver_restarts:
        return _restart(store, jobs, record, restarts + 1)
    else:
        why = ((info or {}).get("message") or "").strip().splitlines()
        store.finish(record.id, "failed", error=f"the sweep's driver (Ray job {record.ray_job_id}) ended with status "
                                                 f"{status or 'unknown to the cluster'}" + (f": {why[0][:400]}" if why else ""))
    return store.get(record.id, with_trials=False)


def _restart(store: SweepStore, jobs: RayJobs, record: SweepRecord, restart: int) -> SweepRecord:
    job_id = job_id_for(record.id, restart)
    try:
        jobs.submit(record.id, restart, experiment=record.experiment)
    except ClusterUnreachable:
        return record  # no verdict: the next round tries again
    except RuntimeError as exc:  # Ray refused the job: one with this id exists already (another replica's)
        try:
            exists = jobs.status(job_id) is not None
        except ClusterUnreachable:
            return record
        if not exists:
            store.finish(record.id, "failed", error=f"the sweep's driver died and could not be restarted: {exc}"
                         .splitlines()[0])
            return store.get(record.id, with_trials=False)
    logger.info("sweep %s: its driver had died; restarted as Ray job %s", record.id, job_id)
    return store.update(record.id, ray_job_id=job_id)


def _submit_unsubmitted(store: SweepStore, jobs: RayJobs, record: SweepRecord) -> None:
    created = record.created_at if record.created_at.tzinfo else record.created_at.replace(tzinfo=utcnow().tzinfo)
    if (utcnow() - created).total_seconds() < UNSUBMITTED_GRACE_S:
        return  # its submission may still be under way
    try:
        jobs.submit(record.id, experiment=record.experiment)
    except ClusterUnreachable:
        return
    except RuntimeError:  # submitted meanwhile (the id is taken): adopt it
        if jobs.status(job_id_for(record.id)) is None:
            return
    logger.info("sweep %s: recorded but never submitted; submitted now", record.id)
    store.update(record.id, ray_job_id=job_id_for(record.id))


def reconcile_all(store: SweepStore, jobs: RayJobs, settings: Settings) -> list[str]:
    """One round over every sweep that is not over; the ids of the sweeps whose record changed."""
    changed = []
    for record in store.open_sweeps():
        if record.ray_job_id is None:
            if record.state == "queued" and not record.cancel_requested:
                _submit_unsubmitted(store, jobs, record)
            continue
        after = reconcile(store, jobs, record, settings)
        if (after.state, after.ray_job_id) != (record.state, record.ray_job_id):
            changed.append(record.id)
    for record in store.sweeps_with_open_runs():
        if record.mlflow_parent_run_id is None:  # it never opened a run: nothing to end
            store.update(record.id, runs_ended=True)
            continue
        try:
            RunStore(settings.resolved_tracking_uri).end_open_runs(record.id, "KILLED" if record.state in (
                "cancelled", "interrupted") else "FAILED")
        except RunsUnavailable:
            break  # MLflow is away: the next round ends them
        store.update(record.id, runs_ended=True)
    return changed


class Reconciler:
    """:func:`reconcile_all` every ``settings.reconcile_s`` seconds on a daemon thread, by whichever
    API process holds the lease; an error in one round is logged and the next round runs."""

    def __init__(self, store: SweepStore, jobs: RayJobs, settings: Settings):
        self.store, self.jobs, self.settings = store, jobs, settings
        self.owner = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="reconciler", daemon=True)

    def start(self) -> "Reconciler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        try:
            self.store.release_lease(LEASE, self.owner)
        except Exception as exc:  # the database is away: the lease simply expires
            logger.warning("could not release the reconciler lease: %s", type(exc).__name__)

    def run_once(self) -> list[str] | None:
        """One round if this process holds the lease (None where another does)."""
        if not self.store.acquire_lease(LEASE, self.owner, ttl_s=3 * self.settings.reconcile_s + 30):
            return None
        return reconcile_all(self.store, self.jobs, self.settings)

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.reconcile_s):
            try:
                self.run_once()
            except Exception:  # the database or the cluster away for a while: say so, and go on next round
                logger.warning("reconciler round failed; retrying in %g s", self.settings.reconcile_s,
                               exc_info=True)
