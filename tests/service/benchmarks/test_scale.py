"""The scale bench runs a real sweep (local Ray, MLflow on SQLite, the API over HTTP) and checks
that nothing was lost or written twice: a run per grid point, each finished with every epoch once."""
from __future__ import annotations

import json

import pytest

from service.benchmarks.scale import main, tiny_spec


def test_the_grid_stays_within_a_specs_seed_limit_at_10000_trials():
    spec = tiny_spec(10_000, "fused", 50)
    assert spec["seeds"] <= 1000
    assert 9_900 <= spec["seeds"] * len(spec["lr"]) * len(spec["activation"]) <= 10_000


@pytest.mark.long("a 16-trial sweep end to end on a local Ray, and actsweep serve asked over HTTP while it runs")
@pytest.mark.timeout(280)  # 40-100 s in full suites of two test processes, 110 s of three
def test_a_small_sweep_is_measured_and_whole(tmp_path):
    out = tmp_path / "scale.json"
    (row,) = main(["--sizes", "16", "--pack-size", "8", "--out", str(out)])
    assert row["runs"] == row["grid_points"] == 16
    assert row["duplicate_points"] == 0 and row["finished"] == 16 and row["runs_with_every_epoch_once"] == 16
    assert row["rest_during_sweep_ms"]["requests"] >= 1  # the API was asked while the sweep ran
    assert row["head_processes_left"] == 0  # the Ray head `serve` started for the bench's home, stopped
    assert json.loads(out.read_text())["rows"][0]["trials"] == 16
