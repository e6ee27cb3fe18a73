"""Reachability of the parts the service depends on."""
from __future__ import annotations

import threading
import time

from service.api.schemas import Health
from service.orchestration.jobs import RayJobs
from service.orchestration.records import SweepStore
from service.runs.store import RunStore
from service.settings import Settings


def _check(probe) -> dict:
    try:
        return {"ok": True, **(probe() or {})}
    except Exception as exc:  # reported, not raised: health says what is down
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def check_health(settings: Settings, store: SweepStore, jobs: RayJobs) -> Health:
    """Ray (the dashboard's job API), MLflow (a search) and the sweep database (SELECT 1)."""
    ray = jobs.ping()
    mlflow = _check(RunStore(settings.resolved_tracking_uri).ping)
    database = _check(store.ping)
    ok = ray["ok"] and mlflow["ok"] and database["ok"]
    return Health(status="ok" if ok else "degraded", ray=ray, mlflow=mlflow, database=database)


class HealthProbe:
    """:func:`check_health`, run at most once every ``ttl_s`` seconds: probes and dashboards that
    poll /healthz do not each become three calls to Ray, MLflow and the database (under load,
    concurrent callers wait for the one check in progress and share its answer)."""

    def __init__(self, ttl_s: float):
        self.ttl_s = ttl_s
        self._checked_at, self._health = float("-inf"), None
        self._lock = threading.Lock()

    def __call__(self, settings: Settings, store: SweepStore, jobs: RayJobs) -> Health:
        with self._lock:
            if time.monotonic() - self._checked_at >= self.ttl_s:
                self._health = check_health(settings, store, jobs)
                self._checked_at = time.monotonic()
            return self._health
