"""The bench of Tune's result files runs both rows, each in its own process, on a real local Ray."""
from __future__ import annotations

from service.benchmarks.tune_results import main


def test_both_rows_are_measured_each_in_a_fresh_process(capsys):
    rows = main(["--members", "12", "--results", "3"])
    assert [row["tune_result_files"] for row in rows] == ["all", "result.json", "none"]
    assert all(row["wall_s"] > 0 and row["peak_mb"] > 50 for row in rows)
    printed = capsys.readouterr().out
    assert all(f"result files {files:>11}: 2 trials × 3 results of 12 members" in printed
               for files in ("all", "result.json", "none"))
