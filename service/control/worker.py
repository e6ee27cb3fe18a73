"""A worker process for the control plane's work that needs torch or matplotlib.

The API process stays light (no torch, Ray Tune or matplotlib: it starts in a second and holds
little memory). What needs the training stack, probing a submitted spec's activations and
estimating its footprint on the meta device, or drawing a running sweep's figures, runs in one
child process, started on first use and kept for the next (spawned, not forked: the API has
threads). Calls go one at a time, which also keeps concurrent requests out of each other's
autograd. Functions are named by module and name, so this process never imports them.
"""
from __future__ import annotations

import importlib
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any


class WorkerDied(RuntimeError):
    """The worker process ended during a call (killed, out of memory); the next call starts another."""


def _call(module: str, function: str, args: tuple) -> Any:
    return getattr(importlib.import_module(module), function)(*args)


class Worker:
    """One child process that runs ``module.function(*args)`` calls in turn."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def call(self, module: str, function: str, *args: Any, timeout_s: float = 300.0) -> Any:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            pool = self._pool
        try:
            return pool.submit(_call, module, function, args).result(timeout_s)
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise WorkerDied(f"the worker process ended during {module}.{function}") from exc

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


WORKER = Worker()  # the process's one worker (the API's requests share it)
