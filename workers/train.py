"""The training loop of one trial, as a generator of per-epoch metrics.

One loop for every trial, alone or in a fused pack (a trial is a pack of one): setup, then per
epoch one pass over each member's shuffled training set, followed by evaluation. What differs
between one trial and a pack is the model, behind one seam (:class:`Members`): :class:`OneModel`
here, workers.fused.StackedPack for MLPs stacked into batched matmuls. The caller decides where
the metrics go (Ray Tune, a test, a benchmark).

One training step too (:func:`step_on_device`): forward, backward and the optimiser's update at
the lr the members hold on the device. It runs eagerly, or as the CUDA graph it was captured into
on a GPU (workers.graphs), for a lone network (convnets included) and a pack alike. The data live
on the device, and a batch's augmentation is made there (:func:`augment_batch`).
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable, Iterator, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import record_function

from workers import graphs
from workers.activations import Activation, learned_parameters
from workers.data.splits import Splits
from workers.models import build_model
from workers.optim import TrialOptimizer
from workers.convnet_plan import channels_last
from workers.precision import cudnn_benchmark, forward_precision, trial_precision
from workers.trial import TrialConfig

EVAL_BATCH = 2_000  # examples per forward pass when evaluating; bounds memory, not results
STATS_EXAMPLES = 1_000  # the fixed training subset of the ELU paper's activation statistics


def make_optimizer(cfg: TrialConfig, params, on_device: bool = False) -> TrialOptimizer:
    """The trial's Adam or SGD: torch.optim's arithmetic (workers.optim says why not its classes);
    ``on_device``: its lr and step counts on the parameters' device (a GPU: capturable)."""
    return TrialOptimizer(cfg.optimizer, params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                          momentum=cfg.momentum, nesterov=cfg.nesterov, on_device=on_device)


def lr_factor(schedule: dict, step: int, steps_per_epoch: int, total_steps: int) -> float:
    """The multiple of the base lr for optimiser step ``step`` (0-based) of ``total_steps``.

    The schedule counts in epochs (fractional: it moves every step) or, with ``unit: iteration``,
    in steps (ELU paper §4.2, §4.3: schedules by iteration).

    - constant;
    - linear_decay: constant until ``start``, then linearly to 0 at the end of training (GELU
      paper §3.5: "decays linearly to 0 from epoch 100": 0 is reached at the last step);
    - cosine: SGDR (Loshchilov & Hutter) with period ``t0``, restarts longer by ``t_mult``;
    - step: multiplied by ``gamma`` at each of ``milestones``;
    - piecewise: ``factors[i]`` from the i-th of ``milestones`` on (``factors[0]`` before the first).
    """
    kind = schedule.get("kind", "constant")
    if kind == "constant":
        return 1.0
    per = 1 if schedule.get("unit") == "iteration" else steps_per_epoch
    now, end = step / per, total_steps / per
    if kind == "linear_decay":
        start = schedule.get("start", schedule.get("start_epoch", 0))
        return 1.0 if now < start else max(0.0, 1.0 - (now - start) / max(end - start, 1e-12))
    if kind == "cosine":
        period = schedule.get("t0") or end
        while now >= period:
            now, period = now - period, period * schedule.get("t_mult", 1)
        return 0.5 * (1.0 + math.cos(math.pi * now / period))
    passed = sum(now >= m for m in schedule.get("milestones", []))
    if kind == "step":
        return schedule.get("gamma", 0.1) ** passed
    if kind == "piecewise":
        return schedule["factors"][passed]
    raise ValueError(f"schedule.kind: unknown {kind!r}; accepted: constant, linear_decay, cosine, step, piecewise")


def dropout_phase(phases: tuple, step: int) -> dict | None:
    """The fine-tuning phase in effect at ``step`` (ELU paper §4.3), or None before the first."""
    started = [p for p in phases if step >= p["from_iteration"]]
    return max(started, key=lambda p: p["from_iteration"]) if started else None


def on_device(array, device: torch.device):
    """A split's array as a tensor on the device; images read from files (workers.data.imagenet) stay
    where they are and are read batch by batch."""
    return array if hasattr(array, "read_rows") else torch.as_tensor(array, device=device)


def rows(x, index: Tensor | slice) -> Tensor:
    """The rows of ``x`` at ``index`` (a tensor of indices, or a slice)."""
    if hasattr(x, "read_rows"):
        return x.read_rows(index)
    return x[index] if isinstance(index, slice) else x.index_select(0, index)


def augment_batch(x: Tensor, augment: dict, generator: torch.Generator) -> Tensor:
    """Random crops from a zero-padded image and horizontal flips (ELU paper §4.2; the wide ResNet's
    pad-4 crop and flip, GELU §3.5), or random ``crop_size`` crops of a larger image (ELU §4.3.1:
    224 of 256). The crops are gathers on ``x``'s device; their offsets and flips are drawn from the
    trial's data-order generator on the CPU (a few hundred numbers a batch, one copy to the device),
    so a trial's augmentation is the same on any device."""
    if not augment or x.dim() != 4:
        return x
    n, _, h, w = x.shape
    size = augment.get("crop_size", 0)
    pad = augment.get("crop_padding", 0)
    draws = []  # (in this order: the generator's stream decides every trial's crops)
    if size and size < min(h, w):
        draws += [torch.randint(0, extent - size + 1, (n,), generator=generator) for extent in (h, w)]
    if pad:
        draws += [torch.randint(0, 2 * pad + 1, (n,), generator=generator) for _ in range(2)]
    if augment.get("flip"):
        draws.append((torch.rand(n, generator=generator) < 0.5).long())
    if not draws:
        return x
    drawn = iter(torch.stack(draws).to(x.device, non_blocking=True))
    if size and size < min(h, w):
        x, h, w = _crop(x, next(drawn), next(drawn), size, size), size, size
    if pad:
        x = _crop(F.pad(x, (pad, pad, pad, pad)), next(drawn), next(drawn), h, w)
    if augment.get("flip"):
        x = torch.where(next(drawn).bool()[:, None, None, None], x.flip(3), x)
    return x


def _crop(x: Tensor, top: Tensor, left: Tensor, h: int, w: int) -> Tensor:
    """Each image's h × w window at (top[i], left[i]): one gather for the batch."""
    n, c = x.shape[:2]
    rows = top[:, None] + torch.arange(h, device=x.device)  # (n, h)
    cols = left[:, None] + torch.arange(w, device=x.device)  # (n, w)
    return x[torch.arange(n, device=x.device)[:, None, None, None], torch.arange(c, device=x.device)[None, :, None, None],
             rows[:, None, :, None], cols[:, None, None, :]]


def batch_loss(model: nn.Module, task: str, x: Tensor, y: Tensor, top5: bool = False) -> tuple[Tensor, Tensor]:
    """Mean loss and the per-example error indicator (zeros when reconstructing); with ``top5``,
    the indicator that the label is not among the five highest outputs, as a second column."""
    out = model(x).float()  # (a bf16 forward's outputs: the loss is taken in fp32)
    if task == "reconstruct":
        return F.mse_loss(out, x.flatten(1)), torch.zeros(len(x), device=x.device)
    errors = (out.argmax(dim=1) != y).float()
    if top5:
        errors = torch.stack([errors, (out.topk(min(5, out.shape[1]), dim=1).indices != y[:, None]).all(dim=1).float()], dim=1)
    return F.cross_entropy(out, y), errors


@torch.no_grad()
def evaluate(model: nn.Module, x, y: Tensor, task: str = "classify", top5: bool = False) -> dict[str, float]:
    """``loss`` and ``error`` rate (and ``error_top5``) in eval mode (dropout off, SOI at its expectation)."""
    was_training = model.training
    model.eval()
    loss_sum, wrong = 0.0, 0.0
    for i in range(0, len(x), EVAL_BATCH):
        loss, errors = batch_loss(model, task, rows(x, slice(i, i + EVAL_BATCH)), y[i:i + EVAL_BATCH], top5)
        loss_sum += loss.item() * len(errors)
        wrong = wrong + errors.sum(dim=0)
    model.train(was_training)
    wrong = torch.as_tensor(wrong).reshape(-1) / len(x)
    return {"loss": loss_sum / len(x), "error": wrong[0].item(), **({"error_top5": wrong[1].item()} if top5 else {})}


@torch.no_grad()
def median_unit_activations(model: nn.Module, x: Tensor) -> dict[str, float]:
    """ELU paper §4.1.1, Fig. 2: each unit's average activation on ``x`` (eval mode), then the
    median over all units of the network (``median_unit_activation``, the figure's curve) and
    over each layer's units (``median_unit_activation_<layer>``)."""
    return unit_activation_medians(unit_means(model, x))


@torch.no_grad()
def unit_means(model: nn.Module, x: Tensor) -> list[Tensor]:
    """Per activation layer of ``model``, each unit's mean activation on ``x`` in eval mode."""
    layers = [m for m in model.modules() if isinstance(m, Activation)]
    outputs: list[Tensor] = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: outputs.append(out)) for layer in layers]
    was_training = model.training
    model.eval()
    try:
        model(x)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return [out.flatten(1).float().mean(dim=0) for out in outputs]


def unit_activation_medians(unit_means: list[Tensor]) -> dict[str, float]:
    """``unit_means``: per layer, each unit's mean activation (units on the last dimension)."""
    found = {"median_unit_activation": torch.cat([m.reshape(-1) for m in unit_means]).median().item()}
    found.update({f"median_unit_activation_{i}": m.median().item() for i, m in enumerate(unit_means, start=1)})
    return found


def noise_metric(kind: str, level: float) -> str:
    """``test_error_noise_0.25``: the metric of the test set plus Unif[−a, a] noise (``%g`` of a)."""
    return f"test_{kind}_noise_{level:g}"


def at_best_val(epoch: int, metrics: dict) -> dict:
    """The epoch of the lowest validation error (loss, when reconstructing) and the validation
    and test metrics at it (GELU paper §3.4: test error at the lowest validation error)."""
    return {"best_val_epoch": epoch,
            **{f"{k}_at_best_val": metrics[k] for k in ("val_loss", "val_error", "test_loss", "test_error")}}


def rng_states(device: torch.device) -> dict:
    """The global generators' states: the CPU one, and the device's where a trial draws on a GPU (input noise, torch's own dropout layers)."""
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_rng_states(states: dict, device: torch.device) -> None:
    torch.set_rng_state(states["cpu"])
    if states.get("cuda") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


# -- the seam: what differs between one trial and a fused pack ------------------------------------

class Members(Protocol):
    """The models of the trials that train together: how they are held, fed, run forward, evaluated
    and stepped. One trial is a pack of one (:class:`OneModel`: any network of workers.models);
    MLPs train several at once as one batched network (workers.fused.StackedPack). Everything
    else, the epoch loop and what it measures, is :func:`train_members`'."""

    cfgs: list[TrialConfig]
    members: list[int]  # the members still training: indices into cfgs (a position j ↔ members[j])
    device: torch.device

    def place(self, arrays: list) -> list: ...  # the splits' six arrays, resident as this kind reads them
    def batch(self, x, y: Tensor, idx: Tensor, orders: list) -> tuple[Tensor, Tensor]: ...  # idx: (P, B)
    def train(self) -> None: ...
    def losses(self, x: Tensor, y: Tensor, step: int) -> Tensor: ...  # train mode, masks of ``step``: (P,) mean losses
    def zero_grad(self) -> None: ...
    def begin_step(self, lr_factor: float) -> None: ...  # host side, before every step: lr × lr_factor on the device
    def update(self) -> None: ...  # the optimiser's update at that lr, on the device (capturable)
    def replay(self, x, y: Tensor, step: int) -> Tensor | None: ...  # a captured step's losses, or None
    def evaluate(self, x, y: Tensor, top5: bool, per_member: bool) -> list[dict[str, float]]: ...
    def unit_means(self, x: Tensor) -> list[Tensor]: ...  # per activation layer: (P, units)
    def learned(self, position: int) -> dict[str, float]: ...  # learnable activation parameters
    def set_dropout(self, on: bool, scale: float) -> None: ...  # a fine-tuning phase (ELU §4.3)
    def keep(self, positions: list[int]) -> None: ...  # the others leave (diverged)
    def state(self) -> dict: ...
    def restore(self, state: dict) -> None: ...


class OneModel:
    """One trial: any network of workers.models and its optimiser (workers.optim). Its dropout and
    SOI masks come from the counter-based generator of workers.masks, keyed by its seed and the
    step (as a fused pack member's); input noise and torch's own dropout layers draw from the global
    generator, seeded with the trial's seed before the network is built, as a plain script would."""

    def __init__(self, cfgs: list[TrialConfig], splits: Splits, device: torch.device):
        (cfg,) = cfgs
        self.cfgs, self.cfg, self.members, self.device = cfgs, cfg, [0], device
        torch.manual_seed(cfg.seed)
        self.model = build_model(cfg.model, splits.in_shape, splits.n_classes, cfg.activation_def, cfg.dropout,
                                 vocab_size=len(splits.vocab)).to(device)
        if splits.embeddings is not None and hasattr(self.model, "embedding"):
            with torch.no_grad():
                self.model.embedding.weight.copy_(torch.as_tensor(splits.embeddings))
        if device.type == "cuda" and channels_last(cfg.model["kind"], cfg.dtype):  # (where the cifar bench measured it faster)
            self.model = self.model.to(memory_format=torch.channels_last)
        # on a GPU the lr and Adam's step counts live on the device: the step is a CUDA graph's to capture
        self.optimizer = make_optimizer(cfg, self.model.parameters(), on_device=device.type == "cuda")
        if getattr(self.model, "mask_clock", None) is not None:
            self.model.mask_clock.start(cfg.seed, device)
        self.graphed = graphs.GraphedStep(partial(step_on_device, self, partial(forward_precision, cfg.dtype, device, cache=False)),
                                          cfg.batch_size, graphs.refusal(cfg, device))

    def place(self, arrays: list) -> list:
        return [on_device(a, self.device) for a in arrays]

    def batch(self, x, y: Tensor, idx: Tensor, orders: list) -> tuple[Tensor, Tensor]:
        idx = idx[0]  # whole rows by index_select: ~6x faster than x[idx]
        return augment_batch(rows(x, idx), self.cfg.augment, orders[0]), y.index_select(0, idx)

    def train(self) -> None:
        self.model.train()

    def losses(self, x: Tensor, y: Tensor, step: int) -> Tensor:
        if getattr(self.model, "mask_clock", None) is not None:
            self.model.mask_clock.step = step
        return batch_loss(self.model, self.cfg.task, x, y)[0].unsqueeze(0)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def begin_step(self, lr_factor: float) -> None:
        self.optimizer.set_lr(self.cfg.lr * lr_factor)

    def update(self) -> None:
        self.optimizer.step()

    def replay(self, x, y: Tensor, step: int) -> Tensor | None:
        return self.graphed(x, y, step)

    def evaluate(self, x, y: Tensor, top5: bool, per_member: bool) -> list[dict[str, float]]:
        return [evaluate(self.model, x[0] if per_member else x, y, self.cfg.task, top5)]

    def unit_means(self, x: Tensor) -> list[Tensor]:
        return [means.unsqueeze(0) for means in unit_means(self.model, x)]

    def learned(self, position: int) -> dict[str, float]:
        return learned_parameters(self.model)

    def set_dropout(self, on: bool, scale: float) -> None:
        self.model.set_dropout(on, scale)
        self.graphed.reset()  # (the rates are read on the host: captured again)

    def keep(self, positions: list[int]) -> None:
        self.members = [self.members[j] for j in positions]

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": rng_states(self.device)}

    def restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_rng_states(state["rng"], self.device)
        self.graphed.reset()  # (new optimiser states: captured again)


# -- the epoch loop ----------------------------------------------------------------------------------

def step_on_device(members: Members, precision, x: Tensor, y: Tensor, step: int | Tensor) -> Tensor:
    """The training step of every trial: forward, backward, and the optimiser's update at the lr the
    members hold on the device; the members' losses (detached). Run eagerly, and once under a CUDA
    graph's capture (workers.graphs), where ``step`` is the 0-d tensor of the step's mask salt that
    each replay sets. ``precision()`` makes the context of the forward pass (workers.precision)."""
    context = precision if hasattr(precision, "__enter__") else precision()  # (a context, or what makes one)
    with context, record_function("train.forward"):  # (phase labels for torch.profiler: docs/speed.md)
        losses = members.losses(x, y, step)
    with record_function("train.backward"):
        members.zero_grad()
        losses.sum().backward()  # members' graphs are disjoint: each gets its own gradient
    with record_function("train.optimizer"):
        members.update()
    return losses.detach()


def train_step(members: Members, x: Tensor, y: Tensor, precision: Callable, lr_factor: float, step: int = 0) -> Tensor:
    """Optimiser step ``step`` (0-based, counted over the whole run) of every member on its batch,
    at lr × ``lr_factor``; the members' losses (detached). The step keys the members' dropout and
    SOI masks (workers.masks). On a GPU the step replays as a CUDA graph where it has one
    (workers.graphs), else :func:`step_on_device` runs it eagerly: the same step."""
    members.begin_step(lr_factor)
    replayed = members.replay(x, y, step)
    return replayed if replayed is not None else step_on_device(members, precision, x, y, step)


def train_members(members: Members, splits: Splits, *, resume: dict | None = None,
                  on_state: Callable[[dict], None] | None = None) -> Iterator[list[dict | None]]:
    """Train the members; yield, after every epoch, one metrics dict per member (by its index in
    ``members.cfgs``), or None for a member that has left (diverged earlier).

    Checkpoints (workers.checkpoints): before each epoch's metrics are yielded, ``on_state`` gets
    the state to resume from after that epoch (models, optimisers, the members still training, every
    data-order and mask stream, the best epochs so far). Given such a state as ``resume``, training
    continues with the next epoch and follows the trajectory it would have followed without the
    interruption.

    Logged per epoch: ``train_loss`` (mean minibatch loss in train mode, as seen by the
    optimiser); ``train_loss_eval``/``train_error_eval``, the training set in eval mode, which is
    what the GELU paper's code reported when dropout or SOI is on (measured for every trial so
    that all rows compare the same quantity); ``val_loss``/``val_error``; ``test_loss``/``test_error``;
    ``best_val_epoch`` and the validation and test metrics at that epoch (``*_at_best_val``; GELU
    paper §3.4: "test error at the lowest validation error"). With ``activation_stats``:
    ``median_unit_activation`` (over all units) and ``median_unit_activation_<layer>``. With
    learnable activation parameters: ``learned_<param>_<layer>`` (mean over units). With
    ``eval_noise``, after the last epoch: ``test_error_noise_<a>`` and ``test_loss_noise_<a>``.
    A member whose training loss is not finite is reported with ``diverged = 1`` and leaves; the
    others go on unchanged.
    """
    # -- setup: data resident on the device, each member's data-order stream --------------------------
    cfgs, first, device = members.cfgs, members.cfgs[0], members.device
    train_x, train_y, val_x, val_y, test_x, test_y = members.place(splits.arrays())
    orders = [torch.Generator().manual_seed(cfg.seed) for cfg in cfgs]  # data order, augmentation: the seed only
    n, batch = len(train_y), first.batch_size
    steps_per_epoch = math.ceil(n / batch)
    total_steps = steps_per_epoch * first.epochs
    best_val, best = [math.inf] * len(cfgs), [{} for _ in cfgs]
    select_on = "val_loss" if first.task == "reconstruct" else "val_error"
    precision = partial(forward_precision, first.dtype, device, cache=False)  # execution.dtype (workers.precision)
    first_epoch = 1
    if resume is not None:  # continue after the checkpointed epoch, with every stream where it stood
        if len(resume["members"]) < len(cfgs):
            members.keep(resume["members"])  # (the members' positions are their indices at the start)
        members.restore(resume["models"])
        for generator, state in zip(orders, resume["orders"]):
            generator.set_state(state)
        best_val, best, first_epoch = resume["best_val"], resume["best"], resume["epoch"] + 1

    phase, factor = None, 1.0  # the fine-tuning phase the network's dropout is set for; the lr's multiple
    # TF32 on or off for the whole run, the backward pass included (execution.dtype: workers.precision);
    # on a GPU cuDNN times its convolution algorithms once per shape and keeps the fastest
    with trial_precision(first.dtype, device), cudnn_benchmark(device):
        for epoch in range(first_epoch, first.epochs + 1):
            # -- one pass over each member's shuffled training set, batches taken by indexing ------------
            started = time.perf_counter()
            members.train()
            permutations = torch.stack([torch.randperm(n, generator=orders[m]) for m in members.members]).to(device)
            loss_sum = torch.zeros(len(members.members), device=device)
            for i in range(0, n, batch):
                step = (epoch - 1) * steps_per_epoch + i // batch
                if first.schedule.get("kind", "constant") != "constant":  # the lr moves every step
                    factor = lr_factor(first.schedule, step, steps_per_epoch, total_steps)
                if first.fine_tune and dropout_phase(first.fine_tune, step) != phase:
                    phase = dropout_phase(first.fine_tune, step)
                    members.set_dropout(phase["dropout_on"], phase["dropout_scale"])
                idx = permutations[:, i:i + batch]
                x, y = members.batch(train_x, train_y, idx, [orders[m] for m in members.members])
                loss_sum += train_step(members, x, y, precision, factor, step) * idx.shape[1]  # (no .item() per step)
            train_loss = [total / n for total in loss_sum.tolist()]

            # -- a member whose loss is not finite is reported diverged and leaves -------------------------
            report: list[dict | None] = [None] * len(cfgs)
            diverged = [j for j, loss in enumerate(train_loss) if not math.isfinite(loss)]
            for j in diverged:
                m = members.members[j]
                report[m] = {"epoch": epoch, "train_loss": train_loss[j], "lr": cfgs[m].lr * factor, "diverged": 1,
                             "epoch_seconds": time.perf_counter() - started}
            if diverged:
                kept = [j for j in range(len(train_loss)) if j not in diverged]
                train_loss = [train_loss[j] for j in kept]
                members.keep(kept)
            if not members.members:
                yield report
                return

            # -- evaluation (in the members' precision, as they train) ----------------------------------------
            data = {"train": (train_x, train_y) if first.eval_train else None,
                    "val": (val_x, val_y) if len(val_y) else None,  # (val_size 0: nothing is held out)
                    "test": (test_x, test_y)}
            with precision():
                with record_function("evaluate"):
                    evaluated = {name: members.evaluate(*split, top5=first.top5 and name != "train", per_member=False)
                                 for name, split in data.items() if split is not None}
                with record_function("unit_statistics"):
                    stats = members.unit_means(rows(train_x, slice(0, STATS_EXAMPLES))) if first.activation_stats else None
                with record_function("noise_robustness"):
                    noise = noise_robustness(members, test_x, test_y) if epoch == first.epochs else None
            seconds = time.perf_counter() - started
            for j, m in enumerate(members.members):
                metrics = {"epoch": epoch, "train_loss": train_loss[j], "lr": cfgs[m].lr * factor}
                for name, results in evaluated.items():
                    metrics.update({f"{name}_{k}_eval" if name == "train" else f"{name}_{k}": v
                                    for k, v in results[j].items()})
                if select_on in metrics and metrics[select_on] < best_val[m]:
                    best_val[m] = metrics[select_on]
                    best[m] = at_best_val(epoch, metrics)
                metrics.update(best[m])
                metrics.update(members.learned(j))  # learnable activation parameters, per layer
                if stats is not None:
                    metrics.update(unit_activation_medians([layer[j] for layer in stats]))
                if noise is not None:
                    metrics.update(noise[j])
                metrics["diverged"] = 0
                metrics["epoch_seconds"] = seconds  # (a pack's epoch: its members share it)
                report[m] = metrics
            if on_state is not None:
                on_state({"epoch": epoch, "members": list(members.members), "models": members.state(),
                          "orders": [g.get_state() for g in orders], "best_val": best_val, "best": best})
            yield report


def train_epochs(cfg: TrialConfig, splits: Splits, device: torch.device | str = "cpu", *,
                 resume: dict | None = None, on_state: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Train one trial (a pack of one: :func:`train_members` with :class:`OneModel`); yield a dict of
    metrics after every epoch (epoch numbers start at 1)."""
    one = OneModel([cfg], splits, torch.device(device))
    # (closed with this generator, not when the collector finds it: its run holds the process's TF32 switches)
    with contextlib.closing(train_members(one, splits, resume=resume, on_state=on_state)) as epochs:
        for report in epochs:
            if one.device.type == "cuda" and report[0] is not None:  # how its steps ran (the run's tag, as a pack's)
                report[0]["step_mode"] = one.graphed.mode
            yield report[0]


@torch.no_grad()
def noise_robustness(members: Members, x: Tensor, y: Tensor) -> list[dict[str, float]]:
    """GELU paper §3.1, Fig. 3: per member, test loss and error on x + Unif[−a, a] noise for each a
    of ``eval_noise``, the noise from a generator seeded 10,000 + the member's seed. Members with one
    seed draw the same noise, so each seed's copy is drawn once, and where all members share a seed
    (a seed slice) they all read one copy, as they read the test set."""
    cfgs = members.cfgs
    seeds = [cfgs[m].seed for m in members.members]
    generators = {seed: torch.Generator().manual_seed(10_000 + seed) for seed in dict.fromkeys(seeds)}
    found: list[dict[str, float]] = [{} for _ in members.members]
    for a in cfgs[0].eval_noise:
        copies = {seed: x + (u * 2 - 1) * a for seed, u in uniform_draws(generators, x.shape, x.device).items()}
        if len(copies) == 1:  # one seed: every member reads one copy, as it reads the test set
            results = members.evaluate(*copies.values(), y, top5=False, per_member=False)
        else:  # one copy per member, each seed's made once
            results = members.evaluate(torch.stack([copies[seed] for seed in seeds]), y, top5=False, per_member=True)
        for j, measured in enumerate(results):
            found[j][noise_metric("loss", a)], found[j][noise_metric("error", a)] = measured["loss"], measured["error"]
    return found


def uniform_draws(generators: dict, shape: tuple, device: torch.device, workers: int | None = None) -> dict:
    """Per key, the next ``shape`` of Unif[0, 1) from its CPU generator (the same draws on any
    device), on ``device``. On a GPU the generators draw side by side in threads, one per core at
    most: the cores are idle there, and each stream is sequential within its thread, so the draws
    are the ones a loop would make (Figure 2's 5 seeds × 13 noise levels of 10,000 × 784: 1.9 s of
    draws on one core). On a CPU, where the cores train, one after another. ``workers``: threads,
    overriding that rule."""
    def draw(generator: torch.Generator) -> Tensor:
        return torch.rand(shape, generator=generator).to(device)

    if workers is None:
        workers = min(len(generators), os.cpu_count() or 1) if device.type == "cuda" else 1
    if workers < 2:
        return {key: draw(g) for key, g in generators.items()}
    with ThreadPoolExecutor(workers) as pool:  # (torch releases the GIL while it draws)
        return dict(zip(generators, pool.map(draw, generators.values())))

