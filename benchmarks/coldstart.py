"""The API's cold start: ``python benchmarks/coldstart.py [CHECKOUT] [N]``.

In a checkout of actsweep (this one by default; an older one to compare), N times (5): importing
``service.api.main`` and building the app in a new process (its time and peak memory), and
``actsweep serve`` from spawn to its first ``/healthz`` answer, against one Ray head started for
the run. Prints the medians as JSON.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from service.local_servers import answers
from service.patience import poll
from service.ports import free_port

IMPORT = ("import resource, service.api.main as main; main.create_app(); "
          "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")


def measure(checkout: Path, n: int) -> dict:
    gcs, dashboard = free_port(), free_port()
    environment = {**os.environ, "RAY_AUTH_MODE": "token"}
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--port", str(gcs),
                             "--num-cpus", "1", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
                             "--include-dashboard", "true", "--block"], env=environment,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    imports, serves, peaks = [], [], []
    try:
        poll(lambda: answers(f"http://127.0.0.1:{dashboard}/api/version", status=None), 120)
        for _ in range(n):
            env = {**environment, "ACTSWEEP_HOME": tempfile.mkdtemp(), "PYTHONPATH": str(checkout),
                   "ACTSWEEP_START_LOCAL_RAY": "false", "ACTSWEEP_RAY_ADDRESS": f"127.0.0.1:{gcs}",
                   "ACTSWEEP_RAY_DASHBOARD_URL": f"http://127.0.0.1:{dashboard}"}
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", IMPORT], cwd=checkout, env=env, capture_output=True,
                                  text=True, check=True)
            imports.append(time.perf_counter() - start)
            peaks.append(int(done.stdout.split()[-1]) / 1024)  # (ru_maxrss: KiB)
            port = free_port()
            start = time.perf_counter()
            serve = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port)], cwd=checkout,
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            healthz = f"http://127.0.0.1:{port}/healthz"
            answered = poll(lambda: serve.poll() is not None or answers(healthz, status=None), 120, 0.05)
            serves.append(time.perf_counter() - start)
            if not answered or serve.poll() is not None:
                raise SystemExit(f"actsweep serve in {checkout} did not answer")
            serve.terminate()
            serve.wait(30)
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(60)
    return {"checkout": str(checkout), "n": n, "import_s": round(statistics.median(imports), 2),
            "serve_to_healthz_s": round(statistics.median(serves), 2),
            "import_peak_mib": round(statistics.median(peaks))}


if __name__ == "__main__":
    arguments = sys.argv[1:]
    print(json.dumps(measure(Path(arguments[0] if arguments else ".").resolve(),
                             int(arguments[1]) if len(arguments) > 1 else 5)))
