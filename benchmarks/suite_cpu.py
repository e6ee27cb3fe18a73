"""Where a test suite's CPU went, test by test: ``bash benchmarks/suite_cpu.sh`` (root, Debian's ``acct``).

The suite is CPU-bound on two cores, and most of its CPU is spent outside the test processes: in
the API servers, Ray heads, drivers and trial workers that the tests start. pytest's durations
do not show that (a test waiting on a sweep takes wall time, not CPU). This module joins two
records of one run:

- BSD process accounting (``accton``; ``dump-acct`` prints one line per process that ended: its
  command, user and system CPU, elapsed time, pid, parent pid at exit and start time);
- each test's start, end and the CPU of its own test process, which this module writes when pytest
  loads it as a plugin (``-p benchmarks.suite_cpu``, records in ``$ACTSWEEP_SUITE_CPU_DIR``).

A process is charged to the test that was running on its test process (its ancestor through the
parent pids) when it started. On a test process only one test runs at a time, so a sweep's driver
and trials started by a session's API server are charged to the test that submitted it. Processes
that outlive their test by more than 30 s (a session's Ray head or API server, started by the first
test that asked for it) are counted apart, as "outlived"; processes whose parent chain was cut
(daemons that re-parent to init) as "unattributed".

``python -m benchmarks.suite_cpu ACCT_FILE RECORDS_DIR [N]`` prints the N (40) costliest tests and
the costliest modules.
"""
from __future__ import annotations

import collections
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

OUTLIVED_S = 30.0  # a process living this much longer than the test that started it is a session's


@dataclass(frozen=True)
class Process:
    comm: str
    cpu_s: float  # user + system
    elapsed_s: float
    pid: int
    ppid: int  # (at its exit)
    start: float  # epoch seconds (dump-acct gives whole seconds)


@dataclass(frozen=True)
class ClockedTest:
    test: str
    pid: int  # the test process
    start: float
    end: float
    own_cpu_s: float  # the test process's own CPU over the test (setup, call, teardown)
    own_system_s: float = 0.0  # (of which in the kernel)
    page_faults: int = 0
    torch_threads: int | None = None  # torch's threads when the test ended (None: no torch imported)
    threads: int = 0  # the test process's threads when it ended


# -- the two records --------------------------------------------------------------------------------
def parse_dump_acct(text: str) -> list[Process]:
    """``dump-acct`` lines (fields separated by ``|``; times in centiseconds) → processes."""
    found = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 11:
            continue
        started = time.mktime(time.strptime(fields[-1], "%a %b %d %H:%M:%S %Y"))  # (ctime: local time)
        found.append(Process(fields[0], (float(fields[2]) + float(fields[3])) / 100, float(fields[4]) / 100,
                             int(fields[9]), int(fields[10]), started))
    return found


def read_test_runs(folder: Path) -> list[ClockedTest]:
    """The records the plugin wrote, one file per process. pytest-xdist's controller writes one too
    (it sees every test's report): its file holds every test, and is left out."""
    files = sorted(folder.glob("tests.*.jsonl"), key=lambda f: f.stat().st_size)
    if len(files) > 1:
        files = files[:-1]
    return [ClockedTest(**json.loads(line)) for f in files for line in f.read_text().splitlines() if line]


# -- the join ---------------------------------------------------------------------------------------
@dataclass
class Cost:
    own: float = 0.0  # in the test process
    started: float = 0.0  # processes it started, and theirs
    outlived: float = 0.0  # of those, the ones that lived on after it (a session's servers)
    wall: float = 0.0

    @property
    def total(self) -> float:
        return self.own + self.started + self.outlived


def attribute(processes: list[Process], runs: list[ClockedTest]) -> tuple[dict[str, Cost], dict[str, float]]:
    """Each test's CPU (its own, its processes', those that outlived it), and what could not be
    charged to a test: {"unattributed": …, "between tests": …}."""
    test_pids = {r.pid for r in runs}
    by_pid = {p.pid: p for p in processes}
    on_process = collections.defaultdict(list)
    costs: dict[str, Cost] = collections.defaultdict(Cost)
    for run in runs:
        on_process[run.pid].append(run)
        costs[run.test].own += run.own_cpu_s
        costs[run.test].wall += run.end - run.start
    left = {"unattributed": 0.0, "between tests": 0.0}
    for process in processes:
        if process.pid in test_pids:
            continue
        owner = _test_process_of(process, by_pid, test_pids)
        if owner is None:
            left["unattributed"] += process.cpu_s
            continue
        # (start times are whole seconds: a process started in a test's first second may read as before it)
        running = [r for r in on_process[owner] if r.start - 1 <= process.start <= r.end]
        if not running:
            left["between tests"] += process.cpu_s
            continue
        run = running[-1]
        if process.elapsed_s > run.end - run.start + OUTLIVED_S:
            costs[run.test].outlived += process.cpu_s
        else:
            costs[run.test].started += process.cpu_s
    return dict(costs), left


def _test_process_of(process: Process, by_pid: dict[int, Process], test_pids: set[int]) -> int | None:
    for _ in range(40):  # (a chain longer than this is a loop through a reused pid)
        if process.ppid in test_pids:
            return process.ppid
        parent = by_pid.get(process.ppid)
        if parent is None or parent is process:
            return None
        process = parent
    return None


def by_module(costs: dict[str, Cost]) -> dict[str, float]:
    """Each test module's CPU, costliest first."""
    modules = collections.Counter()
    for test, cost in costs.items():
        modules[test.split("::")[0]] += cost.total
    return dict(modules.most_common())


def report(processes: list[Process], runs: list[ClockedTest], top: int = 40) -> str:
    costs, left = attribute(processes, runs)
    total = sum(p.cpu_s for p in processes)
    tests_own = sum(c.own for c in costs.values())
    lines = [f"{total:,.0f} CPU-s in all: {tests_own:,.0f} in the tests' own processes (per test), "
             f"{sum(c.started for c in costs.values()):,.0f} in processes the tests started, "
             f"{sum(c.outlived for c in costs.values()):,.0f} in processes that outlived their test, "
             f"{left['unattributed']:,.0f} unattributed, {left['between tests']:,.0f} between tests",
             f"{'CPU-s':>7} {'own':>6} {'started':>7} {'outlived':>8} {'wall s':>7}  test"]
    for test, cost in sorted(costs.items(), key=lambda kv: -kv[1].total)[:top]:
        lines.append(f"{cost.total:7.1f} {cost.own:6.1f} {cost.started:7.1f} {cost.outlived:8.1f} {cost.wall:7.1f}  {test}")
    lines += ["", "by module:"] + [f"{cpu:7.1f}  {module}" for module, cpu in list(by_module(costs).items())[:25]]
    return "\n".join(lines)


# -- the pytest plugin (-p benchmarks.suite_cpu) -----------------------------------------------------
_started: dict[str, tuple[float, tuple[float, float, int]]] = {}  # test → (its start, _own_cpu() then)


def _own_cpu() -> tuple[float, float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt + usage.ru_majflt


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = (time.time(), _own_cpu())


def pytest_runtest_logfinish(nodeid, location):
    started, cpu = _started.pop(nodeid, (None, None))
    folder = os.environ.get("ACTSWEEP_SUITE_CPU_DIR")
    if started is None or not folder:
        return
    (user, system, faults), torch = _own_cpu(), sys.modules.get("torch")
    record = {"test": nodeid, "pid": os.getpid(), "start": started, "end": time.time(),
              "own_cpu_s": user + system - cpu[0] - cpu[1], "own_system_s": system - cpu[1], "page_faults": faults - cpu[2],
              "torch_threads": torch.get_num_threads() if torch else None,  # (what the test left)
              "threads": len(os.listdir("/proc/self/task"))}
    with open(Path(folder) / f"tests.{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(record) + "\n")


def main(argv: list[str]) -> None:
    acct, folder, *rest = argv
    dumped = subprocess.run(["dump-acct", acct], capture_output=True, text=True, check=True).stdout
    print(report(parse_dump_acct(dumped), read_test_runs(Path(folder)), int(rest[0]) if rest else 40))


if __name__ == "__main__":
    main(sys.argv[1:])
