"""What importing the service package sets for every process that runs it (service/__init__.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

PROBE = ("import os, service, mlflow; from mlflow.telemetry import get_telemetry_client; "
         "print('_MLFLOW_TELEMETRY_SESSION_ID' in os.environ, get_telemetry_client() is None)")


def _probe(**env: str) -> str:
    # (as a user's shell: MLflow also turns telemetry off under pytest or CI, by their variables)
    clean = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_DISABLE_TELEMETRY", "PYTEST_CURRENT_TEST", "CI")}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env={**clean, **env}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_mlflows_telemetry_is_off_so_no_thread_of_its_edits_the_environment():
    # (on, it sets a variable at import and deletes it from a thread later: a KeyError in any thread
    # that reads os.environ then, such as requests' on every call to an MLflow server)
    assert _probe() == "False True"
    assert _probe(MLFLOW_DISABLE_TELEMETRY="false") == "True False"  # (the user's setting wins)
