"""The sweep spec: one typed, serialisable description of an experiment.

A spec is written in YAML (one file per experiment in this folder), overridden field by field
from the CLI (``--set lr=0.001,0.0001``) or REST (``"overrides": {"lr": [0.001, 0.0001]}``) with
the same names, and validated here. Unknown keys and bad values are rejected with a message that
names the field.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, field_validator

from workers.activations import ACTIVATIONS
from workers.datasets import DATASETS

ActivationName = Literal[ACTIVATIONS]  # type: ignore[valid-type]
DatasetName = Literal[DATASETS]  # type: ignore[valid-type]
GRID_AXES = ("activation", "lr", "dropout")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(StrictModel):
    kind: Literal["mlp"] = "mlp"
    depth: int = Field(8, ge=1, le=200)  # hidden layers
    width: int = Field(128, ge=1, le=65536)  # units per hidden layer
    init: Literal["unit_norm_rows", "he", "torch_default"] = "unit_norm_rows"


class Protocol(StrictModel):
    """How the reported number is chosen; shown in every report."""

    aggregate: Literal["median"] = "median"  # over seeds, per (activation, dropout, lr)
    select_lr_by: Literal["val_loss", "val_error"] = "val_loss"  # on held-out validation, never test
    headline_metric: str = "test_error"
    notes: list[str] = []


class Execution(StrictModel):
    cpus_per_trial: PositiveFloat = 1.0
    gpus_per_trial: NonNegativeFloat = 0.0  # fractions let several trials share one GPU
    max_concurrent_trials: PositiveInt | None = None


class PaperNumber(StrictModel):
    """A number the paper reports, for the report to print beside ours."""

    activation: ActivationName
    metric: str
    value: float
    dropout: float | None = None
    note: str = ""


class SweepSpec(StrictModel):
    """One experiment: data, model, training settings, the grid, and the protocol."""

    name: str = Field(pattern=r"^[a-z0-9_]+$")
    title: str = ""
    paper: Literal["gelu", "elu", "custom"] = "custom"
    section: str = ""

    # data
    dataset: DatasetName
    val_size: PositiveInt = 5000  # held out of the training set (GELU paper §3.1: 5k)
    train_subset: PositiveInt | None = None  # use only this many training examples (quick runs)

    # model and training
    model: ModelSpec = ModelSpec()
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: NonNegativeFloat = 0.0
    weight_decay: NonNegativeFloat = 0.0
    epochs: int = Field(ge=1, le=10_000)
    batch_size: int = Field(ge=1, le=1_000_000)

    # the grid: activation × lr × dropout × seed
    activation: list[ActivationName] = Field(min_length=1)
    lr: list[PositiveFloat] = Field(min_length=1)
    dropout: list[float] = Field(default=[0.0], min_length=1)
    # a count (seeds 0..n-1) or explicit seeds
    seeds: Annotated[int, Field(ge=1, le=1000)] | Annotated[list[int], Field(min_length=1, max_length=1000)] = 1

    protocol: Protocol = Protocol()
    claims: list[str] = []
    paper_numbers: list[PaperNumber] = []
    execution: Execution = Execution()

    @field_validator("activation", "lr", "dropout", mode="before")
    @classmethod
    def _scalar_is_one_point_axis(cls, value):
        return value if isinstance(value, (list, tuple)) else [value]

    @field_validator("dropout")
    @classmethod
    def _dropout_in_unit_interval(cls, value: list[float]) -> list[float]:
        for p in value:
            if not 0.0 <= p < 1.0:
                raise ValueError(f"each dropout rate must be in [0, 1) (got {p})")
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value):
        if isinstance(value, list) and (not value or len(set(value)) != len(value)):
            raise ValueError("seeds: a positive count or a list of distinct integers")
        return value

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def trial_count(self) -> int:
        return len(self.activation) * len(self.lr) * len(self.dropout) * len(self.seed_list)

    def grid_points(self) -> list[dict]:
        """Every trial of the sweep, in a fixed order: activation, dropout, lr, then seed."""
        return [{"activation": a, "dropout": d, "lr": lr, "seed": seed}
                for a in self.activation for d in self.dropout for lr in self.lr for seed in self.seed_list]

    def trial_base(self) -> dict:
        """The settings every trial of the sweep shares (the grid axes are added per trial)."""
        return {
            "experiment": self.name, "dataset": self.dataset, "model": self.model.model_dump(),
            "optimizer": self.optimizer, "momentum": self.momentum, "weight_decay": self.weight_decay,
            "epochs": self.epochs, "batch_size": self.batch_size,
            "cpus_per_trial": self.execution.cpus_per_trial,
            "gpus_per_trial": self.execution.gpus_per_trial,
        }
