"""All configuration, from ACTSWEEP_* environment variables (pydantic-settings).

The defaults need no server: a local Ray started on demand, an SQLite MLflow store and the
Ray results under one folder (ACTSWEEP_HOME, default ~/.actsweep).
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ACTSWEEP_", extra="ignore")

    home: Path = Path("~/.actsweep")
    tracking_uri: str | None = None  # default: sqlite:///HOME/mlflow.db
    database_url: str | None = None  # sweep records; default: sqlite:///HOME/sweeps.db
    ray_address: str | None = None  # None: start a local Ray; "auto" or ray://host:10001 to join one
    num_cpus: int | None = None  # CPUs of a local Ray (default: all)
    dashboard: bool = True  # start the Ray dashboard with a local Ray
    data_dir: Path | None = None  # default: HOME/data
    # Tune's storage (experiment state, per-epoch checkpoints); default HOME/ray_results. On a
    # cluster of several machines it must be shared by all nodes: a mounted folder, or s3://, gs://
    tune_storage: str | None = None
    download: bool = True  # let torchvision download data where the internet is reachable
    api_token: SecretStr | None = None  # when set, the REST API requires "Authorization: Bearer <token>"

    # REST service
    ray_dashboard_url: str = "http://127.0.0.1:8265"  # where sweeps are submitted as Ray jobs
    start_local_ray: bool = True  # `serve` starts a local Ray head there when none answers
    mlflow_ui_url: str | None = None  # for links; default: the tracking URI if it is http(s)
    max_trials_per_sweep: int = 2000  # larger grids are rejected with 422, not run
    health_cache_s: float = 2.0  # /healthz checks Ray, MLflow and the database at most this often
    driver_restarts: int = 2  # a sweep whose driver dies is continued by a new one (Tuner.restore) this often

    @cached_property
    def root(self) -> Path:
        root = self.home.expanduser().resolve()
        root.mkdir(parents=True, exist_ok=True)
        return root

    @property
    def resolved_tracking_uri(self) -> str:
        return self.tracking_uri or f"sqlite:///{self.root / 'mlflow.db'}"

    @property
    def artifact_root(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.root / 'sweeps.db'}"

    @property
    def resolved_data_dir(self) -> Path:
        return (self.data_dir or self.root / "data").expanduser()

    @property
    def resolved_mlflow_ui_url(self) -> str:
        if self.mlflow_ui_url:
            return self.mlflow_ui_url.rstrip("/")
        uri = self.resolved_tracking_uri
        return uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"

    @property
    def ray_results(self) -> str:
        return (self.tune_storage or str(self.root / "ray_results")).rstrip("/")


def get_settings() -> Settings:
    """Settings read from the environment now."""
    return Settings()
