"""Reachability of the parts the service depends on."""
from __future__ import annotations

from mlflow.tracking import MlflowClient

from service.api.schemas import Health
from service.jobs import RayJobs
from service.settings import Settings
from service.store import SweepStore


def _check(probe) -> dict:
    try:
        return {"ok": True, **(probe() or {})}
    except Exception as exc:  # reported, not raised: health says what is down
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def check_health(settings: Settings, store: SweepStore, jobs: RayJobs) -> Health:
    """Ray (the dashboard's job API), MLflow (a search) and the sweep database (SELECT 1)."""
    ray = jobs.ping()
    mlflow = _check(lambda: MlflowClient(settings.resolved_tracking_uri).search_experiments(max_results=1) and None)
    database = _check(store.ping)
    ok = ray["ok"] and mlflow["ok"] and database["ok"]
    return Health(status="ok" if ok else "degraded", ray=ray, mlflow=mlflow, database=database)
