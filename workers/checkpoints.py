"""Checkpoints of a Tune trial: everything its training loop needs to resume.

After an epoch a trial writes its state (model, optimiser, random-number streams, best epoch,
epoch; built by workers.train.train_epochs and workers.fused.train_pack) to ``state.pt`` in its
folder of Tune's storage, replacing the previous one atomically. It writes after every epoch
while that is cheap, and at most :data:`CHECKPOINT_SHARE` of its time where it is not
(:class:`CheckpointPacer`: a GPU pack of 90 MLPs holds 235 MB of state and trains an epoch in
under a second), and always after its last epoch. A trial that starts finds it
there: one retried after a failure (its worker node lost, its process killed; Tune's
FailureConfig), or one restarted with its sweep by a new driver (Tuner.restore). It resumes after
that epoch, not from epoch 0; a trial whose file says it had finished trains nothing.

The file is written by the trial itself rather than kept as a Tune checkpoint: Tune names its
checkpoints in an experiment snapshot that it saves and syncs in the background, and a driver
that died between Tune deleting an old checkpoint and syncing the next snapshot left a
snapshot naming a deleted checkpoint (seen in tests/service/api). The trial's own file is always
its latest epoch. Any storage pyarrow reaches works: a local or mounted folder, s3://, gs://.
"""
from __future__ import annotations

import io
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import pyarrow.fs
import torch
from ray import tune

STATE_FILE = "state.pt"
CHECKPOINT_SHARE = 0.05  # at most this share of a trial's wall time goes to writing its state


class CheckpointPacer:
    """When a trial writes its state: after an epoch once the time since its last write is at
    least that write's cost / ``share`` (every epoch while writes are cheap), and always after its
    last epoch. A retry resumes from the last write; the epochs after it train again on the same
    trajectory, and the driver's logger keeps the first report of each (docs/faults.md)."""

    def __init__(self, share: float = CHECKPOINT_SHARE, clock: Callable[[], float] = time.monotonic):
        self.share, self.clock = share, clock
        self.cost, self.last = 0.0, clock()  # the last write's seconds, and when it ended
        self.writes = 0

    def due(self, final: bool) -> bool:
        return final or self.clock() - self.last >= self.cost / self.share

    @contextmanager
    def writing(self) -> Iterator[None]:
        started = self.clock()
        yield
        self.last = self.clock()
        self.cost, self.writes = self.last - started, self.writes + 1


def state_path(config: dict) -> str | None:
    """Where this trial keeps its state: ``<checkpoint_root>/<trial id>/state.pt`` (Tune's trial
    folder, service.driver.sweeps sets the root), or None outside a sweep."""
    root = config.get("checkpoint_root")
    return f"{root}/{tune.get_context().get_trial_id()}/{STATE_FILE}" if root else None


def save_state(path: str, state: dict) -> None:
    """Write ``state`` to ``path``: to a temporary file first, then moved over the old one."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    fs, where = _filesystem(path)
    fs.create_dir(where.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(where + ".tmp") as out:
        out.write(buffer.getvalue())
    fs.move(where + ".tmp", where)


def load_state(path: str) -> dict | None:
    """The state at ``path`` (tensors on the CPU; the training loops move them), or None."""
    fs, where = _filesystem(path)
    if fs.get_file_info(where).type == pyarrow.fs.FileType.NotFound:
        return None
    with fs.open_input_stream(where) as source:
        return torch.load(io.BytesIO(source.read()), map_location="cpu", weights_only=True)


def _filesystem(path: str) -> tuple[pyarrow.fs.FileSystem, str]:
    return pyarrow.fs.FileSystem.from_uri(path) if "://" in path else (pyarrow.fs.LocalFileSystem(), path)
