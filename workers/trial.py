"""A trial as a type: its grid point, everything that changes its training, and fused packs of them.

Torch-free: the spec and its plan (search_spaces), the driver, the MLflow logger, the REST trial
list and the aggregator use these types without loading a model. One pair of functions turns
them into a Ray Tune config and back (:func:`tune_config`, :func:`members`), and one into MLflow
params (:func:`mlflow_params`).

A Tune trial's config is the sweep's shared settings at the top level, the placement fields
(``experiment``, ``phase``, resources, ``checkpoint_root``) beside them, and under ``point``
either one grid point or ``{"pack": [points]}`` for a fused pack. Under an lr search ``point``
holds Tune's search domain for the lr, and Tune's Repeater numbers the seeds
(``__trial_index__`` picks from ``seeds``).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from workers.activation_defs import ActivationDef, parse_name

POINT_FIELDS = ("activation", "lr", "dropout", "seed")
# A resumed trial reports its last REPORTED_AGAIN epochs again (workers.trainable): the driver's
# MLflow logger keeps at most REPORTED_AGAIN - 1 of a run's epochs unwritten (service.runs.logger),
# so no epoch that a dead driver held is lost.
REPORTED_AGAIN = 8
KEY_FIELD = "cache_key"  # a grid point's trial-cache key, beside it in a Tune config
# fields of a Tune config that place or label a trial without changing what it computes
# settings that place or label a trial without changing its numbers (CUDA graphs replay the eager
# step's kernels: tests/workers/test_graphs.py)
NOT_TRAINING = frozenset({"experiment", "cpus_per_trial", "gpus_per_trial", "cuda_graphs"})
WORKERS = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def training_code_version() -> str:
    """A hash of the training code itself (every source file of workers/): the trial cache's key
    changes whenever the code that computes a trial does, with nothing to remember to bump."""
    digest = hashlib.sha256()
    for path in sorted(WORKERS.rglob("*.py")):
        digest.update(str(path.relative_to(WORKERS)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True, order=True)
class GridPoint:
    """One point of the grid and one seed."""

    activation: str
    lr: float
    dropout: float
    seed: int

    @classmethod
    def of(cls, values: dict) -> "GridPoint":
        """From any mapping holding the four fields (a Tune config, run tags as strings, a record)."""
        return cls(str(values["activation"]), float(values["lr"]), float(values["dropout"]), int(values["seed"]))

    def key(self) -> tuple[str, float, float, int]:
        return (self.activation, self.dropout, self.lr, self.seed)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def run_name(self) -> str:
        return f"{self.activation} lr={self.lr:g} d={self.dropout:g} s={self.seed}"

    def __str__(self) -> str:
        return f"({self.activation}, lr {self.lr:g}, dropout {self.dropout:g}, seed {self.seed})"


@dataclass(frozen=True)
class Pack:
    """Grid points trained together as one batched model (workers.fused): one Tune trial."""

    points: tuple[GridPoint, ...]


@dataclass(frozen=True)
class TrialConfig:
    """Everything that determines one trial's training: a grid point plus the spec's settings."""

    activation: str
    lr: float
    dropout: float
    seed: int
    epochs: int
    batch_size: int
    task: str = "classify"  # or "reconstruct" (autoencoders: MSE to the input)
    optimizer: str = "adam"
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    schedule: dict = field(default_factory=lambda: {"kind": "constant"})
    augment: dict = field(default_factory=dict)  # {"crop_padding": 4, "flip": true} for images
    eval_noise: tuple = ()  # GELU paper Fig. 3: test inputs plus Unif[-a, a] noise, per a
    activation_stats: bool = False  # ELU paper Fig. 2: median over units of the mean activation
    eval_train: bool = True  # measure the whole training set in eval mode every epoch (train_loss_eval)
    top5: bool = False  # also the top-5 error of validation and test (ImageNet)
    model: dict = field(default_factory=lambda: {"kind": "mlp", "depth": 8, "width": 128, "init": "unit_norm_rows"})
    # ELU paper §4.3 fine-tuning: from an iteration on, a stacked convnet's dropout on every layer
    # of a stack (or its last) with rates scaled; see workers.models.StackedConvNet.set_dropout
    fine_tune: tuple = ()
    expressions: dict = field(default_factory=dict)  # the sweep's expression activations: name → normal form
    dtype: str = "fp32"  # matmul precision: fp32, bf16 (autocast, fp32 master weights) or tf32 (CUDA)
    compile: bool = False  # fused packs: the training step under torch.compile
    cuda_graphs: bool = True  # fused packs on a GPU: the training step captured as a CUDA graph (workers.graphs)

    @classmethod
    def from_config(cls, config: dict) -> "TrialConfig":
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in config.items() if k in names}
        for name in ("eval_noise", "fine_tune"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

    @property
    def activation_def(self) -> ActivationDef:
        """The activation as a definition (family and parameters, or expression)."""
        return parse_name(self.activation, self.expressions)

    @property
    def point(self) -> GridPoint:
        return GridPoint(self.activation, self.lr, self.dropout, self.seed)

    def with_point(self, point: GridPoint) -> "TrialConfig":
        return replace(self, **point.as_dict())


# -- Ray Tune ---------------------------------------------------------------------------------------

def tune_config(settings: dict, unit: GridPoint | Pack | dict, **placement) -> dict:
    """A Tune trial's config: the shared ``settings``, ``placement`` (phase, checkpoint_root, ...),
    and ``unit`` under ``point``: a grid point, a pack, or (for an lr search) a point whose lr is
    Tune's search domain. A grid point may carry its ``trial_key`` (service.runs.cache)."""
    return {**settings, **placement, "point": _point_entry(unit)}


def _point_entry(unit) -> dict:
    if isinstance(unit, Pack):
        return {"pack": [_point_entry(p) for p in unit.points]}
    if isinstance(unit, GridPoint):
        return unit.as_dict()
    return dict(unit)  # a point with extra fields (trial_key) or a search domain


def members(config: dict) -> list[dict]:
    """The settings of each grid point a Tune trial trains (one, or a fused pack's members), each
    with its point at the top level. Under a search, repeat i of a suggestion runs seed i."""
    point = config.get("point", {})
    base = {k: v for k, v in config.items() if k != "point"}
    if "pack" in point:
        return [{**base, **member} for member in point["pack"]]
    settings = {**base, **point}
    if "__trial_index__" in config:
        settings["seed"] = config["seeds"][config["__trial_index__"]]
    return [settings]


def is_pack(config: dict) -> bool:
    return "pack" in config.get("point", {})


def member_results(result: dict) -> list[tuple[int, dict]]:
    """(member index, metrics) for each member a Tune result reports on: a pack's ``members``, as
    [index, metrics] pairs (or, as reported before, {"index": metrics}), or the result itself."""
    if "members" not in result:
        return [(0, result)]
    found = result["members"]
    pairs = found.items() if isinstance(found, dict) else found
    return sorted(((int(i), metrics) for i, metrics in pairs), key=lambda pair: pair[0])


# -- MLflow and the trial cache ------------------------------------------------------------------------

def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def mlflow_params(member: dict) -> dict[str, str]:
    """A member's settings as MLflow params (nested blocks as dotted names)."""
    logged = {k: v for k, v in member.items() if k not in ("point", KEY_FIELD, "checkpoint_root")}
    return {k: str(v) for k, v in flatten(logged).items()}


def trial_key(settings: dict, point: GridPoint, data: dict, execution: dict | None = None) -> str:
    """The trial cache's key of one trial: a hash of its training settings (a spec's
    ``trial_base()``; fields that only place or label it are left out), its grid point, the data
    it sees (dataset, source and a fingerprint of its values, split sizes, preprocessing, phase),
    how it runs where that changes its numbers (``execution``: per trial or fused, dtype), and the
    training code's own hash (:func:`training_code_version`). The activation counts as its
    definition (family, parameters, learnable ones, an expression's normal form), not its label."""
    expressions = settings.get("expressions") or {}
    identity = {"code": training_code_version(), "execution": execution or {},
                "settings": {k: v for k, v in settings.items() if k not in NOT_TRAINING and k != "expressions"},
                "activation": parse_name(point.activation, expressions).identity(),
                "data": data, "point": {"activation": point.activation, "dropout": point.dropout, "lr": point.lr,
                                        "seed": point.seed}}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:32]
