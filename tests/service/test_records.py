"""The sweep-record store's contract, run against every backend the tests can start.

SQLite, and PostgreSQL: a real server the tests start on loopback (tests/servers.py), or the one
ACTSWEEP_TEST_POSTGRES_URL names.
"""
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from sqlalchemy.exc import InvalidRequestError

from service.records import DuplicateIdempotencyKey, SweepRecord, SweepStore, TrialCounts


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path) -> SweepStore:
    if request.param == "sqlite":
        return SweepStore(f"sqlite:///{tmp_path / 'sweeps.db'}")
    return SweepStore(os.environ.get("ACTSWEEP_TEST_POSTGRES_URL") or request.getfixturevalue("postgres")["actsweep"])


def _record(key: str | None = None) -> SweepRecord:
    return SweepRecord(id=uuid.uuid4().hex[:12], experiment="mnist_classification", quick=True, overrides={"lr": [0.1]},
                       spec={"name": "mnist_classification"}, trials_total=2, epochs=3, idempotency_key=key)


POINTS = [{"activation": "gelu", "dropout": 0.0, "lr": 0.1, "seed": 0},
          {"activation": "gelu", "dropout": 0.0, "lr": 0.1, "seed": 1}]


def test_create_and_read_back_with_pending_trials(store):
    created = store.create(_record(), POINTS)
    again = store.get(created.id)
    assert again.state == "queued" and again.overrides == {"lr": [0.1]}
    assert [(t.position, t.seed, t.state) for t in again.trials] == [(0, 0, "pending"), (1, 1, "pending")]


def test_trial_updates_and_finish(store):
    record = store.create(_record(), POINTS)
    store.update_trial(record.id, 0, state="succeeded", epoch=3, metrics={"test_error": 0.1})
    store.update_trial(record.id, 1, state="running", epoch=1)
    store.finish(record.id, "cancelled")
    trials = store.get(record.id).trials
    assert store.get(record.id).state == "cancelled" and store.get(record.id).finished_at is not None
    assert [(t.state, t.epoch) for t in trials] == [("succeeded", 3), ("cancelled", 1)]
    assert trials[0].metrics == {"test_error": 0.1}


def test_progress_is_counted_in_the_database_and_a_page_of_sweeps_reads_no_trials(store):
    record, other, empty = store.create(_record(), POINTS), store.create(_record(), POINTS), _record()
    empty.trials_total = 0
    store.create(empty, [])
    store.update_trial(record.id, 0, state="succeeded", epoch=3)  # done: all 3 epochs
    store.update_trial(record.id, 1, state="running", epoch=2)
    store.update_trial(other.id, 0, state="diverged", epoch=1)  # done, its epochs counted as all 3
    store.update_trial(other.id, 1, state="running", epoch=7)  # more than the sweep's epochs: counted as 3
    assert store.trial_counts([record.id, other.id, empty.id, "nosuchsweep"]) == {
        record.id: TrialCounts(done=1, epochs_done=5), other.id: TrialCounts(done=1, epochs_done=6),
        empty.id: TrialCounts(), "nosuchsweep": TrialCounts()}
    page, _ = store.page(0, 3)
    with pytest.raises(InvalidRequestError):  # a list of sweeps never loads each one's trials
        page[0].trials
    with pytest.raises(InvalidRequestError):  # nor does a sweep looked up only to check it is there
        store.get(record.id, with_trials=False).trials
    assert len(store.get(record.id).trials) == 2


def test_idempotency_key_is_unique(store):
    key = f"k-{uuid.uuid4().hex}"
    first = store.create(_record(key), POINTS)
    with pytest.raises(DuplicateIdempotencyKey):
        store.create(_record(key), POINTS)
    assert store.by_idempotency_key(key).id == first.id


def test_pages_are_newest_first_and_filter_by_state(store):
    ids = [store.create(_record(), POINTS).id for _ in range(3)]
    store.finish(ids[0], "failed", error="boom")
    page, total = store.page(0, 2)
    assert total >= 3 and len(page) == 2
    failed, n_failed = store.page(0, 10, state="failed")
    assert ids[0] in [r.id for r in failed] and all(r.state == "failed" for r in failed) and n_failed >= 1
    assert store.get(ids[0]).error == "boom"


def test_states_move_only_as_their_state_machine_allows(store):
    record = store.create(_record(), POINTS)
    assert not store.transition(record.id, "succeeded")  # queued → succeeded skips running
    assert store.transition(record.id, "running") and store.get(record.id).state == "running"
    assert store.finish(record.id, "succeeded")
    # a late verdict (a refresh that lost sight of the driver, a second finish) changes nothing
    assert not store.finish(record.id, "failed", error="driver lost")
    assert not store.transition(record.id, "running")
    again = store.get(record.id)
    assert again.state == "succeeded" and again.error is None
    with pytest.raises(ValueError, match="transition"):
        store.update(record.id, state="queued")


def test_a_trial_that_ended_keeps_its_state_and_last_metrics(store):
    record = store.create(_record(), POINTS)
    assert store.update_trial(record.id, 0, state="running", epoch=1)
    assert store.update_trial(record.id, 0, state="succeeded", epoch=3, metrics={"test_error": 0.1})
    assert not store.update_trial(record.id, 0, state="failed")
    assert not store.update_trial(record.id, 0, epoch=9, metrics={"test_error": 0.9})  # a late report
    assert store.update_trial(record.id, 1, state="running")  # pending → running
    trial = store.get(record.id).trials[0]
    assert (trial.state, trial.epoch, trial.metrics) == ("succeeded", 3, {"test_error": 0.1})


def test_a_database_from_before_gets_the_new_columns(tmp_path):
    import sqlalchemy

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:  # the sweeps table as it was, without request_hash
        connection.execute(sqlalchemy.text(
            "CREATE TABLE sweeps (id VARCHAR(32) PRIMARY KEY, name VARCHAR(200), experiment VARCHAR(100), "
            "quick BOOLEAN, overrides JSON, spec JSON, state VARCHAR(16), trials_total INTEGER, epochs INTEGER, "
            "idempotency_key VARCHAR(200) UNIQUE, cancel_requested BOOLEAN, error TEXT, ray_job_id VARCHAR(100), "
            "mlflow_experiment_id VARCHAR(64), mlflow_parent_run_id VARCHAR(64), created_at DATETIME, "
            "started_at DATETIME, finished_at DATETIME)"))
        connection.execute(sqlalchemy.text("INSERT INTO sweeps (id, experiment, state, trials_total, epochs, spec, "
                                           "overrides, quick, cancel_requested) VALUES ('old1', 'x', 'succeeded', 1, "
                                           "1, '{}', '{}', 0, 0)"))
    store = SweepStore(url)
    assert store.get("old1").state == "succeeded" and store.get("old1").request_hash is None
    assert store.create(_record("k"), POINTS).request_hash is None


# the sweep database as the code before schema migrations (de90335) made it: create_all's tables
PREVIOUS_CODE_SCHEMA = """
CREATE TABLE sweeps (id VARCHAR(32) NOT NULL, name VARCHAR(200), experiment VARCHAR(100) NOT NULL,
    quick BOOLEAN NOT NULL, overrides JSON NOT NULL, spec JSON NOT NULL, state VARCHAR(16) NOT NULL,
    trials_total INTEGER NOT NULL, epochs INTEGER NOT NULL, idempotency_key VARCHAR(200), request_hash VARCHAR(64),
    cancel_requested BOOLEAN NOT NULL, error TEXT, ray_job_id VARCHAR(100), mlflow_experiment_id VARCHAR(64),
    mlflow_parent_run_id VARCHAR(64), sequential JSON, runs_ended BOOLEAN, created_at DATETIME NOT NULL,
    started_at DATETIME, finished_at DATETIME, PRIMARY KEY (id), UNIQUE (idempotency_key));
CREATE INDEX ix_sweeps_state ON sweeps (state);
CREATE TABLE leases (name VARCHAR(64) NOT NULL, owner VARCHAR(64) NOT NULL, expires_at DATETIME NOT NULL,
    PRIMARY KEY (name));
CREATE TABLE trials (sweep_id VARCHAR(32) NOT NULL, position INTEGER NOT NULL, activation VARCHAR(32) NOT NULL,
    lr FLOAT NOT NULL, dropout FLOAT NOT NULL, seed INTEGER NOT NULL, state VARCHAR(16) NOT NULL,
    epoch INTEGER NOT NULL, metrics JSON NOT NULL, mlflow_run_id VARCHAR(64), updated_at DATETIME NOT NULL,
    PRIMARY KEY (sweep_id, position), FOREIGN KEY(sweep_id) REFERENCES sweeps (id) ON DELETE CASCADE);
INSERT INTO sweeps VALUES ('old2', NULL, 'x', 0, '{}', '{}', 'running', 1, 3, 'key-1', 'abc', 0, NULL, 'job-1',
    '1', 'run-1', NULL, 0, '2026-11-01 10:00:00', NULL, NULL);
INSERT INTO trials VALUES ('old2', 0, 'gelu', 0.1, 0.0, 0, 'running', 2, '{}', 'mlrun', '2026-11-01 10:00:00');
"""


def test_a_database_made_by_the_previous_code_is_upgraded_and_keeps_its_records(tmp_path):
    import sqlite3

    path = tmp_path / "previous.db"
    with sqlite3.connect(path) as connection:
        connection.executescript(PREVIOUS_CODE_SCHEMA)
    store = SweepStore(f"sqlite:///{path}")
    record = store.get("old2")
    assert (record.state, record.idempotency_key, record.ray_job_id) == ("running", "key-1", "job-1")
    assert [(t.activation, t.epoch, t.mlflow_run_id) for t in record.trials] == [("gelu", 2, "mlrun")]
    assert store.update_trial("old2", 0, state="succeeded", epoch=3)
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [("0002",)]


def test_the_migrated_schema_is_the_one_the_code_declares(store):
    """Alembic's revisions and the tables in service/records.py agree: nothing left to migrate."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from service.records import Base

    store.ping()  # (the first use migrates)
    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []


def test_concurrent_first_requests_make_the_schema_once(tmp_path):
    """Twenty threads' first use of a new database (the API's first requests): none fails."""
    from concurrent.futures import ThreadPoolExecutor

    store = SweepStore(f"sqlite:///{tmp_path / 'fresh.db'}")
    with ThreadPoolExecutor(max_workers=20) as pool:
        pages = list(pool.map(lambda _: store.page(0, 20), range(20)))
    assert pages == [([], 0)] * 20


def test_one_lease_holder_at_a_time(store):
    """The reconciler's lease: taken by one replica, renewed by it, refused to another until it
    expires or is released."""
    name = f"lease-{uuid.uuid4().hex[:8]}"
    assert store.acquire_lease(name, "replica-1", ttl_s=60)
    assert not store.acquire_lease(name, "replica-2", ttl_s=60)
    assert store.acquire_lease(name, "replica-1", ttl_s=60)  # renewed by its holder
    store.release_lease(name, "replica-1")
    assert store.acquire_lease(name, "replica-2", ttl_s=0.5)
    assert not store.acquire_lease(name, "replica-1", ttl_s=60)
    time.sleep(0.6)
    assert store.acquire_lease(name, "replica-1", ttl_s=60)  # expired: taken over


def test_replicas_racing_for_a_lease_give_it_to_exactly_one(store):
    name = f"lease-{uuid.uuid4().hex[:8]}"
    store.ping()  # the schema, made once
    url = store.engine.url.render_as_string(hide_password=False)
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda n: SweepStore(url).acquire_lease(name, f"replica-{n}", 60), range(16)))
    assert won.count(True) == 1
