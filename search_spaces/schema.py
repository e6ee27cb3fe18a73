"""The sweep spec: one typed, serialisable description of an experiment.

A spec is written in YAML (one file per experiment in this folder), overridden field by field
from the CLI (``--set lr=0.001,0.0001``) or REST (``"overrides": {"lr": [0.001, 0.0001]}``) with
the same names, and validated here. Unknown keys and bad values are rejected with a message that
names the field.
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import (AliasChoices, BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat,
                      ValidationInfo, field_validator, model_validator)

from search_spaces.plan import LrSearch, Plan
from workers.activation_defs import ActivationError, expand_entry, parse_name
from workers.registry import DATASETS, FUSABLE_MODELS, MODELS, OWN_VALIDATION
from workers.trial import GridPoint, TrialConfig, members, tune_config

# a canonical activation name (workers.activation_defs): relu, gelu(sigma=0.5), an expression's name;
# SweepSpec._canonical_activations writes every way of naming one in a spec as this
ActivationName = Annotated[str, Field(min_length=1, max_length=300)]
DatasetName = Literal[DATASETS.names()]  # type: ignore[valid-type]


MAX_TRIALS = 100_000  # the largest grid a spec may describe (a service may allow fewer: ACTSWEEP_MAX_TRIALS_PER_SWEEP)
Short = Annotated[str, Field(max_length=2000)]


class StrictModel(BaseModel):
    # unknown keys rejected; inf and NaN are no numbers (1e309 reads as inf)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _distinct(values: list) -> list:
    """A grid axis lists each value once: [0.001, 1e-3] is one lr written twice."""
    seen = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{value!r} appears twice; list each value once")
        seen.add(value)
    return values


class ModelSpec(StrictModel):
    """The network; which fields a kind reads is said in workers/models.py."""

    kind: Literal[MODELS.names()] = "mlp"  # type: ignore[valid-type]
    depth: int = Field(8, ge=1, le=200)  # hidden layers (mlp, window_tagger); layers (wide_resnet: 6n+4)
    width: int = Field(128, ge=1, le=65536)  # units per hidden layer; first conv width (cifar_shallow)
    init: Literal["unit_norm_rows", "he", "torch_default"] = "unit_norm_rows"
    hidden: Annotated[list[Annotated[int, Field(ge=1, le=65536)]], Field(max_length=32)] = [1000, 500, 250, 30]  # autoencoder: encoder widths
    embedding_dim: int = Field(50, ge=1, le=4096)  # window_tagger
    input_noise: NonNegativeFloat = 0.15  # cifar_shallow: std of the Gaussian input noise
    widen_factor: int = Field(4, ge=1, le=32)  # wide_resnet
    width_scale: PositiveFloat = 1.0  # stacked_conv: scales every layer's width (1 = the paper's)
    # stacked_conv (ELU paper §4.2, §4.3, §4.3.1): per stack, groups [layers, channels, receptive field];
    # a 2×2 max pool after each stack; dropout after each stack's last layer at its stack_dropout rate
    stacks: Annotated[list[Annotated[list[tuple[Annotated[int, Field(ge=1, le=64)], Annotated[int, Field(ge=1, le=65536)],
                                               Annotated[int, Field(ge=1, le=15)]]], Field(max_length=16)]],
                      Field(max_length=32)] = []
    stack_dropout: Annotated[list[Annotated[float, Field(ge=0, lt=1)]], Field(max_length=32)] = []
    first_stride: int = Field(1, ge=1, le=8)  # stacked_conv: the stride of the first convolution
    spp_levels: Annotated[list[Annotated[int, Field(ge=1, le=16)]], Field(max_length=8)] = []  # stacked_conv: spatial pyramid pooling bins
    fc: Annotated[list[Annotated[int, Field(ge=1, le=65536)]], Field(max_length=16)] = []  # stacked_conv: fully connected widths before the read-out
    fc_dropout: float = Field(0.0, ge=0, lt=1)  # stacked_conv: dropout after each of those

    @field_validator("stack_dropout")
    @classmethod
    def _a_rate_per_stack(cls, value: list[float], info: ValidationInfo) -> list[float]:
        stacks = info.data.get("stacks") or []
        if stacks and len(value) != len(stacks):
            raise ValueError(f"model.stack_dropout: one rate per stack ({len(stacks)} stacks, got {len(value)} rates)")
        return value


class DataOptions(StrictModel):
    gcn: bool = False  # global contrast normalisation (CIFAR)
    zca: bool = False  # ZCA whitening fitted on the training split (CIFAR)
    zca_eps: PositiveFloat = 1e-2
    embeddings: str | None = None  # twitter_pos: a word2vec text file to start the embeddings from
    embedding_dim: int = Field(50, ge=1, le=4096)  # of that file
    min_count: int = Field(1, ge=1)  # twitter_pos: rarer training words become <unk>
    image_size: int = Field(256, ge=8, le=4096)  # imagenet: every image resized to this square
    crop: int = Field(224, ge=8, le=4096)  # imagenet: the central crop evaluated (training crops: augment.crop_size)


class Schedule(StrictModel):
    """The lr over training, moved every step; see workers.train.lr_factor. Its positions
    (start, t0, milestones) count epochs, or optimiser steps with ``unit: iteration``."""

    kind: Literal["constant", "linear_decay", "cosine", "step", "piecewise"] = "constant"
    unit: Literal["epoch", "iteration"] = "epoch"
    start: float = Field(0, ge=0, validation_alias=AliasChoices("start", "start_epoch"))  # linear_decay
    t0: float | None = Field(None, gt=0)  # cosine: first period (default: all of training)
    t_mult: int = Field(1, ge=1)  # cosine
    milestones: Annotated[list[Annotated[float, Field(ge=0)]], Field(max_length=100)] = []  # step, piecewise: where the lr changes
    gamma: PositiveFloat = 0.1  # step: the factor at each milestone
    factors: Annotated[list[NonNegativeFloat], Field(max_length=101)] = []  # piecewise: multiples of the lr before, between and after milestones

    @field_validator("factors")
    @classmethod
    def _a_factor_per_piece(cls, value: list[float], info: ValidationInfo) -> list[float]:
        if info.data.get("kind") == "piecewise" and len(value) != len(info.data.get("milestones", [])) + 1:
            raise ValueError("schedule.factors: piecewise takes one factor more than milestones")
        return value


class Augment(StrictModel):
    crop_padding: int = Field(0, ge=0, le=16)  # random crops of the zero-padded image
    crop_size: int = Field(0, ge=0, le=4096)  # random crops of this size from a larger image (ImageNet: 224)
    flip: bool = False  # random horizontal flips


class FineTunePhase(StrictModel):
    """ELU paper §4.3: from an iteration on, a stacked convnet's dropout moves (workers.models.StackedConvNet)."""

    from_iteration: int = Field(ge=0)
    dropout_on: Literal["last_layer", "every_layer"] = "every_layer"  # of each stack
    dropout_scale: float = Field(1.0, gt=0, le=10)  # multiplies every stack's rate


class Protocol(StrictModel):
    """How the reported number is chosen; shown in every report."""

    aggregate: Literal["median"] = "median"  # over seeds, per (activation, dropout, lr)
    select_lr_by: Literal["val_loss", "val_error"] = "val_loss"  # on held-out validation, never test
    headline_metric: str = "test_error"
    # final: the last epoch's metrics; best_val_epoch: the test metric at the epoch of lowest
    # validation error (GELU paper §3.4, TIMIT)
    report_epoch: Literal["final", "best_val_epoch"] = "final"
    # GELU paper §3.5 (CIFAR-10): after choosing the lr on validation, train again on all the
    # training data and report that run's test error
    retrain_on_full: bool = False
    # the verdicts (service.reporting.statistics, docs/statistics.md): the family-wise error rate
    # of a record's claims (Holm), and the smallest effect of interest, as a fraction of the
    # comparator's median: the margin of a "ties or outperforms" claim, and the effect below which
    # an undecided claim is called too small to chase with more seeds
    alpha: float = Field(0.05, gt=0, lt=0.5)
    smallest_effect: float = Field(0.02, gt=0, lt=1)
    # why that smallest effect (where it comes from: a scale the paper gives, a difference it reports);
    # it is also δ of the equivalence test ("equivalent": the mean paired difference within ±δ)
    smallest_effect_why: Short = ""
    notes: Annotated[list[Short], Field(max_length=100)] = []


class UntilDecided(StrictModel):
    """Seeds until the claims are decided (docs/statistics.md): after the spec's seeds, rounds of
    ``seeds_per_round`` more for the configurations an undecided claim involves, up to ``max_seeds``;
    each round is a look of a group-sequential design (service.reporting.sequential)."""

    max_seeds: int = Field(20, ge=2, le=1000)
    seeds_per_round: int = Field(2, ge=1, le=1000)


class Execution(StrictModel):
    # Three settings default to auto: the driver resolves them once, before Tune starts, from what the
    # cluster reports and the spec (service/driver/execution_plan.py; `actsweep plan` prints how).
    # An explicit value wins.
    # per_trial: one Tune trial per grid point. fused: grid points packed pack_size at a time into
    # one Tune trial that trains them as one batched model (workers.fused); each stays its own run.
    # auto: fused where the model fuses (MLP, autoencoder; no augment, search, fine_tune or top5), else per_trial
    mode: Literal["auto", "per_trial", "fused"] = "auto"
    # grid points per fused pack; auto: the most that fit in the pack's memory (workers.pack_memory)
    pack_size: int | Literal["auto"] = "auto"
    # pack_size auto: the bytes a pack may hold, in GB; unset: gpus_per_trial of the GPU's memory
    # less 15% headroom, or on CPUs half the memory free on the node shared by the packs at once
    pack_memory_gb: float | None = Field(None, gt=0, le=100_000)
    # a trial on CPUs may allocate at most this many GB beyond what its process held when it started
    # (its own RLIMIT_DATA): an allocation past it fails, and the trial ends FAILED, saying so, alone.
    # Unset: 3 × its estimated footprint + 2 GB (workers/footprint.py), per-trial mode on CPUs
    memory_limit_gb: float | None = Field(None, gt=0, le=100_000)
    cpus_per_trial: float = Field(1.0, gt=0, le=1024)  # per Tune trial: a grid point, or a whole fused pack
    # fractions let several trials share one GPU; auto: a GPU wherever the cluster has one, each pack or
    # trial the share that its footprint and CUDA context leave (0 on a cluster without GPUs)
    gpus_per_trial: float | Literal["auto"] = "auto"
    max_concurrent_trials: Annotated[int, Field(ge=1, le=100_000)] | None = None
    rerun: bool = False  # train every trial, even one whose identical twin already finished (the trial cache)
    # a failed trial (a lost worker node, a crashed process) is retried this many times (Tune's
    # FailureConfig); each retry resumes from the checkpoint of its last finished epoch
    max_failures: Annotated[int, Field(ge=0, le=100)] = 3
    # matmul precision. fp32; bf16: autocast matmuls in bfloat16 with fp32 master weights and
    # optimiser state, masks and data order as in fp32 (for exploratory sweeps: docs/speed.md
    # measures what it costs in accuracy); tf32: CUDA's TF32 matmuls (on a CPU the same as fp32)
    dtype: Literal["fp32", "bf16", "tf32"] = "fp32"
    # fused packs: the training step (layers, activations, masks, loss) under torch.compile, which
    # fuses the elementwise work into fewer kernels; off by default (docs/speed.md: measured here)
    compile: bool = False
    # fused packs on a GPU: the training step (forward, backward, optimiser) captured once as a CUDA
    # graph and replayed, one launch a step (workers/graphs.py); eager where capture fails or cannot
    # apply, and the trial's record says why. Ignored on a CPU
    cuda_graphs: bool = True

    @field_validator("gpus_per_trial", mode="before")
    @classmethod
    def _gpus_per_trial(cls, value):
        if value == "auto":
            return value
        try:
            number = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is not None and 0 <= number <= 64:
            return number
        raise ValueError("accepted: a number from 0 to 64 (a fraction shares one GPU), or auto")

    @field_validator("pack_size", mode="before")
    @classmethod
    def _pack_size(cls, value):
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 256):
            return value
        raise ValueError("accepted: an integer from 1 to 256, or auto")


class Search(StrictModel):
    """A search over the lr instead of the lr grid: Optuna (Ray Tune's OptunaSearch) suggests
    ``num_samples`` lrs per (activation, dropout); each suggestion runs once per seed (Tune's
    Repeater), and Optuna learns from the mean over seeds of ``metric`` (validation, never test)."""

    lr_low: PositiveFloat
    lr_high: PositiveFloat
    log: bool = True  # log-uniform
    num_samples: int = Field(8, ge=1, le=1000)
    metric: Literal["val_loss", "val_error"] = "val_loss"
    seed: int = 0  # the sampler's seed, for a repeatable search

    @field_validator("lr_high")
    @classmethod
    def _range(cls, value: float, info) -> float:
        if value <= info.data.get("lr_low", 0):
            raise ValueError("lr_high must be larger than lr_low")
        return value


class Slice(StrictModel):
    """A part of the grid, for a sweep too long to run at once: only the grid points whose values
    are listed here (each a subset of the spec's own axis) run. Slices of one grid, each run and
    exported on its own, make the whole grid again (``actsweep report --from-export``)."""

    activation: Annotated[list[ActivationName], Field(max_length=64)] | None = None
    lr: Annotated[list[PositiveFloat], Field(max_length=1000)] | None = None
    dropout: Annotated[list[float], Field(max_length=100)] | None = None
    seed: Annotated[list[int], Field(max_length=1000)] | None = None

    def label(self) -> str:
        """``seed=0,1 activation=relu``; empty for the whole grid."""
        return " ".join(f"{axis}={','.join(f'{v:g}' if isinstance(v, float) else str(v) for v in values)}"
                        for axis, values in self.model_dump(exclude_none=True).items())


class PaperNumber(StrictModel):
    """A number the paper reports, for the report to print beside ours."""

    activation: ActivationName
    metric: str
    value: float
    dropout: float | None = None
    dataset: DatasetName | None = None  # where one spec runs on several datasets (ELU §4.3: CIFAR-10 and -100)
    note: str = ""


class RankingClaim(StrictModel):
    """An ordering the paper claims, often only in a figure: ``best`` does better on ``metric`` than
    every other activation of the sweep. The report gives a verdict per pair (service.reporting.paper_table)."""

    text: str = ""
    words: Short = ""  # the paper's own words for the claim, quoted in the report
    source: Short = ""  # where the paper makes it: "§3.1, Figure 2"
    best: ActivationName
    # only these others (default: every other activation of the sweep): no verdict compares
    # configurations that the paper does not compare
    against: Annotated[list[ActivationName], Field(max_length=64)] = []
    # lower: best is lower than each other (a two-sided paired t-test decides the order);
    # ties_or_better: best is no worse than each other by more than protocol.smallest_effect
    # ("ties or significantly outperforms", GELU Fig. 4; a non-inferiority test, one half of TOST)
    kind: Literal["lower", "ties_or_better"] = "lower"
    metric: str | None = None  # default: protocol.headline_metric; lower is better
    # final: each trial's last value; mean_over_epochs: the mean of its curve (lower all along,
    # "faster"); first_epoch_below: the first epoch the value is at most ``threshold`` (sooner is better;
    # a trial that never gets there counts as one epoch past its last)
    over: Literal["final", "mean_over_epochs", "first_epoch_below"] = "final"
    threshold: float | None = None  # first_epoch_below
    closer_to_zero: bool = False  # compare |value| (ELU Fig. 2: mean activations close to zero)
    at_every_lr: bool = False  # a pair at every lr of the grid (one panel per lr), not at the lr chosen on validation


class _BadActivation(list):
    """An activation axis that did not parse (its entries, and why), for the field's own error."""

    def __init__(self, message: str, entries):
        super().__init__(entries if isinstance(entries, list) else [entries])
        self.message = message.removeprefix("activation: ")


class SweepSpec(StrictModel):
    """One experiment: data, model, training settings, the grid, and the protocol."""

    name: str = Field(pattern=r"^[a-z0-9_]+$", max_length=100)
    title: Short = ""
    paper: Literal["gelu", "elu", "custom"] = "custom"
    section: Short = ""

    # data
    dataset: DatasetName
    # held out of the training set to choose the lr on (GELU paper §3.1: 5k); datasets with their
    # own validation split (twitter_pos, timit) ignore it. 0: train on all of it (one lr, nothing to choose)
    val_size: int = Field(5000, ge=0, le=10_000_000)
    train_subset: Annotated[int, Field(ge=1, le=100_000_000)] | None = None  # use only this many training examples (quick runs)
    data_options: DataOptions = DataOptions()

    # model and training
    task: Literal["classify", "reconstruct"] = "classify"
    model: ModelSpec = ModelSpec()
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = Field(0.0, ge=0, lt=1)
    nesterov: bool = False
    weight_decay: float = Field(0.0, ge=0, le=1)  # L2 penalty
    schedule: Schedule = Schedule()
    augment: Augment = Augment()
    eval_noise: Annotated[list[NonNegativeFloat], Field(max_length=100)] = []  # GELU Fig. 3: evaluate on test + Unif[-a, a], per a
    activation_stats: bool = False  # ELU Fig. 2: median unit activation per layer and epoch
    eval_train: bool = True  # measure the whole training set in eval mode every epoch (train_loss_eval)
    top5: bool = False  # also val_error_top5 and test_error_top5 (ELU §4.3.1, ImageNet)
    fine_tune: Annotated[list[FineTunePhase], Field(max_length=16)] = []  # ELU §4.3: dropout phases by iteration (model.kind stacked_conv)
    epochs: int = Field(ge=1, le=10_000)
    batch_size: int = Field(ge=1, le=1_000_000)

    # the grid: activation × lr × dropout × seed. An entry is a name (relu, "gelu(sigma=0.5)"), a
    # family with parameters, any of them a list that is itself a grid axis ({name: gelu, sigma:
    # [0.1, 1]}), learnable ones ({name: silu, learnable: beta}), or an expression ({expr: "x *
    # sigmoid(1.702 * x)", name: gelu_sigmoid}); each is kept as its canonical name
    activation: list[ActivationName] = Field(min_length=1, max_length=64)
    expressions: dict[ActivationName, Annotated[str, Field(max_length=1000)]] = {}  # name → normal form (filled from the entries)
    lr: list[PositiveFloat] = Field(min_length=1, max_length=1000)
    dropout: list[float] = Field(default=[0.0], min_length=1, max_length=100)
    # per-activation replacement of the dropout axis, e.g. {soi: [0.0]}: SOI runs without dropout
    # while the others tune it (GELU paper §4)
    dropout_for: dict[ActivationName, Annotated[list[float], Field(min_length=1, max_length=100)]] = {}
    search: Search | None = None  # an Optuna search over the lr replaces the lr axis
    # a count (seeds 0..n-1) or explicit seeds
    seeds: Annotated[int, Field(ge=1, le=1000)] | Annotated[list[int], Field(min_length=1, max_length=1000)] = 1

    slice: Slice = Slice()  # run only this part of the grid (actsweep run --slice seed=0)

    protocol: Protocol = Protocol()
    until_decided: UntilDecided | None = None  # seeds in rounds until every claim is decided (or the budget)
    claims: Annotated[list[Short], Field(max_length=100)] = []  # the paper's words, shown in the report
    ranking_claims: Annotated[list[RankingClaim], Field(max_length=100)] = []  # the orderings among them that the report checks
    paper_numbers: Annotated[list[PaperNumber], Field(max_length=100)] = []
    execution: Execution = Execution()

    @field_validator("activation", mode="before")
    @classmethod
    def _activation_entries(cls, value):
        if isinstance(value, _BadActivation):
            raise ValueError(value.message)
        return value

    @model_validator(mode="before")
    @classmethod
    def _canonical_activations(cls, raw):
        """Every activation entry as canonical names (workers.activation_defs), wherever the spec
        names one: the axis, dropout_for, slice, claims and paper numbers."""
        if not isinstance(raw, dict) or "activation" not in raw:
            return raw
        raw, expressions = dict(raw), {}
        if not isinstance(raw.get("expressions") or {}, dict):  # (the field's own type check names it)
            return raw
        try:
            for name, text in (raw.get("expressions") or {}).items():
                expand_entry({"expr": text, "name": name}, expressions)
            entries = raw["activation"] if isinstance(raw["activation"], list) else [raw["activation"]]
            if len(entries) > 64:
                raise ActivationError(f"activation: at most 64 entries (got {len(entries)})")
            names = [d.canonical for entry in entries for d in expand_entry(entry, expressions)]
        except ActivationError as exc:  # reported by _activation_entries, at the field
            raw["activation"] = _BadActivation(str(exc), raw["activation"])
            return raw

        def canonical(name):
            try:
                return parse_name(name, expressions).canonical if isinstance(name, str) else name
            except ActivationError:
                return name  # left for the checks below to name

        raw.update(activation=names, expressions=expressions)
        if isinstance(raw.get("dropout_for"), dict):
            raw["dropout_for"] = {canonical(k): v for k, v in raw["dropout_for"].items()}
        if isinstance(raw.get("slice"), dict) and isinstance(raw["slice"].get("activation"), list):
            raw["slice"] = {**raw["slice"], "activation": [canonical(a) for a in raw["slice"]["activation"]]}
        for block, key in (("ranking_claims", "best"), ("paper_numbers", "activation")):
            if isinstance(raw.get(block), list):
                raw[block] = [{**c, key: canonical(c[key])} if isinstance(c, dict) and key in c else c for c in raw[block]]
        for claim in raw["ranking_claims"] if isinstance(raw.get("ranking_claims"), list) else []:
            if isinstance(claim, dict) and isinstance(claim.get("against"), list):
                claim["against"] = [canonical(a) for a in claim["against"]]
        return raw

    def activation_def(self, name: str):
        """The :class:`~workers.activation_defs.ActivationDef` of one of the grid's activations."""
        return parse_name(name, self.expressions)

    @field_validator("execution")
    @classmethod
    def _fused_needs_a_fusable_grid(cls, value: Execution, info: ValidationInfo) -> Execution:
        model, augment = info.data.get("model"), info.data.get("augment")
        if value.mode != "fused" or model is None:
            return value
        if model.kind not in FUSABLE_MODELS:
            raise ValueError(f"mode fused takes model.kind {' or '.join(FUSABLE_MODELS)}, not {model.kind!r}; "
                             f"use mode per_trial")
        if augment is not None and (augment.crop_padding or augment.flip):
            raise ValueError("mode fused takes no augment; use mode per_trial")
        if info.data.get("search") is not None:
            raise ValueError("mode fused takes a grid; an lr search (search:) runs per_trial")
        return value

    @field_validator("execution")
    @classmethod
    def _compile_takes_packs(cls, value: Execution) -> Execution:
        if value.compile and value.mode == "per_trial":
            raise ValueError("compile: true compiles a fused pack's step; set mode: fused, or compile: false")
        if value.pack_memory_gb is not None and value.pack_size != "auto":
            raise ValueError(f"pack_memory_gb sizes packs when pack_size is auto (it is {value.pack_size}); "
                             f"set pack_size: auto, or leave pack_memory_gb out")
        return value

    @field_validator("lr")
    @classmethod
    def _one_lr_without_validation(cls, value: list[float], info: ValidationInfo) -> list[float]:
        if info.data.get("val_size") == 0 and len(value) > 1 and info.data.get("dataset") not in OWN_VALIDATION:
            raise ValueError(f"val_size 0 trains on all the training data and leaves nothing to choose among "
                             f"{len(value)} lrs on: give one lr, or hold out a validation set")
        return value

    @field_validator("fine_tune")
    @classmethod
    def _fine_tune_needs_stacks(cls, value: list, info: ValidationInfo) -> list:
        model = info.data.get("model")
        if value and (model is None or model.kind != "stacked_conv"):
            raise ValueError("fine_tune: moves the per-stack dropout of model.kind stacked_conv")
        return value

    @field_validator("activation", "lr", "dropout", mode="before")
    @classmethod
    def _scalar_is_one_point_axis(cls, value):
        return value if isinstance(value, (list, tuple)) else [value]

    @field_validator("activation", "lr", "dropout", "eval_noise")
    @classmethod
    def _each_value_once(cls, value, info: ValidationInfo):
        return _distinct(value) if isinstance(value, list) else value

    @field_validator("dropout")
    @classmethod
    def _dropout_in_unit_interval(cls, value: list[float]) -> list[float]:
        for p in value:
            if not 0.0 <= p < 1.0:
                raise ValueError(f"each dropout rate must be in [0, 1) (got {p})")
        return value

    @field_validator("dropout_for")
    @classmethod
    def _dropout_for_in_unit_interval(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        for rates in value.values():
            cls._dropout_in_unit_interval(rates)
        return value

    @field_validator("eval_noise")
    @classmethod
    def _noise_levels_name_distinct_metrics(cls, value: list[float]) -> list[float]:
        # each level a is logged as test_error_noise_<%g of a>: two levels must not share a name
        names = [f"{a:g}" for a in value]
        if len(set(names)) != len(names) or not all(math.isfinite(a) and a <= 1e6 for a in value):
            raise ValueError(f"distinct finite levels in [0, 1e6], each a metric test_error_noise_<a> "
                             f"(levels named {', '.join(names)})")
        return value

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_count_or_list(cls, value):  # (one message, not one per member of the union)
        if _whole(value) and 1 <= value <= 1000:
            return value
        if (isinstance(value, list) and 1 <= len(value) <= 1000 and all(_whole(v) and 0 <= v < 2**32 for v in value)
                and len(set(value)) == len(value)):
            return value
        raise ValueError("accepted: a count from 1 to 1000 (seeds 0, 1, …), or a list of 1 to 1000 distinct seeds "
                         "in [0, 2^32)")

    @field_validator("slice")
    @classmethod
    def _slice_within_the_grid(cls, value: Slice, info: ValidationInfo) -> Slice:
        seeds = info.data.get("seeds")
        axes = {"activation": info.data.get("activation"), "lr": info.data.get("lr"),
                "dropout": [*info.data.get("dropout", []), *(d for rates in info.data.get("dropout_for", {}).values()
                                                              for d in rates)],
                "seed": list(range(seeds)) if isinstance(seeds, int) else seeds}
        for axis, values in value.model_dump(exclude_none=True).items():
            outside = [v for v in values if axes[axis] is not None and v not in axes[axis]]
            if outside or not values:
                raise ValueError(f"slice.{axis}: values of the spec's own {axis} axis "
                                 f"({', '.join(map(str, axes[axis] or []))}); got {', '.join(map(str, values)) or 'none'}")
        return value

    @property
    def seed_list(self) -> list[int]:
        """The seeds this sweep runs (its slice's, if it has one)."""
        seeds = list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)
        return [s for s in seeds if self.slice.seed is None or s in self.slice.seed]

    def unsliced(self) -> "SweepSpec":
        """The whole grid this sweep's slice belongs to."""
        return self.model_copy(update={"slice": Slice()})

    @property
    def trial_count(self) -> int:
        """Trials of the first phase, counted from the axes' lengths (nothing is built)."""
        pairs, seeds = len(self.searched_pairs()), len(self.seed_list)
        if self.search:
            return pairs * self.search.num_samples * seeds
        return pairs * sum(self.slice.lr is None or lr in self.slice.lr for lr in self.lr) * seeds

    @model_validator(mode="after")
    def _a_grid_of_bounded_size(self) -> "SweepSpec":
        if self.trial_count > MAX_TRIALS:
            raise ValueError(f"the grid has {self.trial_count} trials (activations × dropouts × lrs × seeds); "
                             f"a spec may have at most {MAX_TRIALS}")
        return self

    @model_validator(mode="after")
    def _until_decided_extends_a_grid(self) -> "SweepSpec":
        plan = self.until_decided
        if plan is None:
            return self
        if self.search is not None or self.protocol.retrain_on_full:
            raise ValueError("until_decided: takes a grid of lrs without retraining (not search or "
                             "protocol.retrain_on_full)")
        if plan.max_seeds <= len(self.seed_list):
            raise ValueError(f"until_decided.max_seeds: more than the {len(self.seed_list)} seeds the spec starts "
                             f"with (got {plan.max_seeds})")
        if self.slice.seed is not None:
            raise ValueError("until_decided: adds seeds itself; give no slice of seeds")
        return self

    def sequential_seeds(self) -> list[int]:
        """until_decided: every seed a sweep may use, in the order rounds add them (the spec's, then
        the next integers)."""
        seeds = self.seed_list
        extra = self.until_decided.max_seeds - len(seeds) if self.until_decided else 0
        return seeds + list(range(max(seeds, default=-1) + 1, max(seeds, default=-1) + 1 + max(extra, 0)))

    def look_sizes(self) -> list[int]:
        """until_decided: the seed counts at which claims are looked at: the spec's seeds, then
        every round's, up to max_seeds."""
        if self.until_decided is None:
            return [len(self.seed_list)]
        sizes, n = [len(self.seed_list)], len(self.seed_list)
        while n < self.until_decided.max_seeds:
            n = min(n + self.until_decided.seeds_per_round, self.until_decided.max_seeds)
            sizes.append(n)
        return sizes

    def searched_pairs(self) -> list[tuple[str, float]]:
        """The (activation, dropout) pairs of the grid (its slice's); with ``search``, each gets its own lr search."""
        return [(a, d) for a in self.activation for d in self.dropouts_of(a)
                if (self.slice.activation is None or a in self.slice.activation)
                and (self.slice.dropout is None or d in self.slice.dropout)]

    def dropouts_of(self, activation: str) -> list[float]:
        return self.dropout_for.get(activation, self.dropout)

    def grid_points(self) -> list[GridPoint]:
        """Every trial of the grid, in a fixed order: activation, dropout, lr, then seed (none
        known in advance when the lr is searched)."""
        if self.search:
            return []
        return [GridPoint(a, lr, d, seed) for a, d in self.searched_pairs() for lr in self.lr for seed in self.seed_list
                if self.slice.lr is None or lr in self.slice.lr]

    def plan(self) -> Plan:
        """The phases this sweep trains: its grid (or lr searches), then the retraining if the protocol asks."""
        searches = [] if self.search is None else [
            LrSearch(a, d, self.search.lr_low, self.search.lr_high, self.search.log, self.search.num_samples,
                     self.search.metric, self.search.seed, tuple(self.seed_list)) for a, d in self.searched_pairs()]
        return Plan(self.trial_base(), self.grid_points(), searches, self.protocol.retrain_on_full, tuple(self.seed_list))

    def trial_base(self) -> dict:
        """The settings every trial of the sweep shares (the grid point is added per trial)."""
        return {
            "experiment": self.name, "dataset": self.dataset, "task": self.task, "model": self.model.model_dump(),
            "expressions": dict(self.expressions),
            "optimizer": self.optimizer, "momentum": self.momentum, "nesterov": self.nesterov,
            "weight_decay": self.weight_decay, "schedule": self.schedule.model_dump(),
            "augment": self.augment.model_dump(), "eval_noise": list(self.eval_noise),
            "activation_stats": self.activation_stats, "eval_train": self.eval_train, "top5": self.top5,
            "fine_tune": [phase.model_dump() for phase in self.fine_tune], "epochs": self.epochs,
            "batch_size": self.batch_size,
            "cpus_per_trial": self.execution.cpus_per_trial,
            "gpus_per_trial": self.execution.gpus_per_trial,
            "dtype": self.execution.dtype, "compile": self.execution.compile,
            "cuda_graphs": self.execution.cuda_graphs,
        }

    def trial_config(self, point: GridPoint) -> TrialConfig:
        """The config one trial of the sweep trains with, at ``point`` (as its Tune trial reads it)."""
        return TrialConfig.from_config(members(tune_config(self.trial_base(), point))[0])


def _whole(value) -> bool:
    """An integer, or a float that is one (3.0, as a JSON client may send it); never a bool."""
    return not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float) and value.is_integer())
