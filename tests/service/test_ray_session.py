"""service.ray_session: a Ray started in a background thread stays up, is started again after a
shutdown, SIGTERM still exits through SystemExit, and a dead address fails naming it.
Each case in its own Python process: they start (or fail to join) a Ray of their own."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from service.ports import free_port

START = """
    import os, sys, time
    import ray
    from service.ray_session import connect_ray, start_ray
    from service.settings import Settings
    settings = Settings(home=sys.argv[1], num_cpus=1, dashboard=False)
"""


def _python(code: str, *args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(START) + textwrap.dedent(code), *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.slow  # starts a Ray twice (16 s): make test only
def test_a_ray_started_in_the_background_outlives_its_start_and_exits_on_sigterm(tmp_path):
    # Ray's processes die with the thread that started them (PR_SET_PDEATHSIG): a starting thread
    # that ended once ray.init returned took the GCS with it a few seconds later
    done = _python("""
        first = start_ray(settings)
        assert first is start_ray(settings)  # one Ray per process
        connect_ray(settings)
        print("auth mode", os.environ.get("RAY_AUTH_MODE"))  # (what the new Ray and its processes run with)
        time.sleep(3)

        @ray.remote(num_cpus=1)
        def answer():
            return 42

        print("answered", ray.get(answer.remote(), timeout=120))
        ray.shutdown()  # (then started again: the connection of a Ray shut down is not reused)
        connect_ray(settings)
        print("again", ray.get(answer.remote(), timeout=120))
        # SIGTERM exits through SystemExit, as ray.init sets it up from the main thread only (a sweep
        # stopped by SIGTERM ends its runs KILLED: service.driver.sweeps relies on it)
        import signal
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        except SystemExit as exc:
            print("exited", exc.code)
    """, str(tmp_path), env={k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"})  # (as a user's shell)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "answered 42" in done.stdout
    assert "again 42" in done.stdout
    assert "exited 15" in done.stdout
    assert "SIGTERM handler is not set" not in done.stderr
    # the Ray is started with token authentication, without Ray's advice to opt out of it on stderr
    assert "auth mode token" in done.stdout and "Token authentication is enabled" not in done.stderr, done.stderr[-3000:]


def test_a_dead_address_fails_through_the_future_naming_it(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    done = _python(f"""
        from service.ray_address import RayUnreachable
        settings = Settings(home=sys.argv[1], ray_address="{address}")
        try:
            connect_ray(settings)
        except RayUnreachable as exc:
            print("refused", exc)
    """, str(tmp_path), timeout=60)
    assert "refused" in done.stdout and address in done.stdout, done.stderr[-3000:]


@pytest.mark.slow  # starts a Ray (8 s): make test only
def test_preloading_workers_find_torch_and_the_trainable_imported_before_any_task_asks(tmp_path):
    done = _python("""
        settings = Settings(home=sys.argv[1], num_cpus=1, dashboard=False, preload_workers=True)
        connect_ray(settings)

        @ray.remote(num_cpus=1)
        def imported():  # (defined here: pickled by value, so running it imports nothing of ours)
            import sys
            return sorted(m for m in ("torch", "workers.trainable", "mlflow") if m in sys.modules)

        print("imported", ray.get(imported.remote(), timeout=120))
    """, str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    # (Ray itself imports neither torch nor our trainable into a worker: with preload_workers off the
    # list is empty; MLflow, which the preload does not name, stays out)
    assert "imported ['torch', 'workers.trainable']" in done.stdout, done.stdout + done.stderr[-3000:]


@pytest.mark.slow  # starts a Ray twice (16 s): make test only
def test_what_ray_shutdown_leaves_of_a_local_ray_is_killed_and_anothers_ray_is_not_ours(tmp_path):
    done = _python("""
        import psutil
        from service.ray_session import kill_survivors, local_ray_processes

        settings = Settings(home=sys.argv[1], num_cpus=1, dashboard=True)  # (its head processes outlive ray.shutdown)
        connect_ray(settings)
        time.sleep(2)  # (the dashboard's heads start after ray.init returns)
        ours = local_ray_processes()
        print("found", {"raylet", "gcs_server"} <= {p.name() for p in ours})
        ray.shutdown()
        kill_survivors(ours)
        def left():  # (a process killed a moment ago may still be on its way out)
            return [p.name() for p in ours if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        deadline = time.monotonic() + 5
        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        print("left", left())
        # a Ray found running (someone else's ray.init) is not this module's to kill
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
        connect_ray(settings)
        print("theirs", local_ray_processes())
    """, str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "found True" in done.stdout and "left []" in done.stdout and "theirs []" in done.stdout, done.stdout


@pytest.mark.slow  # starts a Ray (5 s): make test only
def test_the_gcs_and_raylet_are_alive_when_ray_shutdown_comes_to_stop_them(tmp_path):
    """The thread that started Ray stays until ray.shutdown has stopped Ray's processes: ended
    earlier, it took the GCS and raylet with it (they die with their thread) while the shutdown
    still said goodbye to them, which then waited 10-39 s for an answer, in half the runs."""
    done = _python("""
        import psutil
        from ray._private import node as ray_node, worker as ray_worker
        from service.ray_session import local_ray_processes

        connect_ray(settings)
        ours = [p for p in local_ray_processes() if p.name() in ("raylet", "gcs_server")]
        disconnect, kill_all = ray_worker.disconnect, ray_node.Node.kill_all_processes
        def slow_disconnect(*args, **kwargs):  # injected delay: a shutdown slower than the thread's poll
            disconnect(*args, **kwargs)
            time.sleep(2.5)
        def checked_kill_all(self, *args, **kwargs):
            print("alive", sorted(p.name() for p in ours if p.is_running() and p.status() != psutil.STATUS_ZOMBIE))
            return kill_all(self, *args, **kwargs)
        ray_worker.disconnect, ray_node.Node.kill_all_processes = slow_disconnect, checked_kill_all
        ray.shutdown()
    """, str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "alive ['gcs_server', 'raylet']" in done.stdout, done.stdout
