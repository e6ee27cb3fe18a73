"""All configuration, from ACTSWEEP_* environment variables (pydantic-settings).

The defaults need no server: a local Ray started on demand, an SQLite MLflow store and the
Ray results under one folder (ACTSWEEP_HOME, default ~/.actsweep).
"""
from __future__ import annotations

import json
import os
import re
import secrets
from functools import cached_property
from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]+)@", re.I)


def mask_secrets(text: str) -> str:
    """``postgresql://user:secret@host/db`` → ``postgresql://user:***@host/db``, wherever a URL with a
    password appears in ``text`` (health details, error messages, links)."""
    return _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)


def write_secret(path: Path, value: str) -> Path:
    """``value`` in a file only its owner may read (for a process that must not see it in its environment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(value)
    os.chmod(path, 0o600)
    return path


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ACTSWEEP_", extra="ignore")

    home: Path = Path("~/.actsweep")
    tracking_uri: str | None = None  # default: sqlite:///HOME/mlflow.db
    database_url: str | None = None  # sweep records; default: sqlite:///HOME/sweeps.db
    # the same two, read from a file (a secret: a password stays out of environments and job metadata)
    tracking_uri_file: Path | None = None
    database_url_file: Path | None = None
    ray_address: str | None = None  # None: start a local Ray; "auto" or ray://host:10001 to join one
    num_cpus: int | None = None  # CPUs of a local Ray (default: all)
    dashboard: bool = True  # start the Ray dashboard with a local Ray
    # `run` starts Ray first, beside its torch imports, spec checks and dataset load, on a machine with
    # at least this many CPUs (16 on a GPU machine: they overlap there); on fewer, after those checks
    # (on 2 cores they compete, and a refused spec would start a Ray for nothing: docs/plan.md)
    early_ray_cpus: int = 8
    # a local Ray's workers import torch and the trainable as Ray starts them (preload_python_modules),
    # so that Tune's first trial finds them imported; off: on 2 cores the imports competed with the
    # driver's and the first trial started 3-5 s later (docs/plan.md); not yet measured on many cores
    preload_workers: bool = False
    data_dir: Path | None = None  # default: HOME/data
    # decoded copies of compressed datasets (MNIST's pickle: 220 MB), default HOME/dataset_cache
    dataset_cache_dir: Path | None = None
    # Tune's storage (experiment state, per-epoch checkpoints); default HOME/ray_results. On a
    # cluster of several machines it must be shared by all nodes: a mounted folder, or s3://, gs://
    tune_storage: str | None = None
    download: bool = True  # let torchvision download data where the internet is reachable
    api_token: SecretStr | None = None  # when set, the REST API requires "Authorization: Bearer <token>"

    # REST service
    # where sweeps are submitted as Ray jobs; unset: the head this home starts for itself, on free
    # ports, recorded in HOME/ray/head.json
    ray_dashboard_url: str | None = None
    start_local_ray: bool = True  # `serve` starts a local Ray head when none of its own answers
    ray_join_timeout_s: float = 60.0  # `serve`, `run` and `bench` pointed at a cluster wait this long for it, then exit
    ray_temp_dir: str | None = None  # that head's --temp-dir (Ray's default: /tmp/ray)
    mlflow_ui_url: str | None = None  # for links; default: the tracking URI if it is http(s)
    max_trials_per_sweep: int = 2000  # larger grids are rejected with 422, not run
    # what one trial process holds on a GPU before its trial allocates anything (CUDA context, cuBLAS
    # workspaces): 610-810 MiB measured per process on an H100; counted against the GPU's memory
    # when gpus_per_trial puts several processes on it (service.driver.gpu_placement)
    cuda_context_mb: float = 810.0
    # a sweep whose estimated work (trial-epochs × FLOPs per epoch, workers/footprint.py) is larger is
    # rejected with 422; the largest catalog experiment (elu_imagenet) is about 1,750 PFLOP
    max_sweep_pflop: float = 10_000.0
    # paths a submitted spec may name (data_options.embeddings) lie inside the data directory or these
    data_roots: list[Path] = []
    idempotency_queued_s: float = 600.0  # an Idempotency-Key whose sweep stayed queued this long may be retried
    health_cache_s: float = 2.0  # /healthz checks Ray, MLflow and the database at most this often
    # a sweep's driver waits out an outage of MLflow or of the sweep database this long (seconds),
    # retrying with backoff, before the sweep fails (service.patience)
    outage_patience_s: float = 600.0
    # the trials' epochs wait in the driver this long at most, then each run's go to MLflow in one
    # write (service.runs.logger); 0: every epoch written as it comes (a call per run and epoch)
    metrics_flush_s: float = Field(1.0, ge=0, le=60)
    # a SQLite MLflow store in WAL mode with synchronous=NORMAL (service.runs.store): no fsync per commit,
    # and readers do not block the driver's writes. Never on a network filesystem
    sqlite_wal: bool = False
    # a driver whose MLflow store is a database (SQLite, PostgreSQL) writes a flush's epochs of all its
    # runs in one transaction, into MLflow's own tables (service.runs.sql_writes); false: one MLflow
    # log_batch per run. A tracking server (HTTP) always gets log_batch
    direct_sql_writes: bool = True
    # MLflow's HTTP client, where the tracking URI is a server: this many retries (1 s, 2 s ... apart;
    # a sweep's driver makes one more) and this timeout per request, so a server that does not answer
    # fails a call in seconds (the API answers 503), not after minutes (service.runs.store)
    mlflow_http_retries: int = 1
    mlflow_http_timeout_s: float = 10.0
    reconcile_s: float = 5.0  # the API's reconciler looks at every open sweep this often (seconds)
    driver_restarts: int = 2  # a sweep whose driver dies is continued by a new one (Tuner.restore) this often
    # at most this many sweeps have a driver (a Ray job) at once; the others wait, queued, in the order
    # they were submitted. Unset: max(1, min(the cluster's CPUs, its memory / 1.5 GiB)) (service.control.reconciler)
    max_running_sweeps: int | None = Field(None, ge=1)
    # a home's own head keeps a driver server (service.driver.warm: the driver's imports done, about
    # 0.3 GB) that forks each sweep's driver, and warm trial workers (torch imported, about 0.6 GB
    # each, one per CPU up to 4); both are released after this long with no sweep (seconds; 0: none)
    warm_idle_s: float = 900.0

    @model_validator(mode="after")
    def _read_secret_files(self) -> "Settings":
        """ACTSWEEP_TRACKING_URI_FILE and ACTSWEEP_DATABASE_URL_FILE: the URL read, once, from a file its
        owner alone reads (a password kept out of environments and Ray's job metadata); it wins over
        the plain variable."""
        for name in ("tracking_uri", "database_url"):
            path = getattr(self, f"{name}_file")
            if path is not None:
                if not path.is_file():
                    raise ValueError(f"{name}_file: no file at {path}")
                setattr(self, name, path.read_text().strip())
        return self

    def environment(self) -> dict[str, str]:
        """These settings as ACTSWEEP_* variables, for a child process (a sweep's driver) to read back
        the same: those not at their defaults, without the API token and the stores' URLs (which may
        hold passwords: the caller passes those as files, ACTSWEEP_*_FILE)."""
        secret = {"api_token", "tracking_uri", "database_url", "tracking_uri_file", "database_url_file"}
        values = self.model_dump(mode="json", exclude_defaults=True, exclude=secret)
        return {f"ACTSWEEP_{name.upper()}": value if isinstance(value, str) else json.dumps(value)
                for name, value in values.items()}

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
    def resolved_dataset_cache_dir(self) -> Path:
        return (self.dataset_cache_dir or self.root / "dataset_cache").expanduser()

    def trial_cache_secret(self) -> bytes:
        """The key the trial cache signs its runs with: HOME/secrets/trial_cache.key, made on first
        use, readable by its owner only (drivers and the API share HOME, and so the key)."""
        path = self.root / "secrets" / "trial_cache.key"
        if not path.is_file():
            write_secret(path, secrets.token_hex(32))
        return path.read_bytes().strip()

    def within_data_roots(self, path: str | Path) -> bool:
        """Whether ``path`` (relative: to the data directory) resolves inside a data root."""
        resolved = (self.resolved_data_dir / Path(path).expanduser()).resolve()
        roots = [self.resolved_data_dir, *self.data_roots]
        return any(resolved.is_relative_to(root.expanduser().resolve()) for root in roots)

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
