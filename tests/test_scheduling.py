"""The test processes of make test: which runs which module (tests/scheduling.py, --dist loadfile),
and the threads each trains on (tests/conftest.py)."""
from __future__ import annotations

import json
import os

import pytest

from tests.scheduling import ModuleClock, api_lanes, module_seconds, next_module

API = "tests/service/api/"
SECONDS = {f"{API}test_sweeps.py": 480.0, f"{API}test_hardening.py": 210.0, f"{API}test_outages.py": 200.0,
           f"{API}test_fuzz.py": 30.0, "tests/service/test_cli.py": 110.0, "tests/workers/test_models.py": 5.0,
           "tests/test_layers.py": 2.0}


def test_a_module_not_measured_counts_half_a_second_a_test():
    nodeids = [f"tests/new.py::test_{n}" for n in range(6)] + ["tests/test_layers.py::test_a[x]"]
    assert module_seconds(nodeids, {"tests/test_layers.py": 2.0}) == {"tests/new.py": 3.0, "tests/test_layers.py": 2.0}


def test_the_api_modules_are_dealt_to_two_lanes_longest_first():
    lanes = api_lanes(SECONDS)
    assert set(lanes) == {m for m in SECONDS if m.startswith(API)}  # only the API modules are pinned
    assert lanes[f"{API}test_sweeps.py"] == 0 and lanes[f"{API}test_hardening.py"] == 1
    assert lanes[f"{API}test_outages.py"] == 1 and lanes[f"{API}test_fuzz.py"] == 1  # to the lane with less (410 s < 480)
    assert set(api_lanes(SECONDS, lanes=1).values()) == {0}  # one test process: every module in its lane


def test_a_process_takes_its_lanes_module_then_the_longest_no_live_lane_holds():
    lanes, queued = api_lanes(SECONDS), list(SECONDS)
    assert next_module(0, queued, SECONDS, lanes, {0, 1, 2}) == f"{API}test_sweeps.py"
    assert next_module(1, queued, SECONDS, lanes, {0, 1, 2}) == f"{API}test_hardening.py"
    assert next_module(2, queued, SECONDS, lanes, {0, 1, 2}) == "tests/service/test_cli.py"  # never an API module
    rest = ["tests/test_layers.py", "tests/workers/test_models.py"]
    assert next_module(0, rest, SECONDS, lanes, {0, 1, 2}) == "tests/workers/test_models.py"  # the longer one
    only_api = [f"{API}test_outages.py"]
    assert next_module(2, only_api, SECONDS, lanes, {0, 1, 2}) is None  # lane 1 will run it
    assert next_module(2, only_api, SECONDS, lanes, {0, 2}) == f"{API}test_outages.py"  # lane 1's process is gone


def test_the_module_clock_writes_each_modules_seconds_longest_first(tmp_path):
    class Report:
        def __init__(self, nodeid, duration):
            self.nodeid, self.duration = nodeid, duration

    clock = ModuleClock(str(tmp_path / "seconds.json"))
    for nodeid, duration in [("tests/a.py::t1", 1.0), ("tests/b.py::t", 4.0), ("tests/a.py::t2", 2.25)]:
        clock.pytest_runtest_logreport(Report(nodeid, duration))
    clock.pytest_sessionfinish()
    written = json.loads((tmp_path / "seconds.json").read_text())
    assert written == {"tests/b.py": 4.0, "tests/a.py": 3.2} and list(written) == ["tests/b.py", "tests/a.py"]


def test_a_test_process_trains_on_its_share_of_the_threads():
    """Under make test each test process trains on cores / processes threads (tests/conftest.py), even
    where a plugin imported torch before the variable was set, and no test before this one kept more."""
    import torch

    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if processes == 1:
        pytest.skip("one test process: it keeps torch's threads")
    assert torch.get_num_threads() == max(1, len(os.sched_getaffinity(0)) // processes)
