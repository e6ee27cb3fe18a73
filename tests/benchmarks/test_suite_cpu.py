"""benchmarks/suite_cpu.py: each process's CPU charged to the test that started it."""
import json
import subprocess
import sys
import time

import pytest

from benchmarks.suite_cpu import ClockedTest, Process, attribute, by_module, parse_dump_acct, read_test_runs

WORKER = 500  # a test process


def _runs():
    return [ClockedTest("tests/a.py::test_server", WORKER, 100.0, 110.0, 2.0),
            ClockedTest("tests/a.py::test_sweep", WORKER, 110.0, 200.0, 1.0),
            ClockedTest("tests/b.py::test_other", 600, 100.0, 300.0, 5.0)]


def test_each_process_is_charged_to_the_test_running_on_its_test_process_when_it_started():
    processes = [
        Process("python", 2.0, 190.0, 501, WORKER, 101.0),  # a session's server: started in test_server, lived on
        Process("raylet", 1.0, 185.0, 502, 501, 102.0),  # the server's Ray (its child) lives on too
        Process("python", 9.0, 20.0, 503, 502, 120.0),  # a driver the server started while test_sweep ran
        Process("ray::ImplicitFu", 4.0, 15.0, 504, 502, 125.0),  # its trial
        Process("ray::DashboardA", 3.0, 200.0, 505, 1, 100.0),  # re-parented to init: no chain to a test
        Process("python", 0.5, 1.0, 506, 600, 150.0),  # the other test process's CLI run
        Process("python", 7.0, 1.0, WORKER, 1, 90.0),  # the test process itself: its tests' own CPU counts
    ]
    costs, left = attribute(processes, _runs())
    assert costs["tests/a.py::test_server"].outlived == pytest.approx(3.0)  # the server and its raylet
    assert costs["tests/a.py::test_server"].started == 0.0 and costs["tests/a.py::test_server"].own == 2.0
    assert costs["tests/a.py::test_sweep"].started == pytest.approx(13.0)  # the driver and its trial
    assert costs["tests/b.py::test_other"].total == pytest.approx(5.5)
    assert left == {"unattributed": 3.0, "between tests": 0.0}
    assert by_module(costs) == {"tests/a.py": pytest.approx(19.0), "tests/b.py": pytest.approx(5.5)}


def test_a_process_started_between_two_tests_is_counted_apart():
    costs, left = attribute([Process("python", 1.5, 2.0, 510, 600, 350.0)], _runs())
    assert left["between tests"] == 1.5 and all(c.started == 0 for c in costs.values())


def test_dump_acct_lines_are_read_with_user_and_system_cpu_in_centiseconds():
    line = ("python          |v3|   250.00|    50.00|  1200.00|     0|     0| 45000.00|     0.00|    4242|    4200|     "
            "|       0|python  |Sat Nov 28 11:57:17 2026")
    process, = parse_dump_acct(line + "\nnot a record\n")
    assert (process.comm, process.cpu_s, process.elapsed_s, process.pid, process.ppid) == ("python", 3.0, 12.0, 4242, 4200)
    assert process.start == time.mktime(time.strptime("Sat Nov 28 11:57:17 2026", "%a %b %d %H:%M:%S %Y"))


def test_the_controllers_copy_of_every_test_is_left_out(tmp_path):
    for pid, runs in ((1, _runs()[:1]), (2, _runs()[1:2]), (3, _runs())):  # 3: pytest-xdist's controller
        (tmp_path / f"tests.{pid}.jsonl").write_text("".join(json.dumps(r.__dict__) + "\n" for r in runs))
    assert sorted(r.test for r in read_test_runs(tmp_path)) == ["tests/a.py::test_server", "tests/a.py::test_sweep"]


def test_the_plugins_records_read_back(tmp_path, monkeypatch):
    from benchmarks import suite_cpu

    monkeypatch.setenv("ACTSWEEP_SUITE_CPU_DIR", str(tmp_path))
    suite_cpu.pytest_runtest_logstart("tests/a.py::test_x", None)
    sum(range(200_000))
    suite_cpu.pytest_runtest_logfinish("tests/a.py::test_x", None)
    (run,) = read_test_runs(tmp_path)
    # (CPU time is user + system, each a float difference: where the user part is nil the two may differ in
    # their last bit)
    assert run.test == "tests/a.py::test_x" and run.end >= run.start and run.own_cpu_s >= run.own_system_s - 1e-9
    assert run.own_system_s >= 0
    assert run.threads >= 1 and run.page_faults >= 0


def test_loading_the_plugin_imports_no_torch():
    """pytest loads it before tests/conftest.py gives each test process its share of the threads: a torch
    imported by then would read OMP_NUM_THREADS unset (conftest then sets the threads itself)."""
    probe = "import sys, benchmarks.suite_cpu; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"
