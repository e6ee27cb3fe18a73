"""Dependencies shared by the routers: settings, the store, the Ray jobs client, auth."""
from __future__ import annotations

import hmac

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.control.jobs import RayJobs
from service.records import SweepStore
from service.settings import Settings

bearer = HTTPBearer(auto_error=False)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> SweepStore:
    return request.app.state.store


def get_jobs(request: Request) -> RayJobs:
    return request.app.state.jobs


def require_token(settings: Settings = Depends(get_settings),
                  credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    """When ACTSWEEP_API_TOKEN is set, require ``Authorization: Bearer <token>`` (constant-time compare)."""
    if settings.api_token is None:
        return
    expected = settings.api_token.get_secret_value().encode()
    given = credentials.credentials.encode() if credentials else b""
    if not hmac.compare_digest(given, expected):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})
