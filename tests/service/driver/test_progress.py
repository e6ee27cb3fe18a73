"""The CLI's live progress lines: each finished trial with the number that means something for it."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from rich.console import Console

from service.driver.progress import LiveProgress


@pytest.mark.parametrize("task, last, shown, hidden", [
    ("classify", {"epoch": 2, "test_error": 0.0213, "test_loss": 0.07}, "test_error 2.13%", "test_loss"),
    ("reconstruct", {"epoch": 2, "test_error": 0.0, "test_loss": 0.0123456}, "test_loss 0.01235", "test_error"),
])
def test_a_finished_trial_shows_its_error_or_its_reconstruction_loss(task, last, shown, hidden):
    console = Console(record=True, width=120)
    display = LiveProgress(trials=1, epochs=2, console=console)
    trial = SimpleNamespace(trial_id="t0", last_result=last,  # a Tune trial as the callback sees it
                            config={"task": task, "activation": "gelu", "lr": 1e-3, "dropout": 0.0, "seed": 0})
    display.on_trial_start(0, [trial], trial)
    display.on_trial_complete(0, [trial], trial)
    line = console.export_text().strip().splitlines()[-1]
    assert "[1/1] done" in line and shown in line and hidden not in line


def test_without_a_terminal_a_progress_line_says_how_far_and_how_long_an_epoch_took(monkeypatch):
    import service.driver.progress as progress

    console = Console(record=True, width=120, force_terminal=False)  # (a log file: no live bars)
    display = LiveProgress(trials=2, epochs=3, console=console)
    trial = SimpleNamespace(trial_id="p0", last_result=None,  # a fused pack of two members
                            config={"point": {"pack": [{"activation": "gelu", "lr": 1e-3, "dropout": 0.0, "seed": s}
                                                       for s in (0, 1)]}})
    display.on_trial_start(0, [trial], trial)
    pack_epoch = lambda e: {"epoch": e, "members": [[i, {"epoch": e, "epoch_seconds": 0.25}] for i in (0, 1)]}  # noqa: E731
    display.on_trial_result(0, [trial], trial, pack_epoch(1))
    display.on_trial_result(0, [trial], trial, pack_epoch(2))  # within LOG_EVERY_S of the first: no line
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    display.on_trial_result(0, [trial], trial, pack_epoch(3))
    lines = [line for line in console.export_text().splitlines() if "trial-epochs " in line]
    assert len(lines) == 2
    assert "trial-epochs 2/6, 2 trials running, last epoch 0.25 s" in lines[0]
    assert "trial-epochs 6/6" in lines[1]
