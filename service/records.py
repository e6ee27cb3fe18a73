"""Sweep records: what was asked for, its state, and each trial's state (SQLAlchemy).

An SQLite file by default, PostgreSQL by URL (ACTSWEEP_DATABASE_URL). The API writes a record
when a sweep is submitted; the sweep's driver (a Ray job) writes its progress, so the record
outlives both processes and a restarted API reads the truth.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import functools
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import (JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, case, create_engine, event,
                        func, select)
from sqlalchemy import text
from sqlalchemy import update as sql_update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship, selectinload, sessionmaker

from service.patience import is_outage, patiently

def new_sweep_id() -> str:
    """A new sweep's id: 12 hex digits."""
    return uuid.uuid4().hex[:12]


SWEEP_STATES = ("queued", "running", "succeeded", "failed", "cancelled", "interrupted")
# interrupted: its Ray head was stopped under it (actsweep stop --force); what it logged is kept
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "interrupted"})
# The state machines: the states each state may move to. A terminal state moves nowhere: a late or
# repeated verdict (a driver's, the reconciler's) never overwrites one.
SWEEP_MOVES = {"queued": {"running", "failed", "cancelled", "interrupted"},
               "running": {"succeeded", "failed", "cancelled", "interrupted"}}
TRIAL_MOVES = {"pending": {"running", "reused", "succeeded", "diverged", "failed", "cancelled"},
               "running": {"running", "succeeded", "diverged", "failed", "cancelled"}}
TRIAL_TERMINAL = frozenset({"succeeded", "reused", "diverged", "failed", "cancelled"})
TRIAL_STATES = ("pending", "running", "succeeded", "reused", "diverged", "failed", "cancelled")
FINISHED_TRIAL_STATES = ("succeeded", "reused", "diverged", "failed")  # what progress counts as done


def _sources(moves: dict[str, set[str]], state: str) -> list[str]:
    """The states from which ``state`` may be reached."""
    return [source for source, targets in moves.items() if state in targets]


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
    request_hash: Mapped[str | None] = mapped_column(String(64))  # what the key is bound to
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(Text)
    ray_job_id: Mapped[str | None] = mapped_column(String(100))
    mlflow_experiment_id: Mapped[str | None] = mapped_column(String(64))
    mlflow_parent_run_id: Mapped[str | None] = mapped_column(String(64))
    # until_decided: the last look (its seeds, the claims decided and open); None for a fixed grid
    sequential: Mapped[dict | None] = mapped_column(JSON)
    # the execution plan the driver resolved (service.driver.execution_plan.ExecutionPlan.as_dict)
    plan: Mapped[dict | None] = mapped_column(JSON)
    # the sweep is over and its MLflow runs are ended (the reconciler ends those a dead driver left open)
    runs_ended: Mapped[bool | None] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    trials: Mapped[list["TrialRecord"]] = relationship(
        back_populates="sweep", cascade="all, delete-orphan", order_by="TrialRecord.position",
        lazy="raise")  # loaded by SweepStore.get only: a list of sweeps must not read every trial of each


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


class Lease(Base):
    """A named lease one process holds until ``expires_at`` (the reconciler's: one API replica acts at a time)."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


def waits_for_a_slot(record: SweepRecord) -> bool:
    """The sweep is queued without a driver, and not being cancelled (SweepStore's queue, in Python)."""
    return record.state == "queued" and record.ray_job_id is None and not record.cancel_requested


class DuplicateIdempotencyKey(Exception):
    pass


@dataclass(frozen=True)
class TrialCounts:
    """How far a sweep's trials are: finished ones, and epochs done (a finished trial counts all of its)."""

    done: int = 0
    epochs_done: int = 0


def _database_away(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and is_outage(exc)


def _waits_out_outages(method):
    """The method, retried while the database does not answer, for the store's ``patience_s``."""

    @functools.wraps(method)
    def patient(self, *args, **kwargs):
        return patiently(method, _database_away, self.patience_s, self, *args, **kwargs)

    return patient


class SweepStore:
    """The storage interface the API and the drivers use; any SQLAlchemy URL.

    With ``patience_s`` (a driver's), the writes a sweep makes as it runs, and its reads, wait out an
    outage of the database (service.patience); the API's store has none, and answers 503 at once."""

    def __init__(self, url: str, patience_s: float = 0.0):
        self.patience_s = patience_s
        # (a database that does not answer fails a request in seconds, which the API answers with 503)
        connect_args = {"timeout": 30} if url.startswith("sqlite") else {"connect_timeout": 5}
        self.engine = create_engine(url, connect_args=connect_args, pool_pre_ping=True)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        self._schema_ready = False
        self._schema_lock = threading.Lock()

    def session(self) -> Session:
        if not self._schema_ready:  # on first use, not at start: a service starts while its database is away
            with self._schema_lock:  # once: concurrent first requests racing to CREATE TABLE got "already exists"
                if not self._schema_ready:
                    upgrade_schema(self.engine)
                    self._schema_ready = True
        return self._session()

    def ping(self) -> None:
        with self.session() as session:
            session.execute(select(1))

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

    @_waits_out_outages
    def get(self, sweep_id: str, with_trials: bool = True) -> SweepRecord | None:
        """The sweep, with its trials unless ``with_trials`` is False."""
        with self.session() as session:
            return session.get(SweepRecord, sweep_id, options=[selectinload(SweepRecord.trials)] if with_trials else [])

    def by_idempotency_key(self, key: str) -> SweepRecord | None:
        with self.session() as session:
            return session.scalars(select(SweepRecord).where(SweepRecord.idempotency_key == key)).first()

    def release_idempotency_key(self, sweep_id: str) -> None:
        """The sweep keeps its history but no longer answers to its key (a retry makes a new sweep)."""
        self.update(sweep_id, idempotency_key=None)

    def open_sweeps(self) -> list[SweepRecord]:
        """Sweeps not yet in a terminal state (what the reconciler watches), without their trials."""
        with self.session() as session:
            return list(session.scalars(select(SweepRecord).where(SweepRecord.state.not_in(TERMINAL_STATES))))

    # -- the queue: sweeps waiting for a slot, in the order they were recorded ----------------------
    # A sweep holds a slot while it has a driver (a Ray job id) and is not over; it waits while it is
    # queued without one (and not being cancelled). service.control.reconciler.dispatch starts them.
    _WAITING = (SweepRecord.state == "queued") & SweepRecord.ray_job_id.is_(None) & \
        (SweepRecord.cancel_requested.is_(None) | SweepRecord.cancel_requested.is_(False))
    _QUEUE_ORDER = (SweepRecord.created_at, SweepRecord.id)

    def queue_counts(self) -> tuple[int, int]:
        """(sweeps holding a slot, sweeps waiting for one), in one query."""
        held = SweepRecord.ray_job_id.is_not(None)
        with self.session() as session:
            running, waiting = session.execute(
                select(func.sum(case((held, 1), else_=0)), func.sum(case((self._WAITING, 1), else_=0)))
                .where(SweepRecord.state.not_in(TERMINAL_STATES))).one()
        return int(running or 0), int(waiting or 0)

    def waiting_sweeps(self, limit: int | None = None) -> list[SweepRecord]:
        """The sweeps waiting for a slot, first recorded first (without their trials)."""
        with self.session() as session:
            return list(session.scalars(select(SweepRecord).where(self._WAITING)
                                        .order_by(*self._QUEUE_ORDER).limit(limit)))

    def queue_positions(self) -> dict[str, int]:
        """Each waiting sweep's place in the queue: 1 is the next to start."""
        with self.session() as session:
            ids = session.scalars(select(SweepRecord.id).where(self._WAITING).order_by(*self._QUEUE_ORDER))
            return {sweep_id: place for place, sweep_id in enumerate(ids, start=1)}

    def cancel_waiting(self, sweep_id: str) -> bool:
        """Cancel a sweep still waiting for a slot, in one conditional UPDATE: False (nothing written)
        where a dispatcher gave it a driver first, or it is no longer queued."""
        with self.session() as session:
            moved = session.execute(sql_update(SweepRecord).where(SweepRecord.id == sweep_id, self._WAITING)
                                    .values(state="cancelled", cancel_requested=True, finished_at=utcnow(),
                                            runs_ended=True)).rowcount  # (no driver: no MLflow run opened)
            if moved:
                session.execute(sql_update(TrialRecord).where(TrialRecord.sweep_id == sweep_id,
                                                          TrialRecord.state.in_(("pending", "running")))
                                .values(state="cancelled"))
            session.commit()
        return bool(moved)

    def record_driver(self, sweep_id: str, job_id: str) -> bool:
        """Give a waiting sweep its slot: write the job id its first driver will have, in one
        conditional UPDATE, before that driver is submitted. False (nothing written) where it is no
        longer waiting: cancelled (:meth:`cancel_waiting` won), or taken by another dispatcher."""
        with self.session() as session:
            moved = session.execute(sql_update(SweepRecord).where(SweepRecord.id == sweep_id, self._WAITING)
                                    .values(ray_job_id=job_id)).rowcount
            session.commit()
        return bool(moved)

    def release_driver(self, sweep_id: str, job_id: str) -> bool:
        """Undo :meth:`record_driver` where the driver could not be submitted (the cluster did not
        answer): the sweep waits again, in its place. False where the record moved on meanwhile."""
        with self.session() as session:
            moved = session.execute(sql_update(SweepRecord).where(SweepRecord.id == sweep_id,
                                                                  SweepRecord.ray_job_id == job_id,
                                                                  SweepRecord.state == "queued")
                                    .values(ray_job_id=None)).rowcount
            session.commit()
        return bool(moved)

    def sweeps_with_open_runs(self) -> list[SweepRecord]:
        """Sweeps that ended without success whose MLflow runs have not been ended yet."""
        with self.session() as session:
            return list(session.scalars(select(SweepRecord).where(
                SweepRecord.state.in_(TERMINAL_STATES - {"succeeded"}),
                (SweepRecord.runs_ended.is_(None)) | (SweepRecord.runs_ended.is_(False)))))

    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take or renew the lease ``name`` for ``ttl_s`` seconds: True where ``owner`` holds it now (it
        was free, expired, or already its own), in one conditional write, so two processes never both do."""
        now = utcnow()
        until = now + dt.timedelta(seconds=ttl_s)
        with self.session() as session:
            taken = session.execute(sql_update(Lease).where(
                Lease.name == name, (Lease.owner == owner) | (Lease.expires_at < now))
                .values(owner=owner, expires_at=until)).rowcount
            if not taken:
                session.add(Lease(name=name, owner=owner, expires_at=until))
                try:
                    session.flush()
                    taken = 1
                except IntegrityError:  # held by another, and not expired
                    session.rollback()
                    return False
            session.commit()
        return bool(taken)

    def release_lease(self, name: str, owner: str) -> None:
        with self.session() as session:
            session.execute(sql_update(Lease).where(Lease.name == name, Lease.owner == owner)
                            .values(expires_at=utcnow() - dt.timedelta(seconds=1)))
            session.commit()

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

    def trial_counts(self, sweep_ids: list[str]) -> dict[str, TrialCounts]:
        """Each sweep's progress, counted in the database (one aggregate query, no trial rows read out)."""
        finished = TrialRecord.state.in_(FINISHED_TRIAL_STATES)
        epochs = case((finished, SweepRecord.epochs), (TrialRecord.epoch < SweepRecord.epochs, TrialRecord.epoch),
                      else_=SweepRecord.epochs)
        query = (select(TrialRecord.sweep_id, func.sum(case((finished, 1), else_=0)), func.sum(epochs))
                 .join(SweepRecord, SweepRecord.id == TrialRecord.sweep_id)
                 .where(TrialRecord.sweep_id.in_(sweep_ids)).group_by(TrialRecord.sweep_id))
        with self.session() as session:
            found = {sweep_id: TrialCounts(int(done), int(epochs_done))
                     for sweep_id, done, epochs_done in session.execute(query)}
        return {sweep_id: found.get(sweep_id, TrialCounts()) for sweep_id in sweep_ids}

    def trial_page(self, sweep_id: str, offset: int, limit: int,
                   state: str | None = None) -> tuple[list[TrialRecord], int]:
        """A sweep's trials in grid order, one page of them (and how many there are)."""
        query = select(TrialRecord).where(TrialRecord.sweep_id == sweep_id)
        count = select(func.count()).select_from(TrialRecord).where(TrialRecord.sweep_id == sweep_id)
        if state:
            query, count = query.where(TrialRecord.state == state), count.where(TrialRecord.state == state)
        with self.session() as session:
            rows = session.scalars(query.order_by(TrialRecord.position).offset(offset).limit(limit)).all()
            return list(rows), session.scalar(count)

    @_waits_out_outages
    def update(self, sweep_id: str, **fields) -> SweepRecord:
        """Set fields other than the state (which moves only by :meth:`transition` and :meth:`finish`)."""
        if "state" in fields:
            raise ValueError("a sweep's state moves by transition() or finish(), not update()")
        with self.session() as session:
            sweep = session.get(SweepRecord, sweep_id)
            for key, value in fields.items():
                setattr(sweep, key, value)
            session.commit()
        return self.get(sweep_id)

    @_waits_out_outages
    def transition(self, sweep_id: str, state: str, **fields) -> bool:
        """Move the sweep to ``state`` (with ``fields``) if its state machine allows it from where it
        is, in one conditional UPDATE; False (nothing written) where it does not."""
        with self.session() as session:
            moved = session.execute(sql_update(SweepRecord)
                                    .where(SweepRecord.id == sweep_id, SweepRecord.state.in_(_sources(SWEEP_MOVES, state)))
                                    .values(state=state, **fields)).rowcount
            session.commit()
        return bool(moved)

    @_waits_out_outages
    def finish(self, sweep_id: str, state: str, error: str | None = None) -> bool:
        """Move a sweep to a terminal state; its trials still pending or running end with it. A sweep
        already in a terminal state keeps it (False)."""
        trial_state = "cancelled" if state in ("cancelled", "interrupted") else "failed"
        with self.session() as session:  # one transaction: a retry after an outage finds all of it or none
            moved = session.execute(sql_update(SweepRecord)
                                    .where(SweepRecord.id == sweep_id,
                                           SweepRecord.state.in_(_sources(SWEEP_MOVES, state)))
                                    .values(state=state, finished_at=utcnow(), **({"error": error} if error else {}))
                                    ).rowcount
            if not moved:
                return False
            session.execute(sql_update(TrialRecord).where(TrialRecord.sweep_id == sweep_id,
                                                      TrialRecord.state.in_(("pending", "running")))
                            .values(state=trial_state))
            session.commit()
        return True

    # -- trials --------------------------------------------------------------------------------------
    @_waits_out_outages
    def add_trials(self, sweep_id: str, trials: list[dict[str, Any]]) -> dict[tuple, int]:
        """Append pending trials (a round of seeds until decided) after the last position; returns
        each new trial's position by its grid key (activation, dropout, lr, seed)."""
        with self.session() as session:
            sweep = session.get(SweepRecord, sweep_id)
            start = session.execute(select(func.max(TrialRecord.position))
                                    .where(TrialRecord.sweep_id == sweep_id)).scalar() or 0
            added = {}
            for offset, trial in enumerate(trials, start=start + 1):
                session.add(TrialRecord(sweep_id=sweep_id, position=offset, **trial))
                added[(trial["activation"], trial["dropout"], trial["lr"], trial["seed"])] = offset
            sweep.trials_total += len(trials)
            session.commit()
        return added

    @_waits_out_outages
    def update_trial(self, sweep_id: str, position: int, fields: dict | None = None, **more) -> bool:
        """Update a trial: a new ``state`` only where its state machine allows it, other fields only
        while it has not ended (or with the state that ends it). False where nothing was written."""
        fields = {**(fields or {}), **more}
        allowed = _sources(TRIAL_MOVES, fields["state"]) if "state" in fields else list(TRIAL_MOVES)
        with self.session() as session:
            moved = session.execute(sql_update(TrialRecord)
                                    .where(TrialRecord.sweep_id == sweep_id, TrialRecord.position == position,
                                           TrialRecord.state.in_(allowed))
                                    .values(updated_at=utcnow(), **fields)).rowcount
            session.commit()
        return bool(moved)


MIGRATIONS = Path(__file__).resolve().parent / "records_migrations"


def upgrade_schema(engine) -> None:
    """The database brought to the schema this code declares, by its Alembic revisions
    (service/records_migrations/): every table for a new database, what it lacks for an old one.
    One process at a time: API replicas and drivers may open a new database together."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with _migration_lock(engine), engine.begin() as connection:
        if engine.dialect.name == "postgresql":  # (DDL is transactional there: the lock is the transaction's)
            connection.execute(text("SELECT pg_advisory_xact_lock(7271001)"))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


@contextmanager
def _migration_lock(engine):
    """An SQLite file's migrations, one process at a time (a lock file beside it)."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sqlite_pragmas(connection, _record):
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (the API) do not block the drivers' writes
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
