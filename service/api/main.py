"""Builds the FastAPI app; nothing else."""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.api.health import HealthProbe
from service.api.routes import experiments, health, sweeps
from service.orchestration.jobs import RayJobs
from service.orchestration.records import SweepStore
from service.orchestration.submission import SubmissionError
from service.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.jobs.ensure_cluster()  # a local Ray head is started once and outlives the API
        yield

    app = FastAPI(title="actsweep", version="0.1.0", lifespan=lifespan,
                  description="Activation × lr × dropout × seed sweeps on Ray Tune, tracked in MLflow.")
    app.state.settings = settings
    app.state.store = SweepStore(settings.resolved_database_url)
    app.state.jobs = RayJobs(settings)
    app.state.health_probe = HealthProbe(settings.health_cache_s)

    @app.exception_handler(SubmissionError)
    async def submission_error(request: Request, exc: SubmissionError):
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)

    app.include_router(health.router)
    app.include_router(experiments.router)
    app.include_router(sweeps.router)
    return app
