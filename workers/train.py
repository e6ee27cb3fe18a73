"""The training loop of one trial, as a generator of per-epoch metrics.

Reads top to bottom: setup, then per epoch one pass over the shuffled training set followed by
evaluation. The caller decides where the metrics go (Ray Tune, a test, a benchmark).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workers.datasets import Splits
from workers.models import build_model

EVAL_BATCH = 10_000  # examples per forward pass when evaluating; bounds memory, not results


@dataclass(frozen=True)
class TrialConfig:
    """Everything that determines one trial's training: a grid point plus the spec's settings."""

    activation: str
    lr: float
    dropout: float
    seed: int
    epochs: int
    batch_size: int
    optimizer: str = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    model: dict = field(default_factory=lambda: {"kind": "mlp", "depth": 8, "width": 128, "init": "unit_norm_rows"})

    @classmethod
    def from_config(cls, config: dict) -> "TrialConfig":
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in config.items() if k in names})


def make_optimizer(cfg: TrialConfig, params) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    raise ValueError(f"optimizer: unknown {cfg.optimizer!r}; accepted: adam, sgd")


@torch.no_grad()
def evaluate(model: nn.Module, x: Tensor, y: Tensor) -> tuple[float, float]:
    """Mean cross-entropy and error rate in eval mode (dropout off, SOI at its expectation)."""
    was_training = model.training
    model.eval()
    loss_sum, wrong = 0.0, 0
    for i in range(0, len(y), EVAL_BATCH):
        logits = model(x[i:i + EVAL_BATCH])
        target = y[i:i + EVAL_BATCH]
        loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
        wrong += (logits.argmax(dim=1) != target).sum().item()
    model.train(was_training)
    return loss_sum / len(y), wrong / len(y)


def train_epochs(cfg: TrialConfig, splits: Splits, device: torch.device | str = "cpu") -> Iterator[dict]:
    """Train one trial; yield a dict of metrics after every epoch (epoch numbers start at 1).

    Logged per epoch: ``train_loss`` (mean minibatch loss in train mode, as seen by the
    optimiser); ``train_loss_eval``/``train_error_eval``, the training set in eval mode, which is
    what the GELU paper's code reported when dropout or SOI is on (measured for every trial so
    that all rows compare the same quantity); ``val_loss``/``val_error``; ``test_loss``/``test_error``. A non-finite training loss
    ends the trial with ``diverged = 1``.
    """
    # -- setup: seed, data resident on the device, model, optimiser --------------------------------
    torch.manual_seed(cfg.seed)
    as_x = lambda a: torch.as_tensor(a, device=device).reshape(len(a), -1)  # noqa: E731
    as_y = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
    train_x, train_y = as_x(splits.train_x), as_y(splits.train_y)
    val_x, val_y = as_x(splits.val_x), as_y(splits.val_y)
    test_x, test_y = as_x(splits.test_x), as_y(splits.test_y)
    model = build_model(cfg.model, splits.in_dim, splits.n_classes, cfg.activation, cfg.dropout).to(device)
    optimizer = make_optimizer(cfg, model.parameters())
    order = torch.Generator().manual_seed(cfg.seed)  # the data order depends on the seed only
    n = len(train_y)

    for epoch in range(1, cfg.epochs + 1):
        # -- one pass over the shuffled training set, batches taken by indexing ----------------
        started = time.perf_counter()
        model.train()
        permutation = torch.randperm(n, generator=order).to(device)
        loss_sum = torch.zeros((), device=device)
        for i in range(0, n, cfg.batch_size):
            idx = permutation[i:i + cfg.batch_size]
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(idx)  # no .item() per step: keeps the device busy
        metrics = {"epoch": epoch, "train_loss": loss_sum.item() / n}
        if not math.isfinite(metrics["train_loss"]):
            yield {**metrics, "diverged": 1, "epoch_seconds": time.perf_counter() - started}
            return

        # -- evaluation ---------------------------------------------------------------------------
        metrics["train_loss_eval"], metrics["train_error_eval"] = evaluate(model, train_x, train_y)
        metrics["val_loss"], metrics["val_error"] = evaluate(model, val_x, val_y)
        metrics["test_loss"], metrics["test_error"] = evaluate(model, test_x, test_y)
        metrics["diverged"] = 0
        metrics["epoch_seconds"] = time.perf_counter() - started
        yield metrics
