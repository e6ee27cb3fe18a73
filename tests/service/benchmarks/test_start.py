"""The start-up bench (`actsweep bench --workload start`): the "Wall time" line it reads, the sweep it
sends both ways, its memory sampler against a real allocation, and one real cold CLI measured."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces import load_spec, parse_set_options
from service.benchmarks.start import (EXPERIMENT, ONE_TRIAL, Sampler, cli_overrides, code_root_of, idle_then_peak,
                                      main, one_trial_cli, parse_wall_line)

REPO = Path(__file__).resolve().parents[3]

# actsweep run's last line, as a one-trial sweep printed it (2 cores, the line service/cli.py's cmd_run prints)
CAPTURED = ("Wall time 24.8 s: 23.3 s from the command to the first trial-epoch (Ray ready at 15.9 s, planned at "
            "18.1 s, first trial started at 19.7 s), 0.2 s to the last, 1.3 s for the tables and figures")
# and as the CLI printed it for a sweep it submitted to the home's running service (service/warm_run.py)
CAPTURED_SERVICE = "Wall time 17.3 s: submitted to the service at 1.3 s, its driver running at 3.4 s, ended at 15.0 s, 2.3 s for the tables"


def test_the_wall_time_line_gives_the_start_s_parts():
    text = "| relu | 0.0 | 0.001 |\nReport again: actsweep report abc\n" + CAPTURED + "\n"
    assert parse_wall_line(text) == {"ray_ready_s": 15.9, "planned_s": 18.1, "first_trial_s": 19.7,
                                     "first_epoch_s": 23.3, "wall_s": 24.8, "training_s": 0.2, "tables_s": 1.3}
    # an older CLI's line, without the plan's mark, still gives what it has
    older = CAPTURED.replace("planned at 18.1 s, ", "")
    assert "planned_s" not in parse_wall_line(older) and parse_wall_line(older)["first_trial_s"] == 19.7
    assert parse_wall_line("actsweep: sweep failed\n") == {}


def test_the_wall_time_line_of_a_sweep_run_through_the_home_s_service():
    assert parse_wall_line("Report again: actsweep report fb4\n" + CAPTURED_SERVICE + "\n") == {
        "submitted_s": 1.3, "driver_running_s": 3.4, "ended_s": 15.0, "wall_s": 17.3, "tables_s": 2.3}
    assert parse_wall_line(CAPTURED_SERVICE.replace("its driver running at 3.4 s, ", "")) == {
        "submitted_s": 1.3, "ended_s": 15.0, "wall_s": 17.3, "tables_s": 2.3}  # (a sweep it never saw running)
    assert parse_wall_line(CAPTURED + "\n" + CAPTURED_SERVICE)["ended_s"] == 15.0  # the last line counts


def test_the_cli_still_prints_the_lines_the_bench_reads():
    source = (REPO / "service" / "cli.py").read_text()
    for piece in ('console.print(f"Wall time ', 's from the command "', 'to the first trial-epoch ({start}, first trial '
                  'started at ', 's to the last, ', 's for the tables "', 'marks = {"Ray ready": '):
        assert piece in source, piece
    source = (REPO / "service" / "warm_run.py").read_text()
    for piece in ('console.print(f"Wall time ', ' s: submitted to the service at "', '", its driver running at ',
                  '", ended at {ended - started:.1f} s, {time.time() - ended:.1f} s for the tables"'):
        assert piece in source, piece


def test_the_cli_and_rest_sweeps_are_the_same_one_trial_spec():
    sets = one_trial_cli()
    assert sets[:3] == ["run", EXPERIMENT, "--quick"]
    from_cli = load_spec(EXPERIMENT, quick=True, overrides=parse_set_options(sets[4::2]))
    from_rest = load_spec(EXPERIMENT, quick=True, overrides=dict(ONE_TRIAL))
    assert from_cli.model_dump() == from_rest.model_dump()
    assert (from_cli.trial_count, from_cli.epochs, from_cli.train_subset) == (1, 1, 1000)
    assert from_cli.execution.rerun is True
    assert cli_overrides({"lr": [0.001, 0.0001], "x": False}) == ["--set", "lr=0.001,0.0001", "--set", "x=false"]


def test_a_driver_s_code_is_its_working_folder_s_then_pythonpath_s(tmp_path):
    assert code_root_of(str(tmp_path), f"{REPO}{':'}/elsewhere") == str(REPO)
    assert code_root_of(str(REPO), str(tmp_path)) == str(REPO)  # (python -m: the working folder comes first)
    assert code_root_of(str(tmp_path), "") is None


def test_the_sampler_sees_a_child_s_300_mb_above_idle():
    # Other processes on a shared machine start and end meanwhile (±300 MB in a second, seen here): the
    # allocation is looked for up to three times; one sighting of 250 MB of the 300 above idle is enough.
    allocate = ("import resource, time; b = bytearray(b'x') * (300 * 2 ** 20); "
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True); time.sleep(2)")
    seen = []
    for _ in range(3):
        sampler = Sampler(every_s=0.1)
        sampler.start()
        try:
            idle, peak, out = idle_then_peak(sampler, 1.0, lambda: subprocess.run(
                [sys.executable, "-c", allocate], capture_output=True, text=True, timeout=60).stdout)
        finally:
            sampler.stop()
        assert int(out) * 1024 >= 300 * 2 ** 20  # (the child did hold it)
        seen.append((peak - idle) / 2 ** 20)
        if seen[-1] >= 250:
            break
    assert seen[-1] >= 250, f"MB above idle in each try: {seen}"


@pytest.mark.slow  # a one-trial sweep from a cold CLI, through Ray Tune and MLflow (25-60 s on 2 busy cores)
@pytest.mark.long("a one-trial sweep from a cold CLI end to end, with Ray's start")
@pytest.mark.timeout(300)
def test_a_cold_cli_measured_writes_the_json_the_page_reads(tmp_path):
    before = set(Path("/tmp").glob("actsweep-start-*"))
    out = tmp_path / "start.json"
    summary = main(["--skip", "rest,warm_cli,demo,concurrent", "--out", str(out)])
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(summary))
    for key in ("command", "hardware", "date", "commit", "cores", "cpu_model"):
        assert written[key], key
    assert written["command"].startswith("actsweep bench --workload start --skip")
    assert written["before"] is None and list(written["sides"]) == ["after"]
    cold = written["sides"]["after"]["cold_cli"]
    assert len(cold["exit_s"]["runs"]) == 1 and cold["exit_s"]["median"] == cold["exit_s"]["runs"][0] > 0
    parts = {k: v["median"] for k, v in cold["parts"].items()}
    assert 0 < parts["ray_ready_s"] <= parts["first_trial_s"] <= parts["first_epoch_s"] <= parts["wall_s"]
    assert parts["wall_s"] <= cold["exit_s"]["median"] + 1  # (the line is printed before the process exits)
    assert "errors" not in written["sides"]["after"]
    assert set(Path("/tmp").glob("actsweep-start-*")) <= before  # its homes are gone
