"""The control plane's worker process: calls run in one child process, in turn; a child that dies
mid-call fails that call clearly, and the next call starts a new one."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from service.control.worker import Worker, WorkerDied


@pytest.fixture
def worker():
    worker = Worker()
    yield worker
    worker.close()


def test_calls_run_in_one_child_process_kept_between_calls(worker):
    first = worker.call("os", "getpid")
    assert first != os.getpid()
    assert worker.call("os", "getpid") == first
    assert worker.call("math", "hypot", 3.0, 4.0) == 5.0


def test_a_child_killed_mid_call_fails_that_call_and_the_next_starts_another(worker):
    child = worker.call("os", "getpid")
    threading.Timer(0.5, os.kill, (child, signal.SIGKILL)).start()  # the fault, injected: the child killed
    with pytest.raises(WorkerDied, match="time.sleep"):
        worker.call("time", "sleep", 30)
    assert worker.call("os", "getpid") not in (child, os.getpid())


def test_an_error_in_the_called_function_is_raised_here_and_the_child_lives_on(worker):
    child = worker.call("os", "getpid")
    with pytest.raises(FileNotFoundError):
        worker.call("os", "stat", "/no/such/file")
    assert worker.call("os", "getpid") == child
