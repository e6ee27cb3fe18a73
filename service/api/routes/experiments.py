"""/experiments: the catalog."""
from fastapi import APIRouter, Depends

from search_spaces import catalog
from service.api.deps import require_token
from service.api.schemas import ExperimentPublic

router = APIRouter(prefix="/experiments", tags=["experiments"], dependencies=[Depends(require_token)])


@router.get("", response_model=list[ExperimentPublic])
def list_experiments():
    return catalog()
