"""/healthz: can the service reach Ray, MLflow and its database? (no auth)"""
from fastapi import APIRouter, Depends, Request, Response

from service.api.deps import get_settings
from service.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(request: Request, response: Response, settings=Depends(get_settings)):
    health = request.app.state.health_probe(settings)  # at most once per ACTSWEEP_HEALTH_CACHE_S, never waiting
    if health.status != "ok":
        response.status_code = 503
    return health
