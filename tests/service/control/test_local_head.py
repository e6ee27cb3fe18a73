"""A home's own head (service/control/local_head.py): a start that Ray gave up on while its raylet
registered, as on a machine whose process starts run slow, is made again, and any failed start is
cleared away. The fault is injected by a stand-in for the `ray` command that fails as Ray does,
then hands over to it."""
from __future__ import annotations

import sys
import textwrap

import psutil
import pytest

from service.control.jobs import ensure_ray_token, ray_cli
from service.control.local_head import HEAD_START_TRIES, _temp_dir, start_head, stop_head, wait_for_dashboard
from service.local_servers import answers
from service.settings import Settings
from tests.machine_speed import scaled

RAY_GAVE_UP = ("Exception: The current node timed out during startup. This could happen because some of the "
               "raylet failed to startup or the GCS has become overloaded.")


def _ray_that_fails(tmp_path, times: int, message: str = RAY_GAVE_UP) -> str:
    """A `ray` that fails its first ``times`` calls with ``message``, leaving behind a process that
    names the head's temp folder (as Ray's GCS would), then runs the real one."""
    script = tmp_path / "ray"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
        import os, subprocess, sys
        from pathlib import Path
        calls = Path({str(tmp_path / 'calls')!r})
        done = int(calls.read_text()) if calls.exists() else 0
        calls.write_text(str(done + 1))
        if done < {times}:
            temp_dir = sys.argv[sys.argv.index("--temp-dir") + 1]
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "--temp-dir", temp_dir],
                             start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # (a daemon: its output to its logs)
            print({message!r}, file=sys.stderr)
            sys.exit(1)
        os.execv({ray_cli()!r}, [{ray_cli()!r}, *sys.argv[1:]])
    """))
    script.chmod(0o755)
    return str(script)


def _strays(temp_dir: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "time.sleep(300)" in " ".join(cmdline) and temp_dir in cmdline:
            found.append(process)
    return found


@pytest.mark.slow  # a real head started
def test_a_head_ray_gave_up_on_is_cleared_away_and_started_again(tmp_path):
    ensure_ray_token()
    settings = Settings(home=tmp_path / "home")
    head = start_head(settings, None, _ray_that_fails(tmp_path, times=1))
    try:
        assert (tmp_path / "calls").read_text() == "2"
        assert _strays(head.temp_dir) == []  # what the first try had started is gone
        assert wait_for_dashboard(head.dashboard_url, answers, timeout_s=scaled(60))  # the second one answers
    finally:
        stop_head(head, settings)
    assert head.processes() == []


@pytest.mark.parametrize("times, message, calls", [(HEAD_START_TRIES, RAY_GAVE_UP, HEAD_START_TRIES),
                                                   (1, "ValueError: --port 1 is not free", 1)])
def test_a_lasting_timeout_and_any_other_failure_are_raised(tmp_path, times, message, calls):
    settings = Settings(home=tmp_path / "home")
    with pytest.raises(RuntimeError, match="ray start --head` failed") as raised:
        start_head(settings, None, _ray_that_fails(tmp_path, times=times, message=message))
    assert message.splitlines()[-1] in str(raised.value)
    assert (tmp_path / "calls").read_text() == str(calls)  # tried HEAD_START_TRIES times, or once
    assert _strays(_temp_dir(settings)) == []  # nothing of a failed start left running
