"""Request and response bodies (Create/Public pairs)."""
from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class UntilDecidedCreate(BaseModel):
    """Seeds until the claims are decided: rounds of ``seeds_per_round`` more seeds for the
    configurations of undecided claims, up to ``max_seeds`` (docs/statistics.md)."""

    model_config = ConfigDict(extra="forbid")

    max_seeds: int = Field(default=20, ge=2, le=1000)
    seeds_per_round: int = Field(default=2, ge=1, le=1000)


class SweepCreate(BaseModel):
    """``POST /sweeps``: a catalog experiment (or a spec of one's own, sent inline), optionally its
    quick variant, and overrides by the same field names as the CLI's ``--set`` (grid axes as lists)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra={"examples": [
        {"experiment": "mnist_classification", "quick": True,
         "overrides": {"epochs": 2, "lr": [0.001], "activation": ["gelu", "relu"]}, "name": "first try"}]})

    experiment: str | None = Field(default=None, min_length=1, max_length=200,
                                   description="a name from GET /experiments (or send `spec`)")
    spec: dict[str, Any] | Annotated[str, Field(max_length=100_000)] | None = Field(
        default=None, description="a spec of your own instead of `experiment`: a mapping, or its YAML text")
    quick: bool = False
    overrides: dict[str, Any] = Field(default_factory=dict, max_length=200,
                                      description="spec fields by name, as `--set`")
    name: str | None = Field(default=None, max_length=200)
    rerun: bool = Field(default=False, description="train every trial even where an identical one already "
                                                   "finished (otherwise its run is reused and the trial says so)")
    until_decided: UntilDecidedCreate | None = Field(
        default=None, description="after the spec's seeds, add seeds in rounds until every claim is decided")

    @model_validator(mode="after")
    def _one_spec(self) -> "SweepCreate":
        if (self.experiment is None) == (self.spec is None):
            raise ValueError("give either `experiment` (a catalog name) or `spec` (a spec of your own), not both")
        return self


class Progress(BaseModel):
    trials_total: int
    trials_done: int  # succeeded, reused, diverged or failed
    trial_epochs_done: int
    trial_epochs_total: int
    fraction: float


class Links(BaseModel):
    ray_dashboard: str | None
    ray_job: str | None
    mlflow_experiment: str | None
    mlflow_parent_run: str | None


class TrialPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    position: int
    activation: str
    lr: float
    dropout: float
    seed: int
    state: str
    epoch: int
    metrics: dict[str, float | None]
    mlflow_run_id: str | None


class SweepPublic(BaseModel):
    id: str
    name: str | None
    experiment: str
    quick: bool
    overrides: dict[str, Any]
    state: Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]
    error: str | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    progress: Progress
    links: Links
    # until_decided: the last look: {look, seeds, max_seeds, decided: {claim: verdict}, open: [claims]}
    sequential: dict[str, Any] | None = None
    # the execution plan, once the driver has resolved it: mode, packs, GPU share, memory, and why
    # each `auto` resolved so (service/driver/execution_plan.py); null while queued
    plan: dict[str, Any] | None = None
    # a sweep waiting for a slot (ACTSWEEP_MAX_RUNNING_SWEEPS): its place in the queue, 1 the next to
    # start; null when it is not waiting (it has a driver, or it is over)
    queue_position: int | None = None

    @field_validator("created_at", "started_at", "finished_at")
    @classmethod
    def _utc(cls, value: dt.datetime | None) -> dt.datetime | None:
        # SQLite hands back naive datetimes; every time stored is UTC
        return value.replace(tzinfo=dt.timezone.utc) if value and value.tzinfo is None else value


class SweepDetail(SweepPublic):
    spec: dict[str, Any]
    trials: list[TrialPublic]


class TrialPage(BaseModel):
    items: list[TrialPublic]
    total: int
    offset: int
    limit: int


class SweepPage(BaseModel):
    items: list[SweepPublic]
    total: int
    offset: int
    limit: int


class ExperimentPublic(BaseModel):
    name: str
    title: str
    paper: str
    section: str
    dataset: str
    epochs: int
    grid: dict[str, Any]
    trials: int
    quick_trials: int


class Queue(BaseModel):
    """The home's sweeps: how many have a driver now, how many wait for a slot, and the most at once."""

    running: int
    waiting: int
    max_running: int


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    ray: dict[str, Any]
    mlflow: dict[str, Any]
    database: dict[str, Any]
    queue: Queue | None = None  # as the dispatcher last saw it (null before its first look)
