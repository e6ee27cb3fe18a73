"""The Ray this process drives: joined (ACTSWEEP_RAY_ADDRESS) or started here, once.

Starting a local Ray takes about 6 s on 2 cores, most of it waiting on its processes, and a run
has seconds of other work before it needs Ray: importing torch, Tune and MLflow, reading the
dataset, making the MLflow store. :func:`start_ray` begins the connection in a background thread
and returns at once; :func:`connect_ray` waits for it. The CLI starts it as soon as the spec is
valid, so the two overlap (docs/plan.md, "Where time goes").

Its workers are not told to import torch as they start (``preload_python_modules``) unless
``ACTSWEEP_PRELOAD_WORKERS`` asks: on 2 cores the imports then compete with the driver's own, and
the first trial started later, not sooner (docs/plan.md).
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future

from service.ray_address import wait_for_ray
from service.settings import Settings

# What a local Ray's workers import as they start, with ACTSWEEP_PRELOAD_WORKERS: what every trial imports first.
PRELOADED = ("torch", "workers.trainable")

_lock = threading.Lock()
_connection: Future | None = None
_our_node = None  # the Ray node _connect started (ray's global node), to tell it from someone else's


def start_ray(settings: Settings) -> Future:
    """Begin joining the Ray at ACTSWEEP_RAY_ADDRESS (or RAY_ADDRESS, set inside a Ray job), or
    starting a local one, in a background thread; returns at once with the Future of the dashboard
    URL (None without a dashboard). A second call returns the same Future while that Ray is up."""
    global _connection
    import ray

    with _lock:
        stale = _connection is not None and _connection.done() and not ray.is_initialized()
        if _connection is None or stale:  # (stale: a Ray shut down since, by a test or a benchmark)
            _connection = Future()
            if ray.is_initialized():  # (someone else's ray.init: used as it is; its dashboard unknown here)
                _connection.set_result(None)
            else:
                _exit_on_sigterm()
                threading.Thread(target=_connect, args=(settings, _connection), name="actsweep-ray-start",
                                 daemon=True).start()
        return _connection


def connect_ray(settings: Settings) -> str | None:
    """Join the Ray at ACTSWEEP_RAY_ADDRESS, or start a local one (waiting for a start already
    under way); returns the dashboard URL. Raises what joining or starting raised."""
    url = start_ray(settings).result()
    _exit_on_sigterm()  # (again: a Ray started anew in this process may have set it back at the C level)
    return url


def local_ray_processes() -> list:
    """The processes of the local Ray that :func:`start_ray` started in this process (the GCS, the
    raylet, the dashboard...) and every process they started, as ``psutil.Process``es; [] where it
    joined a cluster, started none, or found someone else's running."""
    import psutil
    import ray

    node = ray._private.worker._global_node
    if node is None or node is not _our_node or not node.head:
        return []
    processes = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if _is_ray_process(child):
                processes += [child, *child.children(recursive=True)]
    return processes


def kill_survivors(processes: list) -> None:
    """SIGKILL those of ``processes`` (:func:`local_ray_processes`, taken before ``ray.shutdown``)
    still running after it, without waiting for them to be reaped.

    ``ray.shutdown`` stops the Ray processes this one started, but not all of theirs: the
    dashboard's head processes (DataHead, JobHead, ...) outlived it in every run of ``make demo``
    here, and without the dashboard its two agents in 2 of 4 runs (they try to tell the GCS, dead
    too, and linger for a minute). Ray's own ``ray stop --force`` kills what is left, and so
    does this, at once (they answer SIGTERM in about 2 s)."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                process.kill()


def _is_ray_process(process) -> bool:
    import psutil

    try:
        name, command = process.name(), process.cmdline()
    except psutil.Error:
        return False
    return name.startswith("ray::") or name in ("raylet", "gcs_server") or any(f"{os.sep}ray{os.sep}" in a for a in command)


def _connect(settings: Settings, connection: Future) -> None:
    import ray

    try:
        address = settings.ray_address or os.environ.get("RAY_ADDRESS")
        if address:
            wait_for_ray(address, settings.ray_join_timeout_s)  # (ray.init would retry for ever, printing warnings)
            context = ray.init(address=address, log_to_driver=False)
        else:  # "local": a new Ray, even where another one runs on this machine
            preload = {"_system_config": {"preload_python_modules": list(PRELOADED)}} if settings.preload_workers else {}
            logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(_AUTH_ON_BY_DEFAULT)
            context = ray.init(address="local", num_cpus=settings.num_cpus, include_dashboard=settings.dashboard,
                               log_to_driver=False, **preload)
    except BaseException as exc:  # (handed to the thread that waits: it raises it)
        connection.set_exception(exc)
        return
    global _our_node
    _our_node = node = ray._private.worker._global_node
    connection.set_result(_dashboard_url(context))
    # This thread stays: Ray's processes die with the thread that started them (PR_SET_PDEATHSIG
    # belongs to a thread, not a process), so it waits until the process exits, or until
    # ray.shutdown has stopped them: it drops the node last. Ending when ray.is_initialized() turns
    # False, early in ray.shutdown, killed the GCS and raylet under the shutdown's own goodbye to
    # them, which then waited 10 s and more for an answer (tests/service/test_ray_session.py).
    while ray._private.worker._global_node is node:
        time.sleep(1.0)


def _exit_on_sigterm() -> None:
    """What ray.init does in the main thread, which it cannot do from ours: SIGTERM exits through
    SystemExit, so a sweep stopped by it ends its runs KILLED (service.driver.sweeps)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
            signal.SIG_DFL, _exit):
        signal.signal(signal.SIGTERM, _exit)
    logging.getLogger("ray._private.worker").addFilter(_NOT_FROM_MAIN_THREAD)  # (one instance: added once)


def _exit(signum, frame) -> None:
    sys.exit(signum)


class _NotFromMainThread(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:  # (that warning: handled above)
        return "SIGTERM handler is not set" not in record.getMessage()


_NOT_FROM_MAIN_THREAD = _NotFromMainThread()


class _AuthOnByDefault(logging.Filter):
    """A new local Ray turns token authentication on, as actsweep wants it, and says so with advice
    to opt out (``RAY_AUTH_MODE=disabled``): the first line of every run, addressed to Ray's users.
    Its warning that a cluster runs *without* a token still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


_AUTH_ON_BY_DEFAULT = _AuthOnByDefault()


def _dashboard_url(context) -> str | None:
    url = getattr(context, "dashboard_url", None)
    return f"http://{url}" if url else None
