"""The training loop of one trial, as a generator of per-epoch metrics.

Reads top to bottom: setup, then per epoch one pass over the shuffled training set followed by
evaluation. The caller decides where the metrics go (Ray Tune, a test, a benchmark).
"""
from __future__ import annotations

import math
import time
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workers.activations import Activation, learned_parameters
from workers.data.splits import Splits
from workers.models import build_model
from workers.precision import forward_precision
from workers.trial import TrialConfig

EVAL_BATCH = 2_000  # examples per forward pass when evaluating; bounds memory, not results
STATS_EXAMPLES = 1_000  # the fixed training subset of the ELU paper's activation statistics


def make_optimizer(cfg: TrialConfig, params) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                               weight_decay=cfg.weight_decay)
    raise ValueError(f"optimizer: unknown {cfg.optimizer!r}; accepted: adam, sgd")


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
    """Random crops from a zero-padded image and horizontal flips (ELU paper §4.2), or random
    ``crop_size`` crops of a larger image (ELU §4.3.1: 224 of 256), on the device."""
    if not augment or x.dim() != 4:
        return x
    n, _, h, w = x.shape
    size = augment.get("crop_size", 0)
    if size and size < min(h, w):
        dy, dx = (torch.randint(0, extent - size + 1, (n,), generator=generator).tolist() for extent in (h, w))
        x, h, w = torch.stack([x[i, :, dy[i]:dy[i] + size, dx[i]:dx[i] + size] for i in range(n)]), size, size
    pad = augment.get("crop_padding", 0)
    if pad:
        padded = F.pad(x, (pad, pad, pad, pad))
        dy, dx = (torch.randint(0, 2 * pad + 1, (n,), generator=generator).tolist() for _ in range(2))
        x = torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])
    if augment.get("flip"):
        flip = torch.rand(n, generator=generator) < 0.5
        x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
    return x


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
    return unit_activation_medians([out.flatten(1).float().mean(dim=0) for out in outputs])


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
    """The global generators' states: the CPU one, and the device's where masks are drawn on a GPU."""
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_rng_states(states: dict, device: torch.device) -> None:
    torch.set_rng_state(states["cpu"])
    if states.get("cuda") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


def train_epochs(cfg: TrialConfig, splits: Splits, device: torch.device | str = "cpu", *,
                 resume: dict | None = None, on_state: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Train one trial; yield a dict of metrics after every epoch (epoch numbers start at 1).

    Checkpoints (workers.checkpoints): before each epoch's metrics are yielded, ``on_state`` gets
    the state to resume from after that epoch (model, optimiser, data-order and mask generators,
    best epoch so far). Given such a state as ``resume``, training continues with the next epoch
    and follows the trajectory it would have followed without the interruption.

    Logged per epoch: ``train_loss`` (mean minibatch loss in train mode, as seen by the
    optimiser); ``train_loss_eval``/``train_error_eval``, the training set in eval mode, which is
    what the GELU paper's code reported when dropout or SOI is on (measured for every trial so
    that all rows compare the same quantity); ``val_loss``/``val_error``; ``test_loss``/``test_error``;
    ``best_val_epoch`` and the validation and test metrics at that epoch (``*_at_best_val``; GELU
    paper §3.4: "test error at the lowest validation error"). With ``activation_stats``:
    ``median_unit_activation`` (over all units) and ``median_unit_activation_<layer>``. With
    learnable activation parameters: ``learned_<param>_<layer>`` (mean over units). With
    ``eval_noise``, after the last epoch: ``test_error_noise_<a>`` and ``test_loss_noise_<a>``.
    A non-finite training loss ends the trial with ``diverged = 1``.
    """
    # -- setup: seed, data resident on the device, model, optimiser --------------------------------
    device = torch.device(device)
    torch.manual_seed(cfg.seed)
    tensors = [on_device(a, device) for a in splits.arrays()]
    train_x, train_y, val_x, val_y, test_x, test_y = tensors
    model = build_model(cfg.model, splits.in_shape, splits.n_classes, cfg.activation_def, cfg.dropout,
                        vocab_size=len(splits.vocab)).to(device)
    if splits.embeddings is not None and hasattr(model, "embedding"):
        with torch.no_grad():
            model.embedding.weight.copy_(torch.as_tensor(splits.embeddings))
    optimizer = make_optimizer(cfg, model.parameters())
    order = torch.Generator().manual_seed(cfg.seed)  # data order and augmentation depend on the seed only
    n = len(train_y)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    best_val, best = math.inf, {}
    select_on = "val_loss" if cfg.task == "reconstruct" else "val_error"
    first_epoch = 1
    if resume is not None:  # continue after the checkpointed epoch, with every stream where it stood
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        order.set_state(resume["order"])
        set_rng_states(resume["rng"], device)
        best_val, best, first_epoch = resume["best_val"], resume["best"], resume["epoch"] + 1

    phase = None  # the fine-tuning phase the network's dropout is set for
    precision = forward_precision(cfg.dtype, device)  # execution.dtype (workers.precision)
    for epoch in range(first_epoch, cfg.epochs + 1):
        # -- one pass over the shuffled training set, batches taken by indexing ----------------
        started = time.perf_counter()
        model.train()
        permutation = torch.randperm(n, generator=order).to(device)
        loss_sum = torch.zeros((), device=device)
        for i in range(0, n, cfg.batch_size):
            step = (epoch - 1) * steps_per_epoch + i // cfg.batch_size
            if cfg.schedule.get("kind", "constant") != "constant":  # the lr moves every step
                for group in optimizer.param_groups:
                    group["lr"] = cfg.lr * lr_factor(cfg.schedule, step, steps_per_epoch, total_steps)
            if cfg.fine_tune and dropout_phase(cfg.fine_tune, step) != phase:
                phase = dropout_phase(cfg.fine_tune, step)
                model.set_dropout(phase["dropout_on"], phase["dropout_scale"])
            idx = permutation[i:i + cfg.batch_size]
            x, y = rows(train_x, idx), train_y.index_select(0, idx)  # whole rows: ~6x faster than x[idx]
            with precision:
                loss, _ = batch_loss(model, cfg.task, augment_batch(x, cfg.augment, order), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(idx)  # no .item() per step: keeps the device busy
        metrics = {"epoch": epoch, "train_loss": loss_sum.item() / n, "lr": optimizer.param_groups[0]["lr"]}
        if not math.isfinite(metrics["train_loss"]):
            yield {**metrics, "diverged": 1, "epoch_seconds": time.perf_counter() - started}
            return

        # -- evaluation (in the trial's precision, as it trains) ---------------------------------
        with precision:
            if cfg.eval_train:
                metrics.update({f"train_{k}_eval": v for k, v in evaluate(model, train_x, train_y, cfg.task).items()})
            if len(val_y):  # (val_size 0: all the training data trains; nothing is held out)
                metrics.update({f"val_{k}": v for k, v in evaluate(model, val_x, val_y, cfg.task, cfg.top5).items()})
            metrics.update({f"test_{k}": v for k, v in evaluate(model, test_x, test_y, cfg.task, cfg.top5).items()})
            if len(val_y) and metrics[select_on] < best_val:
                best_val = metrics[select_on]
                best = at_best_val(epoch, metrics)
            metrics.update(best)
            metrics.update(learned_parameters(model))  # learnable activation parameters, per layer
            if cfg.activation_stats:
                metrics.update(median_unit_activations(model, rows(train_x, slice(0, STATS_EXAMPLES))))
            if epoch == cfg.epochs:
                metrics.update(noise_robustness(model, test_x, test_y, cfg.eval_noise, cfg.seed, cfg.task))
        metrics["diverged"] = 0
        metrics["epoch_seconds"] = time.perf_counter() - started
        if on_state is not None:
            on_state({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "order": order.get_state(), "rng": rng_states(device), "best_val": best_val, "best": best})
        yield metrics


@torch.no_grad()
def noise_robustness(model: nn.Module, x: Tensor, y: Tensor, levels, seed: int,
                     task: str = "classify") -> dict[str, float]:
    """GELU paper §3.1, Fig. 3: test loss and error on x + Unif[−a, a] noise, for each a."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    found = {}
    for a in levels:
        noise = (torch.rand(x.shape, generator=generator) * 2 - 1).to(x.device) * a
        measured = evaluate(model, x + noise, y, task)
        found[noise_metric("loss", a)], found[noise_metric("error", a)] = measured["loss"], measured["error"]
    return found
