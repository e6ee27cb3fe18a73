"""Settings are the only configuration: a child process (a sweep's driver) gets them passed
explicitly and reads back the same, secrets excepted; the stores' URLs may come from files."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings


def _from(environment: dict[str, str], monkeypatch) -> Settings:
    for key in [k for k in os.environ if k.startswith("ACTSWEEP_")]:
        monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    return Settings()


def test_a_child_reads_back_the_same_settings_and_no_secret(tmp_path, monkeypatch):
    given = Settings(home=tmp_path / "home", num_cpus=3, dashboard=False, data_roots=[tmp_path / "a", tmp_path / "b"],
                     outage_patience_s=42.5, mlflow_http_retries=4, api_token="hunter2",
                     tracking_uri="postgresql://actsweep:hunter2@db/mlflow")
    environment = given.environment()
    assert not any("hunter2" in value for value in environment.values())
    assert "ACTSWEEP_TRACKING_URI" not in environment and "ACTSWEEP_API_TOKEN" not in environment
    child = _from(environment, monkeypatch)
    secret = {"api_token", "tracking_uri"}
    assert child.model_dump(exclude=secret) == given.model_dump(exclude=secret)
    assert child.api_token is None and child.tracking_uri is None


def test_a_url_read_from_its_file_wins_and_a_missing_file_is_named(tmp_path, monkeypatch):
    secret = tmp_path / "tracking_uri"
    secret.write_text("postgresql://actsweep:pw@db/mlflow\n")
    read = _from({"ACTSWEEP_HOME": str(tmp_path), "ACTSWEEP_TRACKING_URI": "sqlite:///other.db",
                  "ACTSWEEP_TRACKING_URI_FILE": str(secret)}, monkeypatch)
    assert read.resolved_tracking_uri == "postgresql://actsweep:pw@db/mlflow"
    with pytest.raises(ValidationError, match="database_url_file: no file at"):
        _from({"ACTSWEEP_HOME": str(tmp_path), "ACTSWEEP_DATABASE_URL_FILE": str(Path(tmp_path) / "none")},
              monkeypatch)
