"""/healthz: can the service reach Ray, MLflow and its database? (no auth)"""
from fastapi import APIRouter, Depends, Response

from service.api.deps import get_jobs, get_settings, get_store
from service.api.schemas import Health
from service.health import check_health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(response: Response, settings=Depends(get_settings), store=Depends(get_store), jobs=Depends(get_jobs)):
    health = check_health(settings, store, jobs)
    if health.status != "ok":
        response.status_code = 503
    return health
