"""The Tune callback that writes a sweep's trials to MLflow, driven as Tune drives it, on a real
SQLite store: what it writes per trial, and how a driver that continues a dead one's sweep finds
the runs already there instead of opening new ones (searching the store once, not per trial)."""
from __future__ import annotations

import pickle
import time
from types import SimpleNamespace

import pytest

from service.runs.logger import MLflowTrialLogger
from service.runs.store import Provenance, RunStore
from tests.conftest import migrated_mlflow_store
from workers.trial import GridPoint, Pack, tune_config

SWEEP_ID = "logger1"


class CountingStore(RunStore):
    """A real store that counts its searches (each a query over every run of every experiment)."""

    searches = 0

    def _each(self, filter_string: str):
        type(self).searches += 1
        return super()._each(filter_string)


@pytest.fixture
def sweep(tmp_path):
    runs = CountingStore(migrated_mlflow_store(tmp_path))
    exp = runs.experiment_id("actsweep/logger", tmp_path / "artifacts")
    parent = runs.start_sweep(exp, "logger", Provenance(SWEEP_ID, "logger"), {}, {})
    CountingStore.searches = 0
    return runs, exp, parent


def _trials() -> list[SimpleNamespace]:
    settings = {"epochs": 2, "model": {"depth": 1}}
    alone = [SimpleNamespace(trial_id=f"t{s}", config=tune_config(settings, GridPoint("gelu", 0.01, 0.0, s)))
             for s in range(3)]
    pack = SimpleNamespace(trial_id="p0", config=tune_config(
        settings, Pack([GridPoint("relu", 0.01, 0.0, s) for s in range(2)])))
    return [*alone, pack]


def _epoch(logger, trial, epoch: int):
    if "pack" in trial.config["point"]:
        result = {"members": {"0": {"epoch": epoch, "train_loss": 1.0 / epoch}, "1": {"epoch": epoch, "train_loss": 2.0}}}
    else:
        result = {"epoch": epoch, "train_loss": 1.0 / epoch}
    logger.on_trial_result(0, [], trial, {**result, "node_id": "n1"})


def test_a_new_sweep_writes_a_run_per_member_without_searching_the_store(sweep):
    runs, exp, parent = sweep
    logger = MLflowTrialLogger(runs, exp, parent, {"sweep_id": SWEEP_ID})
    trials = _trials()
    for trial in trials:
        logger.on_trial_start(0, [], trial)
        _epoch(logger, trial, 1)
        logger.on_trial_complete(0, [], trial)
    logger.on_experiment_end(trials)  # (Tune's end of the sweep: the writer thread has sent everything)
    assert CountingStore.searches == 0
    table = runs.trial_runs(SWEEP_ID)
    assert len(table) == 5 and set(table["status"]) == {"FINISHED"}
    assert sorted(runs.trial_runs_by_trial_id(SWEEP_ID)) == ["p0/0", "p0/1", "t0", "t1", "t2"]


@pytest.mark.parametrize("how", ["restored by Tune (unpickled)", "a new logger for the resumed sweep"])
def test_a_continuing_driver_finds_the_dead_ones_runs_in_one_search(sweep, how):
    runs, exp, parent = sweep
    trials = _trials()
    dead = MLflowTrialLogger(runs, exp, parent, {"sweep_id": SWEEP_ID})
    saved = pickle.dumps(dead)  # Tune's experiment state, saved before any trial started
    for trial in trials[2:]:  # the dead driver had started t2 and the pack, and logged an epoch
        dead.on_trial_start(0, [], trial)
        _epoch(dead, trial, 1)
    dead.outbox.flush(wait=True)  # (what it had sent before it died)
    before = runs.trial_runs_by_trial_id(SWEEP_ID)
    CountingStore.searches = 0

    logger = pickle.loads(saved) if how.startswith("restored") else MLflowTrialLogger(
        runs, exp, parent, {"sweep_id": SWEEP_ID}, resuming=True)
    for trial in trials:
        logger.on_trial_start(0, [], trial)
        _epoch(logger, trial, 1)  # epoch 1 again: not logged twice
        _epoch(logger, trial, 2)
        logger.on_trial_complete(0, [], trial)
    logger.on_experiment_end(trials)
    assert CountingStore.searches == 1
    after = runs.trial_runs_by_trial_id(SWEEP_ID)
    assert len(runs.trial_runs(SWEEP_ID)) == 5  # a run per member, none opened twice
    assert len(before) == 3 and all(after[t][0] == before[t][0] for t in before)  # the dead driver's runs, continued
    for run_id, _ in after.values():
        history = runs.client.get_metric_history(run_id, "train_loss")
        assert sorted(m.step for m in history) == [1, 2]


class WriteCountingStore(CountingStore):
    """A real store that also counts its writes of metrics: MLflow's log_batch calls, or the
    transactions of its direct SQL writer (service.runs.sql_writes)."""

    batches = 0

    def __init__(self, uri: str):
        super().__init__(uri)
        self.client.log_batch = self._counted(self.client.log_batch)
        if self.sql_writer is not None:
            self.sql_writer.write = self._counted(self.sql_writer.write)

    def _counted(self, write):
        def counted(*args, **kwargs):
            type(self).batches += 1
            return write(*args, **kwargs)

        return counted

    def impatient(self):  # (the logger writes through its impatient twin: counted too)
        return self


# 4 Tune trials (3 alone, a pack of 2), 5 epochs each. Batched, what waits goes out at each trial's
# end: one write per run (MLflow's log_batch), or one transaction for all of a trial's runs (SQL).
# Unbatched, each epoch of each trial goes out as it comes.
@pytest.mark.parametrize("writer, flush_s, writes", [("log_batch", 60.0, 5), ("log_batch", 0.0, 25),
                                                     ("sql", 60.0, 4), ("sql", 0.0, 20)])
def test_epochs_go_out_in_one_write_per_run_when_batched(tmp_path, monkeypatch, writer, flush_s, writes):
    monkeypatch.setenv("ACTSWEEP_DIRECT_SQL_WRITES", str(writer == "sql").lower())
    runs = WriteCountingStore(migrated_mlflow_store(tmp_path))
    exp = runs.experiment_id("actsweep/logger", tmp_path / "artifacts")
    parent = runs.start_sweep(exp, "logger", Provenance(SWEEP_ID, "logger"), {}, {})
    logger = MLflowTrialLogger(runs, exp, parent, {"sweep_id": SWEEP_ID}, flush_s=flush_s)
    trials = _trials()
    for trial in trials:
        logger.on_trial_start(0, [], trial)
    WriteCountingStore.batches = 0
    for epoch in range(1, 6):
        for trial in trials:
            _epoch(logger, trial, epoch)
            logger.on_step_end(epoch, trials)
    if flush_s:  # nothing written yet: the epochs wait for the flush (or the trial's end)
        logger.outbox.flush(wait=True)  # (the runs' creation, sent by the writer thread)
        assert WriteCountingStore.batches == 0
        assert runs.client.get_metric_history(runs.trial_runs_by_trial_id(SWEEP_ID)["t0"][0], "train_loss") == []
    for trial in trials:
        logger.on_trial_complete(0, [], trial)
    logger.on_experiment_end(trials)
    assert (runs.sql_writer is not None) == (writer == "sql")
    assert WriteCountingStore.batches == writes
    for trial_id, (run_id, tags) in runs.trial_runs_by_trial_id(SWEEP_ID).items():
        history = runs.client.get_metric_history(run_id, "train_loss")
        assert sorted(m.step for m in history) == [1, 2, 3, 4, 5], trial_id  # every epoch, once
        assert tags.get("node_id") == "n1"
    assert set(runs.trial_runs(SWEEP_ID)["status"]) == {"FINISHED"}


def test_many_epochs_are_cut_at_mlflows_limit_of_a_call(tmp_path):
    runs = WriteCountingStore(migrated_mlflow_store(tmp_path))
    exp = runs.experiment_id("actsweep/logger", tmp_path / "artifacts")
    parent = runs.start_sweep(exp, "logger", Provenance(SWEEP_ID, "logger"), {}, {})
    (trial,) = _trials()[:1]
    run_id = runs.create_trial_run(exp, parent, {"sweep_id": SWEEP_ID, "trial_id": "t0"}, GridPoint("gelu", 0.01, 0.0, 0))
    WriteCountingStore.batches = 0
    epochs = [(e, {f"m{k}": e + k for k in range(20)}, {"node_id": f"n{e}"}, 1000 + e) for e in range(1, 61)]
    runs.log_run_batch(run_id, epochs)  # 1,200 metrics and a tag: two calls
    assert WriteCountingStore.batches == 2
    run = runs.client.get_run(run_id)
    assert run.data.tags["node_id"] == "n60"  # the last epoch's value of a tag
    assert [m.value for m in runs.client.get_metric_history(run_id, "m19")] == [e + 19.0 for e in range(1, 61)]


class SlowStore(WriteCountingStore):
    """A real store whose writes of epochs take ``delay_s`` longer (a slowness injected on purpose:
    a store slower than the training)."""

    delay_s = 0.3

    def log_runs(self, *args, **kwargs):
        time.sleep(self.delay_s)
        return super().log_runs(*args, **kwargs)


@pytest.mark.parametrize("store", [WriteCountingStore, SlowStore])
def test_a_run_never_holds_more_unwritten_epochs_than_a_resumed_trial_reports_again(tmp_path, store):
    """A dead driver loses what it had not written; a resumed trial reports its last REPORTED_AGAIN
    epochs again, so fewer than REPORTED_AGAIN of a run's epochs wait, in the logger and in its
    outbox, even where the store is slower than the trial (then the trial waits for the writer)."""
    from workers.trial import REPORTED_AGAIN

    runs = store(migrated_mlflow_store(tmp_path))
    exp = runs.experiment_id("actsweep/logger", tmp_path / "artifacts")
    parent = runs.start_sweep(exp, "logger", Provenance(SWEEP_ID, "logger"), {}, {})
    logger = MLflowTrialLogger(runs, exp, parent, {"sweep_id": SWEEP_ID}, flush_s=3600.0)
    (trial,) = _trials()[:1]
    logger.on_trial_start(0, [trial], trial)
    store.batches = 0
    key = (trial.trial_id, 0)
    for epoch in range(1, 3 * REPORTED_AGAIN):
        _epoch(logger, trial, epoch)
        assert len(logger.epochs.get(key, [])) + logger.outbox.unsent(key) <= REPORTED_AGAIN - 1
    logger.outbox.flush(wait=True)
    run_id = runs.trial_runs_by_trial_id(SWEEP_ID)["t0"][0]
    written = sorted(m.step for m in runs.client.get_metric_history(run_id, "train_loss"))
    assert written == list(range(1, len(written) + 1)) and len(written) >= 3 * REPORTED_AGAIN - REPORTED_AGAIN
    assert store.batches == 3  # every REPORTED_AGAIN - 1 epochs, not one write per epoch


def test_the_tune_loop_does_not_wait_on_a_slow_store(tmp_path):
    """The writes go out from the outbox's writer thread: reporting an epoch of five runs to a store
    that takes 0.3 s a write returns at once, and every epoch arrives, in order, by the end."""
    runs = SlowStore(migrated_mlflow_store(tmp_path))
    exp = runs.experiment_id("actsweep/logger", tmp_path / "artifacts")
    parent = runs.start_sweep(exp, "logger", Provenance(SWEEP_ID, "logger"), {}, {})
    logger = MLflowTrialLogger(runs, exp, parent, {"sweep_id": SWEEP_ID}, flush_s=0.0)  # a write per epoch
    trials = _trials()
    for trial in trials:
        logger.on_trial_start(0, [], trial)
    started = time.monotonic()
    for epoch in (1, 2):
        for trial in trials:
            _epoch(logger, trial, epoch)
    assert time.monotonic() - started < SlowStore.delay_s  # 10 writes queued, none waited on
    assert logger.outbox.unsent(("t0", 0)) >= 1
    for trial in trials:
        logger.on_trial_complete(0, [], trial)
    logger.on_experiment_end(trials)
    for trial_id, (run_id, _tags) in runs.trial_runs_by_trial_id(SWEEP_ID).items():
        history = runs.client.get_metric_history(run_id, "train_loss")
        assert sorted(m.step for m in history) == [1, 2], trial_id
    assert set(runs.trial_runs(SWEEP_ID)["status"]) == {"FINISHED"}


def test_a_packs_members_that_come_due_together_go_out_in_one_write(tmp_path):
    """A pack's members reach REPORTED_AGAIN - 1 unwritten epochs on the same result: their epochs
    go to the store in one write (a transaction for all of them), not a write per member."""
    from workers.trial import REPORTED_AGAIN

    runs = WriteCountingStore(migrated_mlflow_store(tmp_path))
    assert runs.sql_writer is not None  # (the default for a database store)
    exp = runs.experiment_id("actsweep/logger", tmp_path / "artifacts")
    parent = runs.start_sweep(exp, "logger", Provenance(SWEEP_ID, "logger"), {}, {})
    logger = MLflowTrialLogger(runs, exp, parent, {"sweep_id": SWEEP_ID}, flush_s=3600.0)
    pack = _trials()[-1]
    logger.on_trial_start(0, [pack], pack)
    WriteCountingStore.batches = 0
    for epoch in range(1, 2 * (REPORTED_AGAIN - 1) + 1):
        _epoch(logger, pack, epoch)
    logger.outbox.flush(wait=True)
    assert WriteCountingStore.batches == 2
    for member in ("p0/0", "p0/1"):
        run_id = runs.trial_runs_by_trial_id(SWEEP_ID)[member][0]
        assert len(runs.client.get_metric_history(run_id, "train_loss")) == 2 * (REPORTED_AGAIN - 1)
