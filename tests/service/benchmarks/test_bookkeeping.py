"""The bookkeeping bench drives the real logger and a real SQLite store, through both writers:
every run ends with every epoch once, and batching cuts the writes (a flush interval longer than
the run): MLflow's log_batch to one per run, the SQL writer to one for all runs."""
from __future__ import annotations

import pytest

from service.benchmarks.bookkeeping import main


@pytest.mark.slow  # the bookkeeping bench's sweeps through Tune and MLflow (13 s): make test only
def test_the_bench_counts_the_writes_and_checks_every_epoch(tmp_path):
    out = tmp_path / "bookkeeping.json"
    rows = main(["--trials", "20", "--epochs", "3", "--pack-size", "10", "--flush-s", "0,60",
                 "--writers", "log_batch,sql", "--out", str(out)])
    writes = {(row["writer"], row["flush_s"]): row["epoch_write_calls"] for row in rows}
    for row in rows:
        assert row["runs_finished"] == 20
        assert row["sampled_runs_with_every_epoch_once"] == "20/20"
        assert row["sustained_trial_epochs_per_s"] > 0 and row["trial_epochs_per_s"] > 0
    assert writes == {("log_batch", 0.0): 20 * 3,  # a call per run and epoch
                      ("log_batch", 60.0): 20,  # one per run: its three epochs at once
                      ("sql", 0.0): 2 * 3,  # a transaction per pack result: 2 packs of 10, 3 epochs
                      ("sql", 60.0): 1}  # one transaction for every run's three epochs
    assert out.exists()
