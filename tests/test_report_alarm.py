"""pytest-timeout's alarm while pytest writes a report (tests/report_alarm.py): a test past its bound
fails, and make test goes on. Each case is a small pytest session of its own, under xdist as make
test runs it, whose report hook takes longer than its test's bound."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

SLOW_REPORT = """
    import time

    def pytest_runtest_logreport(report):  # (a busy machine: writing this report outlasts the bound)
        if report.when == WHEN and report.nodeid.endswith("test_near_its_bound"):
            time.sleep(2)
"""
TESTS = {
    "test_a.py": """
        import time
        import pytest

        @pytest.mark.timeout(1)
        def test_near_its_bound():
            time.sleep(0.3)

        def test_after_it():
            pass
    """,
    "test_b.py": """
        import time

        def test_elsewhere():
            time.sleep(2)
    """,
}


def _session(tmp_path, when: str, *plugin: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(f"WHEN = {when!r}\n" + textwrap.dedent(SLOW_REPORT))
    for name, text in TESTS.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider",
                           "-p", "timeout", *plugin, "-o", "timeout=60", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("when, outcome", [("setup", "1 failed, 2 passed"),  # its call not made
                                           ("call", "3 passed, 1 error")])  # its teardown fails, once done
def test_an_alarm_while_a_report_is_written_fails_the_test_and_the_run_goes_on(tmp_path, when, outcome):
    done = _session(tmp_path, when, "-p", "tests.report_alarm")
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "INTERNALERROR" not in output, output[-3000:]
    assert "its alarm went off while pytest wrote this test's last report" in output
    assert outcome in output, output[-1500:]
    assert "test_a.py::test_near_its_bound - Failed: Timeout (>1s)" in output  # (the short summary names it)


def test_without_it_the_alarm_ends_the_test_process_and_the_whole_run(tmp_path):
    done = _session(tmp_path, "call")  # (what a CI run of make test died of)
    output = done.stdout + done.stderr
    assert done.returncode == 3 and "assert not crashitem" in output, output[-3000:]
