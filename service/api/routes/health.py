"""/healthz: can the service reach Ray, MLflow and its database? (no auth)"""
from fastapi import APIRouter, Depends, Request, Response

from service.api.deps import get_settings
from service.api.schemas import Health, Queue

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(request: Request, response: Response, settings=Depends(get_settings)):
    health = request.app.state.health_probe(settings)  # at most once per ACTSWEEP_HEALTH_CACHE_S, never waiting
    if health.status != "ok":
        response.status_code = 503
    return health.model_copy(update={"queue": _queue(request)})


def _queue(request: Request) -> Queue | None:
    """How many sweeps have a driver, how many wait, and K, as the dispatcher saw them at its last look
    (a fraction of a second ago; nothing asked here). None before its first look."""
    dispatcher = getattr(request.app.state, "reconciler", None)
    seen = dispatcher.queue if dispatcher is not None else None
    return Queue(running=seen[0], waiting=seen[1], max_running=seen[2]) if seen else None
