"""Sweep records: what was asked for, its state, and each trial's state (SQLAlchemy).

An SQLite file by default, PostgreSQL by URL (ACTSWEEP_DATABASE_URL). The API writes a record
when a sweep is submitted; the sweep's driver (a Ray job) writes its progress, so the record
outlives both processes and a restarted API reads the truth.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, create_engine, event, func,
                        select)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship, sessionmaker

SWEEP_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Base(DeclarativeBase):
    pass


class SweepRecord(Base):
    __tablename__ = "sweeps"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    experiment: Mapped[str] = mapped_column(String(100))
    quick: Mapped[bool] = mapped_column(Boolean, default=False)
    overrides: Mapped[dict] = mapped_column(JSON, default=dict)
    spec: Mapped[dict] = mapped_column(JSON)  # the resolved, validated spec the driver runs
    state: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    trials_total: Mapped[int] = mapped_column(Integer)
    epochs: Mapped[int] = mapped_column(Integer)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(Text)
    ray_job_id: Mapped[str | None] = mapped_column(String(100))
    mlflow_experiment_id: Mapped[str | None] = mapped_column(String(64))
    mlflow_parent_run_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    trials: Mapped[list["TrialRecord"]] = relationship(
        back_populates="sweep", cascade="all, delete-orphan", order_by="TrialRecord.position", lazy="selectin")


class TrialRecord(Base):
    """One grid point and seed; keyed by its position in the grid, stable across retries."""

    __tablename__ = "trials"

    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    activation: Mapped[str] = mapped_column(String(32))
    lr: Mapped[float] = mapped_column(Float)
    dropout: Mapped[float] = mapped_column(Float)
    seed: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    metrics: Mapped[dict] = mapped_column(JSON, default=dict)  # the last epoch's metrics
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)

    sweep: Mapped[SweepRecord] = relationship(back_populates="trials")


class DuplicateIdempotencyKey(Exception):
    pass


class SweepStore:
    """The storage interface the API and the drivers use; any SQLAlchemy URL."""

    def __init__(self, url: str):
        connect_args = {"timeout": 30} if url.startswith("sqlite") else {}
        self.engine = create_engine(url, connect_args=connect_args, pool_pre_ping=True)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        Base.metadata.create_all(self.engine)
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    def session(self) -> Session:
        return self._session()

    def ping(self) -> None:
        with self.engine.connect() as connection:
            connection.execute(select(1))

    # -- sweeps --------------------------------------------------------------------------------------
    def create(self, sweep: SweepRecord, trials: list[dict[str, Any]]) -> SweepRecord:
        """Store a new sweep and its pending trials; raises DuplicateIdempotencyKey on a reused key."""
        sweep.trials = [TrialRecord(position=i, **t) for i, t in enumerate(trials)]
        with self.session() as session:
            session.add(sweep)
            try:
                session.commit()
            except IntegrityError as exc:
                session.rollback()
                if sweep.idempotency_key and self.by_idempotency_key(sweep.idempotency_key):
                    raise DuplicateIdempotencyKey(sweep.idempotency_key) from exc
                raise
        return self.get(sweep.id)

    def get(self, sweep_id: str) -> SweepRecord | None:
        with self.session() as session:
            return session.get(SweepRecord, sweep_id)

    def by_idempotency_key(self, key: str) -> SweepRecord | None:
        with self.session() as session:
            return session.scalars(select(SweepRecord).where(SweepRecord.idempotency_key == key)).first()

    def page(self, offset: int, limit: int, state: str | None = None) -> tuple[list[SweepRecord], int]:
        """Newest first."""
        query = select(SweepRecord)
        count = select(func.count()).select_from(SweepRecord)
        if state:
            query, count = query.where(SweepRecord.state == state), count.where(SweepRecord.state == state)
        with self.session() as session:
            rows = session.scalars(query.order_by(SweepRecord.created_at.desc(), SweepRecord.id)
                                   .offset(offset).limit(limit)).all()
            return list(rows), session.scalar(count)

    def update(self, sweep_id: str, **fields) -> SweepRecord:
        with self.session() as session:
            sweep = session.get(SweepRecord, sweep_id)
            for key, value in fields.items():
                setattr(sweep, key, value)
            session.commit()
        return self.get(sweep_id)

    def finish(self, sweep_id: str, state: str, error: str | None = None) -> None:
        """Move a sweep to a terminal state; its trials still pending or running end with it."""
        trial_state = "cancelled" if state == "cancelled" else "failed"
        with self.session() as session:
            sweep = session.get(SweepRecord, sweep_id)
            sweep.state, sweep.finished_at = state, utcnow()
            if error:
                sweep.error = error
            for trial in sweep.trials:
                if trial.state in ("pending", "running"):
                    trial.state = trial_state
            session.commit()

    # -- trials --------------------------------------------------------------------------------------
    def update_trial(self, sweep_id: str, position: int, **fields) -> None:
        with self.session() as session:
            trial = session.get(TrialRecord, (sweep_id, position))
            for key, value in fields.items():
                setattr(trial, key, value)
            session.commit()


def _sqlite_pragmas(connection, _record):
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (the API) do not block the drivers' writes
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
