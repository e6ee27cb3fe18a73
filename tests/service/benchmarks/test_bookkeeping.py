"""The bookkeeping bench drives the real logger and a real SQLite store: every run ends with every
epoch once, and batching cuts the metric writes to one per run (flush interval longer than the run)."""
from __future__ import annotations

from service.benchmarks.bookkeeping import main


def test_the_bench_counts_the_writes_and_checks_every_epoch(tmp_path):
    out = tmp_path / "bookkeeping.json"
    per_epoch, batched = main(["--trials", "20", "--epochs", "3", "--pack-size", "10", "--flush-s", "0,60",
                               "--out", str(out)])
    for row in (per_epoch, batched):
        assert row["runs_finished"] == 20
        assert row["sampled_runs_with_every_epoch_once"] == "20/20"
        assert row["trial_epochs_per_s"] > 0
    assert per_epoch["epoch_write_calls"] == 20 * 3  # a call per run and epoch
    assert batched["epoch_write_calls"] == 20  # one per run: its three epochs at its end
    assert out.exists()
