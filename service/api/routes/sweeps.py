"""/sweeps: submit, list, inspect, cancel, results."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response, status
from fastapi.responses import HTMLResponse, PlainTextResponse

from service.api.deps import get_jobs, get_settings, get_store, require_token
from service.api.schemas import SweepCreate, SweepDetail, SweepPage, SweepPublic, TrialPage, TrialPublic
from service.api.views import to_detail, to_public
from service.control.jobs import RayJobs
from service.control.submission import SubmissionError, cancel_sweep, get_sweep, submit_sweep, sweep_figures
from service.records import SWEEP_STATES, TRIAL_STATES, SweepRecord, SweepStore, waits_for_a_slot
from service.runs.store import SweepNotFound
from service.settings import Settings

router = APIRouter(prefix="/sweeps", tags=["sweeps"], dependencies=[Depends(require_token)])


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=SweepPublic)
def create_sweep(body: SweepCreate, request: Request, response: Response,
                 idempotency_key: str | None = Header(default=None, max_length=200),
                 store: SweepStore = Depends(get_store), jobs: RayJobs = Depends(get_jobs),
                 settings: Settings = Depends(get_settings)):
    """Record the sweep, queued; its driver starts as soon as a slot is free (ACTSWEEP_MAX_RUNNING_SWEEPS),
    at once on an idle service, in the order sweeps were submitted."""
    record, replayed = submit_sweep(store, jobs, settings, body, idempotency_key)
    _wake(request)
    response.headers["Location"] = f"/sweeps/{record.id}"
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return to_public(record, settings, store.trial_counts([record.id])[record.id], _places(store, [record]))


@router.get("", response_model=SweepPage)
def list_sweeps(offset: int = Query(0, ge=0, le=1_000_000_000), limit: int = Query(20, ge=1, le=200),
                state: Literal[SWEEP_STATES] | None = None,  # type: ignore[valid-type]
                store: SweepStore = Depends(get_store), settings: Settings = Depends(get_settings)):
    records, total = store.page(offset, limit, state)
    counts, queue = store.trial_counts([r.id for r in records]), _places(store, records)
    return SweepPage(items=[to_public(r, settings, counts[r.id], queue) for r in records], total=total, offset=offset,
                     limit=limit)


@router.get("/{sweep_id}", response_model=SweepDetail)
def read_sweep(sweep_id: str, store: SweepStore = Depends(get_store), settings: Settings = Depends(get_settings)):
    """The sweep as its record says (a read changes nothing: the reconciler keeps the record true)."""
    record = get_sweep(store, sweep_id)
    return to_detail(record, settings, store.trial_counts([sweep_id])[sweep_id], _places(store, [record]))


@router.get("/{sweep_id}/trials", response_model=TrialPage)
def list_trials(sweep_id: str, offset: int = Query(0, ge=0, le=1_000_000_000), limit: int = Query(100, ge=1, le=1000),
                state: Literal[TRIAL_STATES] | None = None,  # type: ignore[valid-type]
                store: SweepStore = Depends(get_store)):
    """The sweep's trials in grid order, a page at a time (a large sweep's detail is long)."""
    get_sweep(store, sweep_id, with_trials=False)
    trials, total = store.trial_page(sweep_id, offset, limit, state)
    return TrialPage(items=[TrialPublic.model_validate(t) for t in trials], total=total, offset=offset, limit=limit)


@router.delete("/{sweep_id}", status_code=status.HTTP_202_ACCEPTED, response_model=SweepPublic)
def delete_sweep(sweep_id: str, request: Request, store: SweepStore = Depends(get_store),
                 jobs: RayJobs = Depends(get_jobs), settings: Settings = Depends(get_settings)):
    """Cancel the sweep: a waiting one at once (it never gets a driver); a running one's driver is
    stopped, and its slot goes to the next waiting sweep."""
    record = cancel_sweep(store, jobs, settings, sweep_id)
    _wake(request)
    return to_public(record, settings, store.trial_counts([sweep_id])[sweep_id])


def _wake(request: Request) -> None:
    """Have this API's dispatcher look for a sweep to start now (not at its next look)."""
    dispatcher = getattr(request.app.state, "reconciler", None)
    if dispatcher is not None:
        dispatcher.wake()


def _places(store: SweepStore, records: list[SweepRecord]) -> dict[str, int]:
    """The queue's places, asked of the database only where one of ``records`` waits for a slot."""
    return store.queue_positions() if any(waits_for_a_slot(r) for r in records) else {}


def _results(store: SweepStore, settings: Settings, sweep_id: str):
    # (the reporting modules are imported where a route asks for them: serve starts without scipy.stats)
    from service.reporting.results import sweep_results

    get_sweep(store, sweep_id, with_trials=False)
    try:
        return sweep_results(settings.resolved_tracking_uri, sweep_id)
    except SweepNotFound:
        raise SubmissionError(404, f"sweep {sweep_id} has no runs in MLflow yet") from None


@router.get("/{sweep_id}/results")
def read_results(sweep_id: str, format: Literal["json", "md", "csv"] = "json",
                 store: SweepStore = Depends(get_store), settings: Settings = Depends(get_settings)):
    from service.reporting.render import render
    from service.reporting.report import to_json

    results = _results(store, settings, sweep_id)
    if format == "json":
        return to_json(results)
    media = "text/markdown" if format == "md" else "text/csv"
    return PlainTextResponse(render(results, format), media_type=media)


@router.get("/{sweep_id}/report", response_class=HTMLResponse)
def read_report(sweep_id: str, store: SweepStore = Depends(get_store), settings: Settings = Depends(get_settings)):
    """The sweep's HTML report: tables, figures, spec, code version, hardware, MLflow links."""
    from service.reporting.render import render

    results = _results(store, settings, sweep_id)
    figures = sweep_figures(settings, results)
    return HTMLResponse(render(results, "html", figures, settings.resolved_mlflow_ui_url))


@router.get("/{sweep_id}/figures/{name}.png", response_class=Response,
            responses={200: {"content": {"image/png": {}}}})
def read_figure(sweep_id: str, name: str = Path(pattern=r"^[a-z0-9_]{1,64}$"), store: SweepStore = Depends(get_store),
                settings: Settings = Depends(get_settings)):
    """One figure of the sweep (``curves_<metric>``, ``robustness``, ``unit_activation``) as PNG."""
    figures = sweep_figures(settings, _results(store, settings, sweep_id))
    if f"{name}.png" not in figures:
        raise SubmissionError(404, f"name: sweep {sweep_id} has no figure {name!r}; it has: "
                                   f"{', '.join(sorted(n.removesuffix('.png') for n in figures)) or 'none yet'}")
    return Response(figures[f"{name}.png"], media_type="image/png")
