"""pytest-timeout's alarm held while pytest makes or sends a test's report (a plugin the suite's
conftest registers).

pytest-timeout (the signal method) raises its timeout wherever the test process is when the alarm
goes off. Inside a test's setup, call or teardown that fails the test, as it should. Between them,
while pytest makes a phase's report or sends it to xdist's controller, it is an internal error: the
test process ends with its test unfinished, and xdist ends the whole of `make test` with
``assert not crashitem``: one slow test near its bound on a busy machine loses the run. So the
alarm is held while a report is made or sent; one that went off then fails the test's next phase
instead: its call, or its teardown once the fixtures are torn down. After the last report there is
nothing left of the test to fail, and pytest-timeout cancels the alarm.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager

import pytest

_due: set[str] = set()  # the tests whose alarm went off while a report of theirs was made or sent


@contextmanager
def _alarm_held(nodeid: str):
    # (Its handler swapped, not the signal blocked: the kernel may hand the signal to another of the
    # process's threads, xdist's among them, and Python runs the handler in this one all the same.)
    held = signal.signal(signal.SIGALRM, lambda signum, frame: _due.add(nodeid))
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, held)


def _fail_if_due(item) -> None:
    if item.nodeid in _due:
        _due.discard(item.nodeid)
        marker = item.get_closest_marker("timeout")
        bound = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout"))
        pytest.fail(f"Timeout (>{bound:g}s) from pytest-timeout: its alarm went off while pytest wrote this "
                    "test's last report (tests/report_alarm.py)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    with _alarm_held(item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_logreport(report):
    with _alarm_held(report.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    _fail_if_due(item)  # (the call not made: the test is past its bound)
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)  # (the fixtures torn down first, whatever happens)
    finally:
        _fail_if_due(item)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    try:
        return (yield)
    finally:
        _due.discard(item.nodeid)  # (an alarm in the last report: nothing of the test is left to fail)
