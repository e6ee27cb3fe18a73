import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def actsweep_env(tmp_path, monkeypatch) -> dict[str, str]:
    """Environment for an isolated actsweep: its own home (MLflow store, Ray results), a local
    2-CPU Ray without the dashboard. Applied to this process and returned for subprocesses."""
    values = {"ACTSWEEP_HOME": str(tmp_path / "home"), "ACTSWEEP_NUM_CPUS": "2",
              "ACTSWEEP_DASHBOARD": "false", "ACTSWEEP_DOWNLOAD": "false"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **values}


def actsweep_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli", *args]
