"""Builds the FastAPI app; nothing else."""
from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from service.api.health import HealthProbe
from service.api.routes import experiments, health, sweeps
from service.control.jobs import ClusterUnreachable, RayJobs
from service.control.reconciler import Reconciler
from service.control.submission import SubmissionError
from service.control.worker import WORKER
from service.records import SweepStore
from service.runs.store import RunStore, RunsUnavailable, configure_mlflow_client
from service.settings import Settings, get_settings, mask_secrets

logger = logging.getLogger("actsweep.api")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_mlflow_client(settings.mlflow_http_retries, settings.mlflow_http_timeout_s)  # (a 503 in seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # (`actsweep serve` has joined the cluster, or started this home's head, before the app starts)
        try:  # the MLflow store's schema made once, here: drivers started at once raced to migrate a new one
            RunStore(settings.resolved_tracking_uri).ping()
        except RunsUnavailable as exc:
            logger.warning("the MLflow store does not answer yet (%s); sweeps will wait for it", mask_secrets(str(exc)))
        # (also the dispatcher of waiting sweeps: POST /sweeps wakes it)
        app.state.reconciler = reconciler = Reconciler(app.state.store, app.state.jobs, settings).start()
        yield
        reconciler.stop()
        WORKER.close()  # the worker process, if a request started one

    app = FastAPI(title="actsweep", version="0.1.0", lifespan=lifespan,
                  description="Activation × lr × dropout × seed sweeps on Ray Tune, tracked in MLflow.")
    app.state.settings = settings
    app.state.store = SweepStore(settings.resolved_database_url)
    app.state.jobs = RayJobs(settings)
    app.state.health_probe = HealthProbe(settings.health_cache_s)

    @app.exception_handler(SubmissionError)
    async def submission_error(request: Request, exc: SubmissionError):
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)

    # A dependency that does not answer is a 503 that says which (never a 500, never its credentials);
    # nothing stored is touched.
    @app.exception_handler(RunsUnavailable)
    async def mlflow_down(request: Request, exc: RunsUnavailable):
        return JSONResponse({"detail": f"the MLflow store at {mask_secrets(settings.resolved_tracking_uri)} did not "
                                       f"answer; try again later"}, status_code=503)

    @app.exception_handler(OperationalError)
    async def database_down(request: Request, exc: OperationalError):
        return JSONResponse({"detail": f"the sweep database at {mask_secrets(settings.resolved_database_url)} did not "
                                       f"answer; try again later"}, status_code=503)

    @app.exception_handler(ClusterUnreachable)
    async def ray_down(request: Request, exc: ClusterUnreachable):
        return JSONResponse({"detail": f"{mask_secrets(str(exc))}; try again later"}, status_code=503)

    app.include_router(health.router)
    app.include_router(experiments.router)
    app.include_router(sweeps.router)
    return app
