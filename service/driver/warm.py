"""A warm home's sweep drivers: a fork server that holds the driver's imports, and the Ray job's
entrypoint that asks it for a driver.

A sweep's driver is a Ray job, ``python -m service.driver SWEEP_ID``. Started cold, that process
spends seconds importing Ray Tune, MLflow and SQLAlchemy before it reads its record. Where the
home's head runs on this machine, the API starts one driver server beside it
(``python -m service.driver.warm serve SOCKET``): it imports the driver once, then forks a ready
driver for each job that asks. The job's own process stays what Ray starts, stops and shows on its
dashboard; it hands the forked driver its environment (Ray's job variables among them), its working
folder and its stdout and stderr (the job's log), forwards the signals Ray sends it, and exits with
the driver's exit code. A driver whose job process is killed dies with it, so a dead driver is
still seen and replaced (service.control.reconciler) as before.

The server also keeps warm trial workers waiting on the head: Ray worker processes started for no
job yet, in the runtime environment Ray Tune gives its trials, that import torch and the trainable
as they start (workers.prestart): one per CPU up to four (the raylet starts no more ahead of a job).
The driver's footprint task runs in the same runtime environment and takes one.
A sweep's trial then starts in a fraction of a second; the server asks for more as each driver ends.

Where no server answers (a cluster's head on another machine, a server released after
ACTSWEEP_WARM_IDLE_S, or one that died), the entrypoint runs the driver in its own process, as it
always did. The server holds one process's memory (the driver's imports, about 0.3 GB), each warm
worker about 0.6 GB; the server exits after that idle time with no driver running, and Ray ends the
warm workers after it too. The next submission starts the server again.

This module imports only the standard library at the top: the entrypoint runs it before anything.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import threading
import time

from service.driver.trial_env import tune_runtime_env

SERVER_VARIABLE = "ACTSWEEP_DRIVER_SERVER"  # the server's socket, in a job's environment
CONNECT_TIMEOUT_S = 2.0  # a server that does not take the connection this soon is not used: the driver starts cold
SERVER_START_S = 30.0  # nor one that has not forked a driver this long after (its own imports take seconds)


# -- the Ray job's side ------------------------------------------------------------------------------


def run_warm(argv: list[str]) -> int | None:
    """Ask the home's driver server for a driver running ``argv`` (``[SWEEP_ID]``) and wait for it: its
    exit code. None where no server answers (the caller runs the driver itself)."""
    path = os.environ.get(SERVER_VARIABLE)
    if not path:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.connect(path)
        request = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(conn, [struct.pack("!I", len(request)) + request], [0, 1, 2])
        conn.settimeout(SERVER_START_S)  # (a server just started may still be importing)
        lines = _lines(conn)
        first = next(lines, "")
    except OSError:
        conn.close()
        return None  # (a server that took the request and then failed: its child sees this end close, and stops)
    if not first.startswith("pid "):
        conn.close()
        return None
    conn.settimeout(None)
    child = int(first.split()[1])
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # Ray stops a job with SIGTERM
        signal.signal(signum, lambda s, _frame: _send(child, s))
    for line in lines:
        if line.startswith("exit "):
            return int(line.split()[1])
    print(f"actsweep: the sweep's driver (process {child}, forked by the driver server at {path}) ended "
          f"without an exit status", file=sys.stderr)
    return 1


def _lines(conn: socket.socket):
    buffered = b""
    while True:
        try:
            chunk = conn.recv(4096)
        except InterruptedError:  # (a signal forwarded: read on)
            continue
        if not chunk:
            return
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            yield line.decode()


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


# -- the server's side ---------------------------------------------------------------------------------


def serve(path: str, idle_s: float, trial_workers: int = 0, raylet: str = "") -> int:
    """Import the driver, then fork a driver for each request on the Unix socket ``path``; exit
    after ``idle_s`` seconds with no request and no driver alive. With ``trial_workers``, keep that
    many warm trial workers waiting on the head's raylet (``raylet``: its node manager's address),
    asked for as the server starts and again as each driver ends."""
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # (bound first: a job that asks while the imports run waits for them)
    os.chmod(path, 0o600)  # (the owner's drivers only)
    listener.listen(64)
    from service.driver.drive import drive  # the imports every driver needs, done once

    assert threading.active_count() == 1, "a process that forks must not run threads"
    listener.settimeout(1.0)
    children: set[int] = set()
    helpers: set[int] = set()  # (the forked processes that ask for warm trial workers)
    warm = lambda: helpers.add(_fork(_top_up, trial_workers, raylet, os.path.dirname(path), idle_s))  # noqa: E731
    if trial_workers:
        warm()
    last_busy = time.monotonic()
    while True:
        _reap(helpers)
        if _reap(children) and trial_workers:
            warm()
        if children:
            last_busy = time.monotonic()
        elif time.monotonic() - last_busy > idle_s:
            listener.close()
            os.unlink(path)
            return 0
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        last_busy = time.monotonic()
        try:
            conn.settimeout(10.0)
            request, fds = _receive(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            _run_driver(drive, conn, request, fds)  # (never returns)
        children.add(pid)
        print(f"forked driver {pid} for {' '.join(request['argv'])}", flush=True)
        conn.close()
        for fd in fds:
            os.close(fd)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if len(data) < 4:
        raise ValueError("a request too short")
    size = struct.unpack("!I", data[:4])[0]
    body = data[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("a request cut short")
        body += chunk
    if len(fds) != 3:
        raise ValueError("a request without stdin, stdout and stderr")
    return json.loads(body), fds


def _reap(children: set[int]) -> int:
    """Forget the children that have ended; how many had."""
    ended = 0
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.discard(pid)
            ended += 1
    return ended


def _fork(function, *args) -> int:
    """``function(*args)`` in a forked child (the server itself starts no threads: it forks)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            function(*args)
        except BaseException as exc:
            print(f"warm trial workers not asked for: {type(exc).__name__}: {exc}", flush=True)
            code = 1
        os._exit(code)
    return pid


# -- warm trial workers ----------------------------------------------------------------------------
# Ray gives an actor a waiting worker process where their runtime environments are the same, and a
# worker started for no job can go to any job. The head's workers import a trial's modules as they
# start where they belong to no job yet (workers.prestart). So a job without a runtime environment
# of its own (service.control.jobs) has its trials start in a worker that has torch imported.


def _top_up(wanted: int, raylet: str, temp_dir: str, keep_alive_s: float) -> None:
    """Ask the head's raylet for warm trial workers (Tune's runtime environment) until ``wanted``
    wait or start; they are kept for ``keep_alive_s``, then ended as any idle worker is."""
    from ray._private.grpc_utils import init_grpc_channel
    from ray._private.utils import get_runtime_env_info, parse_runtime_env_for_task_or_actor
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    stub = node_manager_pb2_grpc.NodeManagerServiceStub(init_grpc_channel(raylet))
    missing = wanted - len(warm_workers(temp_dir))
    if missing <= 0:
        return
    request = node_manager_pb2.PrestartWorkersRequest(language=common_pb2.PYTHON, num_workers=missing,
                                                      keep_alive_duration_secs=int(keep_alive_s))
    request.runtime_env_info.CopyFrom(get_runtime_env_info(parse_runtime_env_for_task_or_actor(tune_runtime_env())))
    stub.PrestartWorkers(request, timeout=10)
    print(f"asked for {missing} warm trial worker(s)", flush=True)


def warm_workers(temp_dir: str) -> list[int]:
    """The processes of the head in ``temp_dir`` started for no job, in Tune's runtime environment,
    that wait or still start (a worker given work takes its name)."""
    import psutil

    raylets = [p.pid for p in psutil.process_iter(["name", "cmdline"])
               if p.info["name"] == "raylet" and f"--temp_dir={temp_dir}" in (p.info["cmdline"] or ())]
    found = []
    tune_variables = tune_runtime_env()["env_vars"]
    for raylet in raylets:
        try:
            children = psutil.Process(raylet).children(recursive=True)  # (a runtime environment's worker is its setup's child)
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                name = child.name()
                environ = child.environ()
                if (name == "ray::IDLE" or not name.startswith("ray::")) and environ.get("RAY_JOB_ID") == "ffffffff":
                    if all(environ.get(k) == v for k, v in tune_variables.items()):
                        found.append(child.pid)
            except psutil.Error:
                continue
    return found


def _run_driver(drive, conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: become the job's driver (its streams, environment, folder), run it, and
    send its exit code back."""
    code = 1
    try:
        os.setsid()  # (its own process group: signals meant for the server do not reach it)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = ["service.driver", *request["argv"]]
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        conn.settimeout(None)
        conn.sendall(f"pid {os.getpid()}\n".encode())
        threading.Thread(target=_stop_when_orphaned, args=(conn,), daemon=True).start()
        code = drive(request["argv"][0])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()  # (Ray's and MLflow's: a driver that ends as a process would)
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(f"exit {code}\n".encode())
        finally:
            os._exit(code)


def _stop_when_orphaned(conn: socket.socket) -> None:
    """The job's process closed its end without the driver's exit: it was killed (SIGKILL: Ray's
    stop after its grace, a test, the machine), so the driver dies as it would have in that process.
    A graceful stop reaches the driver as the SIGTERM its job's process forwards."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    if len(sys.argv) not in (4, 6) or sys.argv[1] != "serve":
        print("usage: python -m service.driver.warm serve SOCKET IDLE_S [TRIAL_WORKERS RAYLET_ADDRESS]", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(sys.argv[2], float(sys.argv[3]), *([int(sys.argv[4]), sys.argv[5]] if len(sys.argv) == 6 else [])))
