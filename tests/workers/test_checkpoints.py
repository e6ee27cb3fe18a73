"""Per-epoch checkpoints: a trial (or a fused pack) stopped after an epoch and resumed from its
saved state goes on exactly as if it had not stopped (real digits data, real torch.save/load)."""
from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from workers.data import load_dataset
from workers.fused import train_pack
from workers.train import train_epochs
from workers.trial import TrialConfig

MLP = {"kind": "mlp", "depth": 3, "width": 48, "init": "unit_norm_rows"}
EPOCHS, STOP_AFTER = 4, 2
# Everything a trial reports except its timing.
VARIABLE = ("epoch_seconds",)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", Path("unused"), download=False, val_size=200)


def _saved(state: dict) -> dict:
    """The state through torch.save and a weights-only load, as workers.checkpoints stores it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _without_timing(history: list) -> list:
    """Comparable reports: no timings, and NaN (a diverged loss) as a string, since NaN != NaN."""
    strip = lambda m: None if m is None else {k: "nan" if v != v else v for k, v in m.items()  # noqa: E731
                                              if k not in VARIABLE}
    return [[strip(m) for m in e] if isinstance(e, list) else strip(e) for e in history]


def _stopped_and_resumed(train, *args) -> tuple[list, list]:
    """(the uninterrupted history, the history of a run stopped after STOP_AFTER epochs and resumed)"""
    whole = list(train(*args))
    states: list[dict] = []
    first_part = []
    for report in train(*args, on_state=lambda s: states.append(_saved(s))):
        first_part.append(report)
        if len(first_part) == STOP_AFTER:
            break  # the process dies here; only the checkpoint survives
    resumed = first_part + list(train(*args, resume=states[-1]))
    return _without_timing(whole), _without_timing(resumed)


@pytest.mark.parametrize("activation, dropout, optimizer", [("gelu", 0.5, "adam"), ("soi", 0.0, "adam"),
                                                            ("relu", 0.0, "sgd")])
def test_a_trial_resumed_from_its_checkpoint_follows_the_same_trajectory(digits, activation, dropout, optimizer):
    cfg = TrialConfig(activation=activation, lr=2e-3 if optimizer == "adam" else 0.05, dropout=dropout, seed=3,
                      epochs=EPOCHS, batch_size=64, model=MLP, optimizer=optimizer,
                      momentum=0.9 if optimizer == "sgd" else 0.0, schedule={"kind": "cosine"})
    whole, resumed = _stopped_and_resumed(train_epochs, cfg, digits)
    assert [m["epoch"] for m in resumed] == list(range(1, EPOCHS + 1))
    assert resumed == whole  # equal, not close: the same operations on the same state


def test_a_fused_pack_resumes_with_its_members_and_without_those_that_left(digits):
    base = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=EPOCHS, batch_size=64, model=MLP,
                       optimizer="sgd", momentum=0.9, nesterov=True)
    cfgs = [replace(base, activation="elu", seed=1, lr=1e4),  # diverges in epoch 1 and leaves the pack
            replace(base, activation="gelu", dropout=0.5, seed=2, lr=0.05),
            replace(base, activation="relu", seed=3, lr=0.02),
            replace(base, activation="soi", seed=4, lr=0.05)]
    whole, resumed = _stopped_and_resumed(train_pack, cfgs, digits)
    assert whole[0][0]["diverged"] == 1 and all(report[0] is None for report in whole[1:])
    assert len(resumed) == EPOCHS
    assert resumed == whole


class _Clock:
    """A clock the test moves: epochs and writes take the seconds it says."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_writes_are_paced_to_their_share_of_the_time_and_the_last_epoch_is_always_written():
    from workers.checkpoints import CheckpointPacer

    def written(epoch_s: float, write_s: float, epochs: int = 60) -> list[int]:
        clock = _Clock()
        pacer, epochs_written = CheckpointPacer(share=0.05, clock=clock), []
        for epoch in range(1, epochs + 1):
            clock.now += epoch_s
            if pacer.due(final=epoch == epochs):
                with pacer.writing():
                    clock.now += write_s
                epochs_written.append(epoch)
        assert pacer.writes == len(epochs_written)
        return epochs_written

    # cheap writes (a small trial): every epoch, as before pacing
    assert written(epoch_s=1.0, write_s=0.01) == list(range(1, 61))
    # a big GPU pack: 235 MB of state in 0.5 s against 0.6 s epochs: a write once 10 s have passed
    big = written(epoch_s=0.6, write_s=0.5)
    assert big[0] == 1 and big[-1] == 60
    assert [b - a for a, b in zip(big, big[1:-1])] == [17] * (len(big) - 2)  # ⌈10 / 0.6⌉ epochs apart
    # its share of the time, past the first write (its cost unknown until made) and the last
    assert 0.5 * (len(big) - 2) / (0.6 * 60 + 0.5 * len(big)) <= 0.05
