"""Per-epoch checkpoints of a Tune trial: everything its training loop needs to resume.

A trial saves, with every epoch's metrics, its model, optimiser, random-number streams and epoch
(workers.train.train_epochs and workers.fused.train_pack build the state). Tune keeps the latest
in the sweep's storage; a trial that is retried after a failure (its worker node lost, its process
killed) or restored with its sweep (Tuner.restore) starts from it, not from epoch 0.
"""
from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from ray import tune

STATE_FILE = "state.pt"


@contextmanager
def as_checkpoint(state: dict) -> Iterator[tune.Checkpoint]:
    """``state`` written to a temporary folder, as a Tune checkpoint (Tune copies it to its
    storage within ``tune.report``)."""
    with tempfile.TemporaryDirectory(prefix="actsweep-ckpt-") as folder:
        torch.save(state, Path(folder) / STATE_FILE)
        yield tune.Checkpoint.from_directory(folder)


def latest_state() -> dict | None:
    """The state of this trial's latest checkpoint (tensors on the CPU; training loops move them),
    or None for a trial that starts afresh."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        return torch.load(Path(folder) / STATE_FILE, map_location="cpu", weights_only=True)
