"""How fast a sweep starts: a cold and a warm CLI, a warm REST submission, the demo's first epoch, and
the API under N submissions at once; with ``--before REF``, an older commit's code and this
checkout's, alternating in one run (this machine's speed drifts by ±20% between hours).

    actsweep bench --workload start [--before REF] [--repeats 3] [--rounds 1] [--concurrent 16]
                                    [--skip cold_cli,rest,warm_cli,demo,concurrent] [--timeout 900]
                                    [--out docs/benchmarks/start.json]

The one-trial sweep: ``mnist_classification --quick`` with epochs=1, train_subset=1000, activation
[relu], lr [0.001], dropout [0], seeds=1 and execution.rerun=true (no trial cache).

- cold_cli: a fresh ACTSWEEP_HOME, ``actsweep run`` of the one-trial sweep, from the command to the
  process's exit, and the parts its "Wall time" line gives (Ray ready, first trial started, first
  trial-epoch);
- rest: a fresh home, ``actsweep serve`` on a free port until GET /healthz answers (serve_ready),
  one warm-up sweep to its end (first_sweep, not counted), then ``--repeats`` one-trial sweeps, each
  POSTed and its GET /sweeps/{id} polled every 0.1 s: the POST's latency, the time to ``running``,
  the time to a terminal state;
- warm_cli: with that home's service still running, ``actsweep run`` of the one-trial sweep in the
  same home (whatever the CLI does with a running head);
- demo: a fresh home, ``actsweep run mnist_classification --quick`` (make demo's sweep): its
  first trial-epoch and its wall time as its "Wall time" line says, and its process's exit;
- concurrent: a fresh home's warm service (serve, one warm-up), ``--concurrent`` one-trial sweeps
  POSTed at once, then polled until each ends: each one's time from the first POST to its end, how
  many succeeded, failed or were lost (a record missing, or not ended within ``--timeout``), the
  machine's peak memory above idle (total − available, every 0.2 s; idle: the median of the 2 s
  before the POSTs), the most sweep drivers alive at once (their Ray job processes, ``python -m
  service.driver``, and the drivers a home's driver server forked), and the largest
  ``queue_position`` a sweep's record showed, where records have one.

Each side runs the same interpreter (this one) with PYTHONPATH at its code (the before side: a
``git worktree add --detach`` of REF, removed at the end) from a folder outside any checkout, the
CLI as ``python -c "...from service.cli import main..."`` (as benchmarks/demo_before_after.sh).
The Ray head that ``serve`` starts inherits that environment, and so do the sweep drivers it runs;
the bench reads a driver's working folder and PYTHONPATH from /proc and records which checkout its
``python -m service.driver`` imports (``driver_code``). Sides alternate: each measurement runs for
both sides back to back, the first side changing from one measurement to the next (ABBA).

Every service started is stopped (``actsweep stop --force``, then its process group) and every
temporary home removed, also on failure. Written as JSON (``--out``) after each measurement.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from service.driver.provenance import _cpu_model as cpu_model
from service.ports import free_port

REPO = Path(__file__).resolve().parents[2]
LAUNCH = "import sys; from service.cli import main; sys.argv = ['actsweep', *sys.argv[1:]]; sys.exit(main())"
EXPERIMENT = "mnist_classification"
ONE_TRIAL = {"epochs": 1, "train_subset": 1000, "activation": ["relu"], "lr": [0.001], "dropout": [0], "seeds": 1,
             "execution.rerun": True}
MEASUREMENTS = ("cold_cli", "rest", "warm_cli", "demo", "concurrent")
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "interrupted"})
GIB = 2 ** 30

# actsweep run's last line, as it runs a sweep itself (service/cli.py cmd_run):
#   Wall time 41.3 s: 30.2 s from the command to the first trial-epoch (Ray ready at 9.1 s, planned at
#   12.0 s, first trial started at 25.3 s), 2.0 s to the last, 9.1 s for the tables and figures
# or as it submits it to the home's running service (service/warm_run.py):
#   Wall time 17.3 s: submitted to the service at 1.3 s, its driver running at 3.4 s, ended at 15.0 s,
#   2.3 s for the tables
WALL = re.compile(r"Wall time ([\d.]+) s: ([\d.]+) s from the command to the first trial-epoch \((.*?)\), "
                  r"([\d.]+) s to the last, ([\d.]+) s for the tables")
WALL_SERVICE = re.compile(r"Wall time ([\d.]+) s: submitted to the service at ([\d.]+) s(?:, its driver running at "
                          r"([\d.]+) s)?, ended at ([\d.]+) s, ([\d.]+) s for the tables")
MARK = re.compile(r"([A-Za-z][A-Za-z -]*?) at ([\d.]+) s")
MARK_KEYS = {"Ray ready": "ray_ready_s", "planned": "planned_s", "first trial started": "first_trial_s"}


def parse_wall_line(text: str) -> dict[str, float]:
    """The parts of the last "Wall time" line in ``text``, in seconds from the command. A sweep the CLI
    ran itself: ray_ready_s, planned_s, first_trial_s (where the line gives them), first_epoch_s; one it
    submitted to the home's service: submitted_s, driver_running_s (where given), ended_s; both: wall_s
    and tables_s (a duration), the first also training_s. {} where there is no such line."""
    found = sorted([*WALL.finditer(text), *WALL_SERVICE.finditer(text)], key=lambda m: m.start())
    if not found:
        return {}
    line = found[-1]
    if line.re is WALL_SERVICE:
        wall, submitted, running, ended, tables = line.groups()
        parts = {"submitted_s": float(submitted), **({"driver_running_s": float(running)} if running else {}),
                 "ended_s": float(ended)}
        return {**parts, "wall_s": float(wall), "tables_s": float(tables)}
    parts = {MARK_KEYS.get(name, re.sub(r"\W+", "_", name.strip().lower()) + "_s"): float(value)
             for name, value in MARK.findall(line.group(3))}
    parts.update({"first_epoch_s": float(line.group(2)), "wall_s": float(line.group(1)),
                  "training_s": float(line.group(4)), "tables_s": float(line.group(5))})
    return parts


def cli_overrides(overrides: dict) -> list[str]:
    """``--set NAME=VALUE`` arguments for the overrides as REST takes them (a list: a comma list)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return ",".join(map(str, v)) if isinstance(v, list) else str(v)
    return [a for name, v in overrides.items() for a in ("--set", f"{name}={value(v)}")]


def stat(values: list[float], digits: int = 2) -> dict:
    """A measurement's median and every repeat (None where nothing was measured)."""
    values = [v for v in values if v is not None]
    return {"median": round(statistics.median(values), digits) if values else None,
            "runs": [round(v, digits) for v in values]}


def memory_used() -> int:
    """Bytes in use on the machine: total − available (page cache not counted)."""
    vm = psutil.virtual_memory()
    return vm.total - vm.available


class Sampler(threading.Thread):
    """The machine's memory in use every ``every_s`` (and, where given, ``probe()`` every ``probe_every``-th
    sample) in a thread of its own, until stop()."""

    def __init__(self, every_s: float = 0.2, probe=None, probe_every: int = 3):
        super().__init__(daemon=True)
        self.every_s, self.probe, self.probe_every = every_s, probe, probe_every
        self.samples: list[tuple[float, int]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        tick = 0
        while not self._halt.is_set():
            self.samples.append((time.monotonic(), memory_used()))
            if self.probe is not None and tick % self.probe_every == 0:
                self.probe()
            tick += 1
            self._halt.wait(self.every_s)

    def stop(self) -> None:
        self._halt.set()
        if self.ident is not None:  # (started)
            self.join(10)

    def between(self, start: float, end: float = float("inf")) -> list[int]:
        return [used for t, used in list(self.samples) if start <= t <= end]


def idle_then_peak(sampler: Sampler, idle_s: float, work):
    """Memory idle (the median over ``idle_s`` before ``work()``) and the peak while ``work()`` runs, in
    bytes, and what ``work()`` returned. The sampler must be running."""
    began = time.monotonic()
    time.sleep(idle_s)
    mark = time.monotonic()
    idle = statistics.median(sampler.between(began, mark) or [memory_used()])
    result = work()
    time.sleep(2 * sampler.every_s)  # (the last samples of the work)
    peak = max(sampler.between(mark) or [idle])
    return idle, peak, result


# -- each side's code ---------------------------------------------------------------------------


@dataclass
class Side:
    name: str  # "before" or "after"
    root: Path  # the checkout whose code it runs
    commit: str

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-c", LAUNCH, *args]

    def env(self, home: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ACTSWEEP_") and k not in ("RAY_ADDRESS", "PYTHONDONTWRITEBYTECODE")}
        env.update({"PYTHONPATH": str(self.root), "ACTSWEEP_HOME": str(home), "ACTSWEEP_DOWNLOAD": "false"})
        return env


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def code_root_of(cwd: str, pythonpath: str) -> str | None:
    """The checkout ``python -m service.driver`` imports from, in that folder with that PYTHONPATH: -m puts
    the working folder first on sys.path, then PYTHONPATH's entries (the venv's editable install comes last)."""
    for entry in [cwd, *filter(None, pythonpath.split(os.pathsep))]:
        if (Path(entry) / "service" / "__init__.py").is_file():
            return str(Path(entry).resolve())
    return None


def home_processes(home: Path) -> list[psutil.Process]:
    """The processes started for ``home`` (their environment names it: the CLI, serve, its Ray head,
    the sweep drivers), however deep below the process the bench started."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get("ACTSWEEP_HOME") == str(home):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return found


def end_processes(processes: list[psutil.Process], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL for those still running after ``grace_s``."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)


@dataclass
class DriverWatch:
    """Counts a home's sweep drivers: the Ray jobs' processes (``python -m service.driver ID``), the
    driver server (``-m service.driver.warm serve``) and the drivers it forked (its children, with its
    command line); records the most alive at once, and where the first job process and the first driver
    server take their code from (``code``: {"job": ..., "server": ...})."""
    home: Path
    most: dict = field(default_factory=lambda: {"jobs": 0, "forked": 0, "processes": 0})
    code: dict = field(default_factory=dict)

    def __call__(self) -> None:
        found = []  # (process, parent's pid, argv) of this home's processes running the driver's code
        for process in psutil.process_iter(["cmdline", "ppid"]):
            argv = process.info["cmdline"] or []
            if "service.driver" not in " ".join(argv):
                continue
            try:
                if process.environ().get("ACTSWEEP_HOME") == str(self.home):
                    found.append((process, process.info["ppid"], argv))
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue
        jobs = [p for p, _, argv in found if "service.driver" in argv]  # (not a shell whose -c line names it)
        warm = {p.pid: ppid for p, ppid, argv in found if "service.driver.warm" in argv}
        servers = {pid for pid, ppid in warm.items() if ppid not in warm}
        forked = [pid for pid, ppid in warm.items() if ppid in servers]
        for key, count in (("jobs", len(jobs)), ("forked", len(forked)), ("processes", len(found))):
            self.most[key] = max(self.most[key], count)
        by_pid = {p.pid: p for p, _, _ in found}
        for kind, processes in (("job", jobs), ("server", [by_pid[pid] for pid in servers])):
            if kind not in self.code and processes:
                try:
                    cwd, pythonpath = processes[0].cwd(), processes[0].environ().get("PYTHONPATH", "")
                except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
                    continue
                self.code[kind] = {"cwd": cwd, "pythonpath": pythonpath, "code_root": code_root_of(cwd, pythonpath)}


# -- the measurements ---------------------------------------------------------------------------


class Failed(RuntimeError):
    pass


def run_command(side: Side, home: Path, args: list[str], work: Path, log: Path, timeout_s: float) -> tuple[float, str]:
    """Run the side's CLI with ``args``; the seconds from the command to its exit, and its output."""
    started = time.perf_counter()
    with open(log, "wb") as out:
        process = subprocess.Popen(side.command(*args), cwd=work, env=side.env(home), stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            end_processes([process, *home_processes(home)])
            raise Failed(f"`actsweep {' '.join(args[:2])}` did not exit within {timeout_s:.0f} s (log: {log})")
    exited = time.perf_counter() - started
    text = log.read_text(errors="replace")
    if code != 0:
        raise Failed(f"`actsweep {' '.join(args[:2])}` exited {code}: {text.strip().splitlines()[-1:] or ''} (log: {log})")
    return exited, text


def one_trial_cli() -> list[str]:
    return ["run", EXPERIMENT, "--quick", *cli_overrides(ONE_TRIAL)]


def one_trial_body() -> dict:
    return {"experiment": EXPERIMENT, "quick": True, "overrides": dict(ONE_TRIAL), "rerun": True}


class Service:
    """``actsweep serve`` of one side on a fresh home, in a process group of its own."""

    def __init__(self, side: Side, home: Path, work: Path, timeout_s: float):
        self.side, self.home, self.work, self.timeout_s = side, home, work, timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.ray_temp: str | None = None
        self.stopped = False

    def start(self) -> float:
        """Seconds from the command until GET /healthz answers."""
        self.home.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with open(self.home.parent / f"{self.home.name}-serve.log", "ab") as out:
            self.process = subprocess.Popen(self.side.command("serve", "--port", str(self.port), "--log-level", "warning"),
                                            cwd=self.work, env=self.side.env(self.home), stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        with httpx.Client(timeout=5) as client:
            while time.perf_counter() - started < self.timeout_s:
                if self.process.poll() is not None:
                    raise Failed(f"`actsweep serve` exited {self.process.returncode} (log: {out.name})")
                try:
                    client.get(f"{self.url}/healthz")
                    ready = time.perf_counter() - started
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            else:
                raise Failed(f"`actsweep serve` did not answer within {self.timeout_s:.0f} s (log: {out.name})")
        head = self.home / "ray" / "head.json"  # (its folder under /tmp, removed by stop())
        if head.is_file():
            self.ray_temp = json.loads(head.read_text()).get("temp_dir")
        return ready

    def stop(self) -> None:
        """``actsweep stop --force`` (its Ray head), then the serve process group, then whatever is left
        that was started for this home; its Ray folder and the home removed. Once: later calls do nothing."""
        if self.stopped:
            return
        self.stopped = True
        try:
            subprocess.run(self.side.command("stop", "--force"), cwd=self.work, env=self.side.env(self.home),
                           capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            pass
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(30)
        end_processes(home_processes(self.home))
        if self.ray_temp and Path(self.ray_temp).name.startswith("actsweep-ray-"):
            shutil.rmtree(self.ray_temp, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)


def submit(client: httpx.Client) -> tuple[str, float]:
    began = time.perf_counter()
    response = client.post("/sweeps", json=one_trial_body())
    latency = time.perf_counter() - began
    if response.status_code != 202:
        raise Failed(f"POST /sweeps answered {response.status_code}: {response.text[:300]}")
    return response.json()["id"], latency


def follow(client: httpx.Client, sweep_id: str, began: float, timeout_s: float, every_s: float = 0.1) -> dict:
    """Poll GET /sweeps/{id} until a terminal state: seconds from ``began`` to running and to the end."""
    running = None
    while time.perf_counter() - began < timeout_s:
        record = client.get(f"/sweeps/{sweep_id}").json()
        now = time.perf_counter() - began
        if running is None and record["state"] != "queued":
            running = now
        if record["state"] in TERMINAL:
            return {"running_s": running, "terminal_s": now, "state": record["state"], "error": record.get("error")}
        time.sleep(every_s)
    raise Failed(f"sweep {sweep_id} did not end within {timeout_s:.0f} s")


def warm_up(client: httpx.Client, timeout_s: float) -> float:
    began = time.perf_counter()
    sweep_id, _ = submit(client)
    end = follow(client, sweep_id, began, timeout_s, every_s=0.25)
    if end["state"] != "succeeded":
        raise Failed(f"the warm-up sweep {sweep_id} ended {end['state']}: {end['error']}")
    return end["terminal_s"]


def measure_concurrent(client_url: str, n: int, timeout_s: float) -> dict:
    """N one-trial sweeps POSTed at once (a thread each), then every open one polled each 0.5 s."""
    barrier, posted, lock = threading.Barrier(n + 1), [None] * n, threading.Lock()

    def post(i: int) -> None:
        with httpx.Client(base_url=client_url, timeout=120) as client:
            barrier.wait()
            began = time.perf_counter()
            try:
                response = client.post("/sweeps", json=one_trial_body())
                outcome = (response.status_code, response.json().get("id") if response.status_code == 202 else None)
            except httpx.HTTPError as exc:
                outcome = (type(exc).__name__, None)
            with lock:
                posted[i] = (*outcome, time.perf_counter() - began)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    barrier.wait()
    first = time.perf_counter()
    for thread in threads:
        thread.join()
    accepted = [p[1] for p in posted if p[1]]
    ends, states, queue_max = {}, {}, None
    with httpx.Client(base_url=client_url, timeout=60) as client:
        while len(ends) < len(accepted) and time.perf_counter() - first < timeout_s:
            for sweep_id in accepted:
                if sweep_id in ends:
                    continue
                response = client.get(f"/sweeps/{sweep_id}")
                if response.status_code != 200:
                    states[sweep_id] = f"HTTP {response.status_code}"
                    continue
                record = response.json()
                states[sweep_id] = record["state"]
                if record.get("queue_position") is not None:
                    queue_max = max(queue_max or 0, record["queue_position"])
                if record["state"] in TERMINAL:
                    ends[sweep_id] = time.perf_counter() - first
            time.sleep(0.5)
        for sweep_id in accepted:  # (what did not end: cancelled before the service stops)
            if sweep_id not in ends:
                client.delete(f"/sweeps/{sweep_id}")
    counted = {s: sum(1 for i in accepted if i in ends and states[i] == s) for s in TERMINAL}
    return {"n": n, "post_statuses": sorted(str(p[0]) for p in posted), "post_s": stat([p[2] for p in posted]),
            "end_s": stat([ends[i] for i in accepted if i in ends]), "succeeded": counted["succeeded"],
            "failed": sum(counted.values()) - counted["succeeded"], "lost": len(accepted) - len(ends),
            "rejected": n - len(accepted), "max_queue_position": queue_max,
            "not_ended": {i: states.get(i) for i in accepted if i not in ends}}


# -- the bench ----------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, sides: list[Side], work: Path, report: dict, out: Path | None):
        self.args, self.sides, self.work, self.report, self.out = args, sides, work, report, out
        self.homes: list[Path] = []  # every home made, and every service started, for the last clean-up
        self.services: list[Service] = []

    def home(self, side: Side, what: str) -> Path:
        home = self.work / f"h{len(self.homes) + 1}-{side.name}-{what}"  # (short: Ray's sockets' paths have a limit)
        self.homes.append(home)
        return home

    def record(self, side: Side, key: str, value) -> None:
        self.report["sides"][side.name].setdefault(key, []).append(value)
        self.save()

    def error(self, side: Side, what: str, exc: BaseException) -> None:
        line = f"{what}: {exc}"
        self.report["sides"][side.name].setdefault("errors", []).append(line)
        print(f"  {side.name:6} {line}", flush=True)
        self.save()

    def save(self) -> None:
        if self.out:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.out.write_text(json.dumps(summarise(self.report), indent=2) + "\n")

    def cli_run(self, side: Side, home: Path, args: list[str], what: str) -> dict:
        home.mkdir(parents=True, exist_ok=True)
        exited, text = run_command(side, home, args, self.work, self.work / f"{home.name}-{what}.log", self.args.timeout)
        return {"exit_s": exited, "parts": parse_wall_line(text)}

    def cold_cli(self, side: Side) -> None:
        home = self.home(side, "cold")
        try:
            one = self.cli_run(side, home, one_trial_cli(), "cold_cli")
        finally:
            end_processes(home_processes(home))
            shutil.rmtree(home, ignore_errors=True)
        self.record(side, "cold_cli", one)
        print(f"  {side.name:6} cold CLI: exited after {one['exit_s']:.1f} s; {parts_line(one['parts'])}", flush=True)

    def demo(self, side: Side) -> None:
        home = self.home(side, "demo")
        try:
            one = self.cli_run(side, home, ["run", EXPERIMENT, "--quick"], "demo")
        finally:
            end_processes(home_processes(home))
            shutil.rmtree(home, ignore_errors=True)
        self.record(side, "demo", one)
        print(f"  {side.name:6} demo: exited after {one['exit_s']:.1f} s; {parts_line(one['parts'])}", flush=True)

    def warm_session(self, side: Side, rest: bool, warm_cli: bool) -> None:
        home = self.home(side, "warm")
        service, watch = self.service(side, home), DriverWatch(home)
        sampler = Sampler(probe=watch)
        try:
            ready = service.start()
            sampler.start()
            with httpx.Client(base_url=service.url, timeout=60) as client:
                first = warm_up(client, self.args.timeout)
                self.record(side, "serve", {"ready_s": ready, "first_sweep_s": first})
                print(f"  {side.name:6} serve: API answered after {ready:.1f} s; the warm-up sweep ended after "
                      f"{first:.1f} s", flush=True)
                self.check_code(side, watch)
                for i in range(self.args.repeats if rest else 0):
                    began = time.perf_counter()
                    sweep_id, latency = submit(client)
                    end = follow(client, sweep_id, began, self.args.timeout)
                    self.record(side, "rest", {"post_s": latency, **end})
                    print(f"  {side.name:6} warm REST {i + 1}/{self.args.repeats}: POST {1000 * latency:.0f} ms, running "
                          f"at {fmt(end['running_s'])} s, {end['state']} at {end['terminal_s']:.1f} s", flush=True)
            if warm_cli:
                one = self.cli_run(side, home, one_trial_cli(), "warm_cli")
                self.record(side, "warm_cli", one)
                print(f"  {side.name:6} warm CLI: exited after {one['exit_s']:.1f} s; {parts_line(one['parts'])}",
                      flush=True)
        finally:
            sampler.stop()
            service.stop()

    def service(self, side: Side, home: Path) -> Service:
        service = Service(side, home, self.work, self.args.timeout)
        self.services.append(service)
        return service

    def concurrent(self, side: Side) -> None:
        home = self.home(side, "many")
        service, watch = self.service(side, home), DriverWatch(home)
        sampler = Sampler(probe=watch)
        try:
            service.start()
            sampler.start()
            with httpx.Client(base_url=service.url, timeout=60) as client:
                warm_up(client, self.args.timeout)
            self.check_code(side, watch)
            watch.most = {k: 0 for k in watch.most}  # (the warm-up's driver is not counted)
            idle, peak, one = idle_then_peak(sampler, 2.0, lambda: measure_concurrent(service.url, self.args.concurrent,
                                                                                       self.args.timeout))
        finally:
            sampler.stop()
            service.stop()
        one.update({"idle_memory_gib": idle / GIB, "peak_memory_above_idle_gib": (peak - idle) / GIB,
                    "max_driver_jobs": watch.most["jobs"], "max_forked_drivers": watch.most["forked"],
                    "max_driver_processes": watch.most["processes"]})
        self.record(side, "concurrent", one)
        print(f"  {side.name:6} {one['n']} at once: ended after {fmt(one['end_s']['median'])} s (median), "
              f"{fmt(max(one['end_s']['runs'], default=None))} s (last); {one['succeeded']} succeeded, {one['failed']} "
              f"failed, {one['lost']} lost, {one['rejected']} rejected; memory +{one['peak_memory_above_idle_gib']:.2f} GiB "
              f"above idle; at most {one['max_driver_jobs']} driver jobs, {one['max_forked_drivers']} forked drivers "
              f"alive; largest queue position {one['max_queue_position']}", flush=True)

    def check_code(self, side: Side, watch: DriverWatch) -> None:
        """Where the side's sweep driver (its Ray job's process, and the driver server where there is one)
        took its code from: it must be the side's checkout."""
        if not watch.code:
            print(f"  {side.name:6} no sweep driver was seen (it lived under 0.6 s): its code is not checked", flush=True)
            return
        expected = str(side.root.resolve())
        code = {kind: {**found, "ok": found["code_root"] == expected} for kind, found in watch.code.items()}
        self.report["sides"][side.name]["driver_code"] = {"expected": expected, **code}
        self.save()
        for kind, found in code.items():
            if not found["ok"]:
                raise Failed(f"the {side.name} side's sweep driver ({kind}) imports {found['code_root']}, not "
                             f"{expected} (cwd {found['cwd']}, PYTHONPATH {found['pythonpath']})")
        print(f"  {side.name:6} the sweep driver runs {expected} ("
              + "; ".join(f"{kind}: cwd {found['cwd']}, PYTHONPATH {found['pythonpath']}" for kind, found in code.items())
              + ")", flush=True)

    def run(self) -> None:
        plan = []
        for _ in range(self.args.rounds):
            if "cold_cli" not in self.args.skip:
                plan.append(("cold CLI", self.cold_cli))
            rest, warm_cli = "rest" not in self.args.skip, "warm_cli" not in self.args.skip
            if rest or warm_cli:
                plan.append(("warm REST and CLI", lambda side, r=rest, w=warm_cli: self.warm_session(side, r, w)))
            if "demo" not in self.args.skip:
                plan.append(("demo", self.demo))
            if "concurrent" not in self.args.skip:
                plan.append((f"{self.args.concurrent} at once", self.concurrent))
        for i, (what, measure) in enumerate(plan):
            print(f"{what}:", flush=True)
            for side in (self.sides if i % 2 == 0 else self.sides[::-1]):  # ABBA: neither side always first
                try:
                    measure(side)
                except (Failed, httpx.HTTPError, OSError, subprocess.SubprocessError) as exc:
                    self.error(side, what, exc)


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def parts_line(parts: dict) -> str:
    if not parts:
        return "no 'Wall time' line"
    marks = ", ".join(f"{k[:-2].replace('_', ' ')} {v:.1f} s" for k, v in parts.items()
                      if k not in ("wall_s", "training_s", "tables_s"))
    if "submitted_s" in parts:
        marks = f"through the home's service: {marks}"
    return f"Wall time {parts['wall_s']:.1f} s ({marks})"


def summarise(report: dict) -> dict:
    """The report with each side's repeats as {median, runs} per figure."""
    out = {k: v for k, v in report.items() if k != "sides"}
    out["sides"] = {}
    for name, side in report["sides"].items():
        done = {k: v for k, v in side.items() if k in ("commit", "root", "uncommitted_changes", "driver_code", "errors")}
        for key in ("cold_cli", "warm_cli", "demo"):
            if side.get(key):
                runs = side[key]
                names = sorted({p for r in runs for p in r["parts"]})
                done[key] = {"exit_s": stat([r["exit_s"] for r in runs]),
                             "parts": {p: stat([r["parts"].get(p) for r in runs]) for p in names}}
        if side.get("serve"):
            done["serve"] = {k: stat([r[k] for r in side["serve"]]) for k in ("ready_s", "first_sweep_s")}
        if side.get("rest"):
            done["rest"] = {k: stat([r[k] for r in side["rest"]]) for k in ("post_s", "running_s", "terminal_s")}
            done["rest"]["states"] = [r["state"] for r in side["rest"]]
        if side.get("concurrent"):
            runs = side["concurrent"]
            done["concurrent"] = {
                "n": runs[0]["n"], "end_s": stat([v for r in runs for v in r["end_s"]["runs"]]),
                "last_end_s": stat([max(r["end_s"]["runs"], default=None) for r in runs]),
                "post_s": stat([v for r in runs for v in r["post_s"]["runs"]], 3),
                **{k: [r[k] for r in runs] for k in ("succeeded", "failed", "lost", "rejected", "max_driver_jobs",
                                                    "max_forked_drivers", "max_driver_processes",
                                                    "max_queue_position")},
                "peak_memory_above_idle_gib": stat([r["peak_memory_above_idle_gib"] for r in runs], 3),
                "idle_memory_gib": stat([r["idle_memory_gib"] for r in runs], 3),
                "post_statuses": [r["post_statuses"] for r in runs],
                "not_ended": [r["not_ended"] for r in runs]}
        out["sides"][name] = done
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="actsweep bench --workload start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REF", help="also measure this git ref's code, alternating with this checkout's")
    parser.add_argument("--repeats", type=int, default=3, help="warm REST sweeps per service (default 3)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times every measurement runs for each side (default 1; the sides alternate ABBA)")
    parser.add_argument("--concurrent", type=int, default=16, help="sweeps POSTed at once (default 16)")
    parser.add_argument("--skip", default="", help=f"comma list of {', '.join(MEASUREMENTS)} to leave out")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds any one command or sweep may take")
    parser.add_argument("--out", default="docs/benchmarks/start.json", help="the JSON written ('' for none)")
    args = parser.parse_args(argv)
    args.skip = set(filter(None, args.skip.split(",")))
    if args.skip - set(MEASUREMENTS):
        parser.error(f"--skip: unknown {', '.join(sorted(args.skip - set(MEASUREMENTS)))}; choose from "
                     f"{', '.join(MEASUREMENTS)}")
    if min(args.repeats, args.rounds, args.concurrent) < 1:
        parser.error("--repeats, --rounds and --concurrent must be at least 1")
    out = Path(args.out).resolve() if args.out else None

    work = Path(tempfile.mkdtemp(prefix="actsweep-start-"))  # (outside any checkout: the sides' working folder)
    after = Side("after", REPO, git("rev-parse", "--short", "HEAD"))
    sides, worktree, bench = [after], None, None
    try:
        if args.before:
            commit = git("rev-parse", "--short", f"{args.before}^{{commit}}")
            worktree = work / "before"
            git("worktree", "add", "--detach", str(worktree), commit)
            sides = [Side("before", worktree, commit), after]
        started = dt.datetime.now(dt.timezone.utc)
        cores = os.cpu_count() or 1
        report = {
            "command": shlex.join(["actsweep", "bench", "--workload", "start", *(argv if argv is not None else sys.argv[1:])]),
            "hardware": f"{cores} cores of {cpu_model()}", "cpu_model": cpu_model(), "cores": cores,
            "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
            "date": started.date().isoformat(), "started_at": started.isoformat(timespec="seconds"),
            "commit": after.commit, "before": {"ref": args.before, "commit": sides[0].commit} if args.before else None,
            "sweep": {"experiment": EXPERIMENT, "quick": True, "overrides": ONE_TRIAL},
            "demo": {"experiment": EXPERIMENT, "quick": True},
            "repeats": args.repeats, "rounds": args.rounds, "concurrent": args.concurrent,
            "measured": [m for m in MEASUREMENTS if m not in args.skip],
            "sides": {s.name: {"commit": s.commit, "root": str(s.root)} for s in sides}}
        report["sides"]["after"]["uncommitted_changes"] = bool(git("status", "--porcelain", "--untracked-files=no"))
        print(f"start-up bench: {', '.join(s.name + ' ' + s.commit + ' (' + str(s.root) + ')' for s in sides)}; "
              f"{report['hardware']}; work in {work}", flush=True)
        for side in sides:  # every side's modules compiled, and the interpreter's imports read once, before any timing
            subprocess.run([sys.executable, "-m", "compileall", "-q", "service", "workers", "search_spaces"],
                           cwd=side.root, capture_output=True)
            subprocess.run([sys.executable, "-c", "import torch, ray.tune, mlflow, service.cli"], cwd=work,
                           env=side.env(work / "none"), capture_output=True)
        bench = Bench(args, sides, work, report, out)
        bench.run()
        summary = summarise(report)
    finally:
        for service in bench.services if bench else []:  # (what a failure or Ctrl-C left running)
            service.stop()
        for home in bench.homes if bench else []:
            end_processes(home_processes(home))
        if worktree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    if out:
        out.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"written to {out}")
    return summary


if __name__ == "__main__":
    main()
