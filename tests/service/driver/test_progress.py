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
