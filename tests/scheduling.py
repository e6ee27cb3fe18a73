"""Which test process runs which module (`make test`: pytest-xdist ``--dist loadfile``).

Whole modules, so that a module's fixtures are set up once: under ``worksteal`` a process that
stole the tail of `api/test_sweeps.py` set up its own API server, Ray head and `tiny_sweep` for it
(some 45 CPU-s each time, measured with `benchmarks/suite_cpu.sh`).

- **The API modules in two lanes.** Every module of `tests/service/api/` uses the session's Ray head
  and API server (`tests/service/api/conftest.py`). They are split between the first two test
  processes, longest first, so that the third never starts a head or a server.
- **The longest module first.** A process takes its lane's next module, else the longest module
  left that no lane holds (longest-processing-time first: a 200-s module of one test no longer
  comes last and ends the run alone). A lane whose process is gone is open to any process.

A module's length is its seconds in a full suite (`tests/module_seconds.json`, a run of 9456fa2); a module missing
from it counts half a second a test. `ACTSWEEP_MODULE_SECONDS_OUT=PATH make test` writes the
lengths of the run to PATH.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

API_MODULES = "tests/service/api/"
API_LANES = 2  # test processes gw0 and gw1
SECONDS_FILE = Path(__file__).with_name("module_seconds.json")
UNKNOWN_TEST_S = 0.5


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def module_seconds(nodeids: list[str], known: dict[str, float]) -> dict[str, float]:
    """Each module's length: as measured where known, else half a second a test."""
    tests = Counter(module_of(nodeid) for nodeid in nodeids)
    return {module: known.get(module, UNKNOWN_TEST_S * count) for module, count in tests.items()}


def api_lanes(seconds: dict[str, float], lanes: int = API_LANES) -> dict[str, int]:
    """The API modules dealt to ``lanes`` lanes, longest first, each to the lane with the least so far."""
    load = [0.0] * lanes
    pinned = {}
    for module in sorted((m for m in seconds if m.startswith(API_MODULES)), key=lambda m: (-seconds[m], m)):
        lane = min(range(lanes), key=lambda n: (load[n], n))
        pinned[module], load[lane] = lane, load[lane] + seconds[module]
    return pinned


def next_module(lane: int, queued: list[str], seconds: dict[str, float], pinned: dict[str, int],
                live_lanes: set[int]) -> str | None:
    """The module a process in ``lane`` runs next: its lane's longest, else the longest that no live
    lane holds; None where only other live lanes' modules are left."""
    def longest(candidates):
        return max(candidates, key=lambda m: (seconds[m], m), default=None)

    own = longest(m for m in queued if pinned.get(m) == lane)
    return own or longest(m for m in queued if pinned.get(m) not in live_lanes)


def read_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    return json.loads(path.read_text()) if path.exists() else {}


def make_scheduler(config, log):
    """The xdist scheduler for ``--dist loadfile``: whole modules, by lane and longest first."""
    from xdist.scheduler import LoadFileScheduling

    class ModulesByLane(LoadFileScheduling):
        def _assign_work_unit(self, node) -> None:
            if not hasattr(self, "_seconds"):
                self._seconds = module_seconds(self.collection, read_seconds())
                self._pinned = api_lanes(self._seconds, min(API_LANES, len(self.nodes)))
            live = {_lane(n) for n in self.nodes}
            module = next_module(_lane(node), list(self.workqueue), self._seconds, self._pinned, live)
            if module is None:  # only other lanes' modules are left: this process is done
                node.shutdown()
                return
            work_unit = self.workqueue.pop(module)
            self.assigned_work.setdefault(node, {})[module] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])

    return ModulesByLane(config, log)


def _lane(node) -> int:
    return int(node.gateway.id.removeprefix("gw"))


class ModuleClock:
    """Sums each module's test seconds (setup, call, teardown) as the reports arrive, and writes them
    at the end of the run where ACTSWEEP_MODULE_SECONDS_OUT names a file."""

    def __init__(self, out: str):
        self.out, self.seconds = Path(out), Counter()

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        ordered = {m: round(s, 1) for m, s in sorted(self.seconds.items(), key=lambda kv: (-kv[1], kv[0]))}
        self.out.write_text(json.dumps(ordered, indent=0) + "\n")


def register_module_clock(config) -> None:
    out = os.environ.get("ACTSWEEP_MODULE_SECONDS_OUT")
    if out and not hasattr(config, "workerinput"):  # (the controller sees every process's reports)
        config.pluginmanager.register(ModuleClock(out), "actsweep-module-clock")
