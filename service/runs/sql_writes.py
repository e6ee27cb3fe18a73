"""Many runs' epochs in one transaction, written into MLflow's own tables (SQLite, PostgreSQL).

MLflow's ``log_batch`` takes one run a call, and its ORM makes an object per metric value: about
14 ms for one run's 7 epochs of 16 metrics on SQLite here (docs/load.md), which caps a sweep's
bookkeeping near 500 trial-epochs a second however its writes are batched. A sweep's driver, where
the tracking store is a database it reaches directly, writes a flush's epochs of every run in one
transaction instead: the same rows ``log_batch`` writes (metrics, latest_metrics, params, tags), by
executemany through MLflow's own table definitions, with the same rules:

- a metric row sent again is written once (the metrics table's primary key: its conflict is ignored);
- a run's latest value of a metric is the one with the highest (step, timestamp, value);
- NaN is stored as 0 with is_nan, ±inf as ±float max;
- a param logged again with another value is refused (MlflowException), as MLflow refuses it;
- a run that is not active (deleted) is refused.

``ACTSWEEP_DIRECT_SQL_WRITES=false`` sends every write through ``MlflowClient.log_batch`` instead; a
tracking server (HTTP) always gets ``log_batch``. tests/service/runs/test_sql_writes.py checks that
both paths leave the same store behind.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag
from sqlalchemy import select, tuple_, update
from sqlalchemy.engine import Engine

DIALECTS = ("sqlite", "postgresql")
_CHUNK = 5000  # rows an INSERT's executemany takes at once
_LOOKUP = 2000  # values in one IN (...) (SQLite takes 32,766 bound parameters a statement)


@dataclass
class RunWrite:
    """What one write of a run holds: metric rows (key, value, timestamp ms, step), params and tags."""

    run_id: str
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


def _sanitized(value: float) -> tuple[float, bool]:
    if math.isnan(value):
        return 0.0, True
    if math.isinf(value):
        return math.copysign(1.7976931348623157e308, value), False
    return value, False


class SqlRunWriter:
    """Writes :class:`RunWrite` s, and ends runs, in one transaction each call, on ``engine``."""

    def __init__(self, engine: Engine):
        self.engine = engine
        if engine.dialect.name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        self._insert = insert

    @classmethod
    def for_store(cls, store) -> "SqlRunWriter | None":
        """A writer on an MLflow SqlAlchemyStore's engine, or None for any other store or dialect."""
        engine = getattr(store, "engine", None)
        if isinstance(engine, Engine) and engine.dialect.name in DIALECTS:
            return cls(engine)
        return None

    def write(self, writes: list[RunWrite]) -> None:
        """Every write's rows, in one transaction."""
        writes = [w for w in writes if w.metrics or w.params or w.tags]
        if not writes:
            return
        with self.engine.begin() as conn:
            self._check_active(conn, {w.run_id for w in writes})
            metric_rows, latest = [], {}
            for w in writes:
                for key, value, timestamp, step in w.metrics:
                    value, is_nan = _sanitized(float(value))
                    row = {"run_uuid": w.run_id, "key": key, "value": value, "timestamp": timestamp, "step": step,
                           "is_nan": is_nan}
                    metric_rows.append(row)
                    old = latest.get((w.run_id, key))
                    if old is None or (step, timestamp, value) > (old["step"], old["timestamp"], old["value"]):
                        latest[(w.run_id, key)] = row
            metrics = SqlMetric.__table__
            for start in range(0, len(metric_rows), _CHUNK):
                conn.execute(self._insert(metrics).on_conflict_do_nothing(), metric_rows[start:start + _CHUNK])
            if latest:
                self._upsert_latest(conn, list(latest.values()))
            params = [{"run_uuid": w.run_id, "key": k, "value": v} for w in writes for k, v in w.params.items()]
            if params:
                conn.execute(self._insert(SqlParam.__table__).on_conflict_do_nothing(), params)
                self._check_params(conn, params)
            tags = [{"run_uuid": w.run_id, "key": k, "value": v} for w in writes for k, v in w.tags.items()]
            if tags:
                insert = self._insert(SqlTag.__table__)
                conn.execute(insert.on_conflict_do_update(index_elements=["key", "run_uuid"],
                                                          set_={"value": insert.excluded.value}), tags)

    def end(self, run_ids: list[str], status: str, end_time_ms: int) -> None:
        """The runs end with ``status`` (FINISHED, FAILED, KILLED) at ``end_time_ms``, in one transaction."""
        if not run_ids:
            return
        runs = SqlRun.__table__
        with self.engine.begin() as conn:
            self._check_active(conn, set(run_ids))
            conn.execute(update(runs).where(runs.c.run_uuid.in_(run_ids)).values(status=status, end_time=end_time_ms))

    def _upsert_latest(self, conn, rows: list[dict]) -> None:
        table = SqlLatestMetric.__table__
        for start in range(0, len(rows), _CHUNK):
            insert = self._insert(table)
            newer = tuple_(insert.excluded.step, insert.excluded.timestamp, insert.excluded.value) > \
                tuple_(table.c.step, table.c.timestamp, table.c.value)
            conn.execute(insert.on_conflict_do_update(
                index_elements=["key", "run_uuid"], where=newer,
                set_={c: insert.excluded[c] for c in ("value", "timestamp", "step", "is_nan")}),
                rows[start:start + _CHUNK])

    @staticmethod
    def _check_active(conn, run_ids: set[str]) -> None:
        runs, ids, active = SqlRun.__table__, sorted(run_ids), set()
        for start in range(0, len(ids), _LOOKUP):
            active.update(conn.scalars(select(runs.c.run_uuid).where(runs.c.run_uuid.in_(ids[start:start + _LOOKUP]),
                                                                     runs.c.lifecycle_stage == "active")))
        if active != run_ids:
            missing = sorted(run_ids - active)
            raise MlflowException(f"The run(s) {', '.join(missing[:5])} must be in the 'active' state (deleted, or "
                                  f"no such run)", INVALID_PARAMETER_VALUE)

    @staticmethod
    def _check_params(conn, params: list[dict]) -> None:
        table = SqlParam.__table__
        sent = {(p["run_uuid"], p["key"]): p["value"] for p in params}
        pairs, changed = list(sent), []
        for start in range(0, len(pairs), _LOOKUP):
            stored = conn.execute(select(table.c.run_uuid, table.c.key, table.c.value)
                                  .where(tuple_(table.c.run_uuid, table.c.key).in_(pairs[start:start + _LOOKUP])))
            changed += [(run, key, value, sent[(run, key)]) for run, key, value in stored if value != sent[(run, key)]]
        if changed:
            raise MlflowException(f"Changing param values is not allowed: {changed[:5]} (run, key, logged, new)",
                                  INVALID_PARAMETER_VALUE)
