"""What the REST routes do: submit, read and cancel sweeps (plain functions, no HTTP)."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Protocol

import psutil

from search_spaces import SpecError, SweepSpec, load_catalog_spec, parse_spec_text, spec_from_mapping
from service.control.jobs import TERMINAL_JOB_STATES, ClusterUnreachable, RayJobs
from service.control.reconciler import reconcile
from service.control.worker import WORKER, WorkerDied
from service.patience import poll
from service.records import (TERMINAL_STATES, DuplicateIdempotencyKey, SweepRecord, SweepStore, new_sweep_id,
                             utcnow)
from service.reporting.aggregate import SweepResults
from service.runs.store import RunStore
from service.settings import Settings
from workers.memory_floor import memory_floor_refusal


class SweepRequest(Protocol):
    """What a submission asks for (the REST body, service.api.schemas.SweepCreate)."""

    experiment: str | None
    spec: dict | str | None
    quick: bool
    overrides: dict[str, Any]
    name: str | None
    rerun: bool
    until_decided: Any  # None, or an object with max_seeds and seeds_per_round


class SubmissionError(Exception):
    """A request that cannot be carried out; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, detail):
        super().__init__(str(detail))
        self.status, self.detail = status, detail


def _spec_errors(exc: SpecError, inline: bool) -> list[dict]:
    detail = []
    for error in exc.errors:
        loc = list(error["loc"])
        if loc[:1] in (["experiment"], ["spec"]):
            where = ["body", *loc[:1]]
        else:
            where = ["body", "spec" if inline else "overrides", *loc]
        detail.append({"loc": where, "msg": error["msg"], "type": "value_error"})
    return detail


def _unprocessable(loc: list, msg: str) -> SubmissionError:
    return SubmissionError(422, [{"loc": loc, "msg": msg, "type": "value_error"}])


def resolve_spec(body: SweepRequest) -> SweepSpec:
    """The spec a request asks for: a catalog experiment by name, or a spec body sent inline. Never a
    path on this machine."""
    overrides = {**body.overrides, **({"execution.rerun": True} if body.rerun else {})}
    if body.until_decided is not None:
        overrides["until_decided"] = {"max_seeds": body.until_decided.max_seeds,
                                      "seeds_per_round": body.until_decided.seeds_per_round}
    inline = body.spec is not None
    try:
        if inline:
            raw = parse_spec_text(body.spec) if isinstance(body.spec, str) else body.spec
            return spec_from_mapping(raw, "spec", body.quick, overrides)
        return load_catalog_spec(body.experiment, body.quick, overrides)
    except SpecError as exc:
        raise SubmissionError(422, _spec_errors(exc, inline)) from None


def check_confined(spec: SweepSpec, settings: Settings, inline: bool) -> None:
    """Every path a spec names stays inside the data roots (ACTSWEEP_DATA_DIR, ACTSWEEP_DATA_ROOTS)."""
    path = spec.data_options.embeddings
    if path is not None and not settings.within_data_roots(path):
        raise _unprocessable(["body", "spec" if inline else "overrides", "data_options", "embeddings"],
                             "a file inside the data directory (ACTSWEEP_DATA_DIR, or one of ACTSWEEP_DATA_ROOTS)")


def cluster_nodes(jobs: RayJobs) -> list[dict[str, float]] | None:
    """Each alive node's resources, asked once per submission; None where the cluster is away (the
    submission itself will say so)."""
    try:
        return jobs.node_resources()
    except ClusterUnreachable:
        return None


def check_schedulable(spec: SweepSpec, nodes: list[dict[str, float]] | None) -> None:
    """A trial that no node of the cluster can hold would wait forever: refused now."""
    if nodes is None:
        return
    for resource, asked, field in (("CPU", spec.execution.cpus_per_trial, "cpus_per_trial"),
                                   ("GPU", spec.execution.gpus_per_trial, "gpus_per_trial")):
        largest = max((node.get(resource, 0.0) for node in nodes), default=0.0)
        if asked != "auto" and asked > largest:  # (auto: the plan asks for what the cluster has)
            raise _unprocessable(["body", "overrides", f"execution.{field}"],
                                 f"at most {largest:g}: the largest node of the cluster has {largest:g} {resource}")


def check_runnable(spec: SweepSpec, nodes: list[dict[str, float]] | None, settings: Settings, inline: bool) -> None:
    """A broken activation expression or plugin (f or f′ not finite on a probe tensor), a trial too
    large for the largest node's memory (this machine's, where the cluster is away), or a sweep over
    ACTSWEEP_MAX_SWEEP_PFLOP is refused now, not found in every trial. Decided by workers.admission in
    the worker process (torch, the meta device: nothing is allocated), not in this one."""
    memory = max((node.get("memory", 0.0) for node in nodes or []), default=0.0)
    floor = memory_floor_refusal(spec, memory or psutil.virtual_memory().total)  # (here, without torch: at once)
    if floor is not None:
        raise _unprocessable(["body", "spec" if inline else "overrides", floor[0]], floor[1])
    try:
        refused = WORKER.call("workers.admission", "refusal", spec, memory or psutil.virtual_memory().total,
                              settings.max_sweep_pflop * 1e15)
    except WorkerDied as exc:
        raise SubmissionError(503, f"{exc}; submit again") from None
    if refused is not None:
        field, reason = refused
        raise _unprocessable(["body", "spec" if inline else "overrides", field], reason)


def request_hash(body: SweepRequest) -> str:
    """What an Idempotency-Key is bound to: the request's content."""
    content = {"experiment": body.experiment, "spec": body.spec, "quick": body.quick, "overrides": body.overrides,
               "name": body.name, "rerun": body.rerun,
               **({"until_decided": [body.until_decided.max_seeds, body.until_decided.seeds_per_round]}
                  if body.until_decided is not None else {})}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


def _replay(store: SweepStore, settings: Settings, key: str, digest: str) -> SweepRecord | None:
    """The sweep an Idempotency-Key made, if the request is the same and the key still holds: a
    sweep that failed, or stayed queued past ACTSWEEP_IDEMPOTENCY_QUEUED_S, lets it go."""
    first = store.by_idempotency_key(key)
    if first is None:
        return None
    if first.request_hash != digest:
        raise SubmissionError(409, "Idempotency-Key: already used with another request body; use a new key")
    queued_for = (utcnow() - _utc(first.created_at)).total_seconds()
    # (a sweep waiting for a slot, without a driver yet, is not stuck: its key holds while it waits)
    stuck = first.state == "queued" and first.ray_job_id is not None and queued_for > settings.idempotency_queued_s
    if first.state == "failed" or stuck:
        store.release_idempotency_key(first.id)
        return None
    return first


def _utc(moment):
    return moment.replace(tzinfo=dt.timezone.utc) if moment.tzinfo is None else moment


def submit_sweep(store: SweepStore, jobs: RayJobs, settings: Settings, body: SweepRequest,
                 idempotency_key: str | None = None) -> tuple[SweepRecord, bool]:
    """Validate and record a sweep, ``queued``; returns (record, replayed). Its driver is started by
    the dispatcher (service.control.reconciler.dispatch) when a slot is free, first recorded first:
    the caller wakes it. A repeated Idempotency-Key with the same request returns the first sweep
    made with it; with another request, 409."""
    digest = request_hash(body)
    if idempotency_key:
        first = _replay(store, settings, idempotency_key, digest)
        if first is not None:
            return first, True
    spec = resolve_spec(body)
    if spec.trial_count > settings.max_trials_per_sweep:  # counted from the axes: no grid built yet
        raise _unprocessable(["body", "spec" if body.spec is not None else "overrides"],
                             f"the grid has {spec.trial_count} trials; at most {settings.max_trials_per_sweep} per "
                             f"sweep (ACTSWEEP_MAX_TRIALS_PER_SWEEP)")
    check_confined(spec, settings, body.spec is not None)
    nodes = cluster_nodes(jobs)
    check_schedulable(spec, nodes)
    # one request at a time (the worker's calls go in turn): concurrent probes and meta steps in request
    # threads broke each other's backward passes ("currently running autograd.grad()") under 50 POSTs
    check_runnable(spec, nodes, settings, body.spec is not None)
    record = SweepRecord(id=new_sweep_id(), name=body.name, experiment=spec.name, quick=body.quick,
                         overrides=body.overrides, spec=spec.model_dump(mode="json"), state="queued",
                         trials_total=spec.trial_count, epochs=spec.epochs, idempotency_key=idempotency_key,
                         request_hash=digest)
    try:
        return store.create(record, [p.as_dict() for p in spec.grid_points()]), False
    except DuplicateIdempotencyKey:  # a concurrent request with the same key won the race
        return _replay(store, settings, idempotency_key, digest) or store.by_idempotency_key(idempotency_key), True


def cancel_sweep(store: SweepStore, jobs: RayJobs, settings: Settings, sweep_id: str,
                 wait_s: float = 20.0) -> SweepRecord:
    """Stop a sweep's driver; trials that finished stay in MLflow, running ones end KILLED. A sweep
    still waiting for a slot is cancelled at once, and never gets a driver."""
    record = get_sweep(store, sweep_id, with_trials=False)
    if record.state in TERMINAL_STATES:
        raise SubmissionError(409, f"sweep {sweep_id} already {record.state}")
    if record.ray_job_id is None and store.cancel_waiting(sweep_id):
        return store.get(sweep_id, with_trials=False)  # (one conditional write: a dispatcher cannot start it now)
    asked = False
    if record.state == "queued":  # a dispatcher gave it a driver meanwhile, which Ray may not know yet: asked
        store.update(sweep_id, cancel_requested=True)  # first, a driver not found ends it cancelled, not failed
        asked = True
    record = reconcile(store, jobs, store.get(sweep_id, with_trials=False))  # (no restart: it is being cancelled)
    if record.state in TERMINAL_STATES and not (asked and record.state == "cancelled"):
        raise SubmissionError(409, f"sweep {sweep_id} already {record.state}")
    store.update(sweep_id, cancel_requested=True)
    if record.ray_job_id:
        try:
            jobs.stop(record.ray_job_id)
        except RuntimeError as exc:  # Ray refuses to stop a job that has ended or that it does not know
            if jobs.status(record.ray_job_id) not in TERMINAL_JOB_STATES | {None}:
                raise SubmissionError(503, f"the Ray cluster did not stop the sweep's driver "
                                           f"({record.ray_job_id}): {exc}".splitlines()[0]) from exc
        poll(lambda: _driver_gone(jobs, record.ray_job_id), wait_s, every_s=0.5)
    if store.get(sweep_id).state not in TERMINAL_STATES:
        store.finish(sweep_id, "cancelled")
    RunStore(settings.resolved_tracking_uri).end_open_runs(sweep_id, "KILLED")
    return store.update(sweep_id, runs_ended=True)


def sweep_figures(settings: Settings, results: SweepResults) -> dict[str, bytes]:
    """The sweep's figures (PNG by file name): those its driver logged with the parent run at the end,
    or for a sweep still running, drawn now from its runs so far by the worker process."""
    logged = RunStore(settings.resolved_tracking_uri).figures(results.parent_run_id)
    if logged:
        return logged
    try:
        return WORKER.call("service.reporting.figures", "render_figures", results)
    except WorkerDied as exc:
        raise SubmissionError(503, f"{exc}; ask again") from None


def _driver_gone(jobs: RayJobs, job_id: str) -> bool:
    try:
        return jobs.status(job_id) in TERMINAL_JOB_STATES | {None}
    except ClusterUnreachable:
        return True  # (nothing to wait for: the record says cancelled either way)


def get_sweep(store: SweepStore, sweep_id: str, with_trials: bool = True) -> SweepRecord:
    record = store.get(sweep_id, with_trials)
    if record is None:
        raise SubmissionError(404, f"no sweep {sweep_id!r}")
    return record
