"""/healthz: can the service reach Ray, MLflow and its database? (no auth)"""
from fastapi import APIRouter, Depends, Request, Response

from service.api.deps import get_jobs, get_settings, get_store
from service.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(request: Request, response: Response, settings=Depends(get_settings), store=Depends(get_store),
            jobs=Depends(get_jobs)):
    health = request.app.state.health_probe(settings, store, jobs)  # at most once per ACTSWEEP_HEALTH_CACHE_S
    if health.status != "ok":
        response.status_code = 503
    return health
