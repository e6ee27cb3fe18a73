"""Reachability of the parts the service depends on, cheap and never blocking for long.

Each check has a short deadline (CHECK_TIMEOUT_S), no retries, and runs beside the others; a
check that has not answered by then counts as down. Answers are kept for ``health_cache_s``; while
one caller refreshes them, the others get the last answer at once instead of waiting on a lock.
Details never carry credentials: URLs are shown with their password masked.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from service.api.schemas import Health
from service.control.jobs import RayJobs, ray_auth_headers
from service.control.local_head import dashboard_url_of
from service.settings import Settings, mask_secrets

CHECK_TIMEOUT_S = 2.0
_checks = ThreadPoolExecutor(max_workers=6, thread_name_prefix="healthz")


def _ray(settings: Settings) -> dict:
    url = dashboard_url_of(settings)
    if url is None:
        return {"ok": False, "error": f"no Ray head started for {settings.root} yet"}
    answer = httpx.get(f"{url}/api/version", headers=ray_auth_headers(), timeout=CHECK_TIMEOUT_S)
    return {"ok": answer.status_code == 200, "dashboard": mask_secrets(url),
            **({} if answer.status_code == 200 else {"error": f"HTTP {answer.status_code}"})}


def _mlflow(settings: Settings) -> dict:
    uri = settings.resolved_tracking_uri
    if uri.startswith(("http://", "https://")):
        answer = httpx.get(f"{uri.rstrip('/')}/health", timeout=CHECK_TIMEOUT_S)
        return {"ok": answer.status_code == 200, "tracking_uri": mask_secrets(uri)}
    _ping_database(uri)
    return {"ok": True, "tracking_uri": mask_secrets(uri)}


def _ping_database(url: str) -> None:
    arguments = {"timeout": CHECK_TIMEOUT_S} if url.startswith("sqlite") else {"connect_timeout": int(CHECK_TIMEOUT_S)}
    engine = create_engine(url, connect_args=arguments, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def _database(settings: Settings) -> dict:
    _ping_database(settings.resolved_database_url)
    return {"ok": True, "url": mask_secrets(settings.resolved_database_url)}


def check_health(settings: Settings) -> Health:
    """Ray (the dashboard's job API), MLflow (its health route, or its database) and the sweep
    database (SELECT 1), side by side, each within CHECK_TIMEOUT_S."""
    futures = {name: _checks.submit(check, settings) for name, check in
               (("ray", _ray), ("mlflow", _mlflow), ("database", _database))}
    wait(futures.values(), timeout=CHECK_TIMEOUT_S + 0.5)
    found = {}
    for name, future in futures.items():
        if not future.done():
            found[name] = {"ok": False, "error": f"no answer within {CHECK_TIMEOUT_S:g} s"}
            continue
        try:
            found[name] = future.result()
        except Exception as exc:  # reported, not raised: health says what is down
            found[name] = {"ok": False, "error": mask_secrets(f"{type(exc).__name__}: {exc}".splitlines()[0])[:300]}
    ok = all(part["ok"] for part in found.values())
    return Health(status="ok" if ok else "degraded", **found)


class HealthProbe:
    """:func:`check_health`, run at most once every ``ttl_s`` seconds, and never by two callers at
    once: probes and dashboards that poll /healthz do not each become three checks, and no caller
    waits on another's check (it gets the last answer; only the very first caller checks itself)."""

    def __init__(self, ttl_s: float):
        self.ttl_s = ttl_s
        self._checked_at, self._health = float("-inf"), None
        self._checking = threading.Lock()

    def __call__(self, settings: Settings, jobs: RayJobs | None = None) -> Health:
        if time.monotonic() - self._checked_at >= self.ttl_s and self._checking.acquire(blocking=self._health is None):
            try:
                self._health = check_health(settings)
                self._checked_at = time.monotonic()
            finally:
                self._checking.release()
        return self._health
