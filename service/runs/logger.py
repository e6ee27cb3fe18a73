"""MLflow logging of a sweep's trials: a Tune callback in the sweep's driver.

Runs are written from the driver, so trial workers never need to reach the tracking store, the
SQLite default has a single writer, and metrics go out in batches: every ACTSWEEP_METRICS_FLUSH_S
seconds, the epochs every run reported since its last write, in one transaction where the store is a
database (service.runs.sql_writes), else in one ``log_batch`` call per run. The writes are sent by
the outbox's writer thread, off Tune's loop: a trial's next epoch does not wait for its last one's
write (Tune's function trainables wait, after each report, until the loop has taken it).
"""
from __future__ import annotations

import time

from ray import tune

from service.patience import Outbox
from service.runs.store import (DIVERGED, EXECUTION, GPUS, NODE_ID, NODE_IDS, PACK_ID, PACK_SIZE, PHASE, RESUMED_FROM_EPOCH,
                                STEP_MODE, SWEEP_ID, TRIAL_ID, TRIAL_KEY, DatasetRef, RunStore, RunsUnavailable, _now_ms)
from workers.trial import KEY_FIELD, REPORTED_AGAIN, GridPoint, is_pack, member_results, members, mlflow_params

# What Tune adds to every result; everything else numeric that a trial reports is a metric.
TUNE_KEYS = frozenset({"epoch", "timestamp", "training_iteration", "time_this_iter_s", "time_total_s", "pid",
                       "time_since_restore", "iterations_since_restore", "done", "trial_id", "date", "hostname",
                       "node_ip", "config", "checkpoint_dir_name", "should_checkpoint", "experiment_tag",
                       GPUS})  # (GPUS: a tag, as the node)


class PicklableCallback(tune.Callback):
    """A Tune callback whose clients (locks, connections) are made on first use and left out when
    Tune pickles its callbacks with the experiment state; ``transient`` names those attributes."""

    transient: tuple[str, ...] = ()

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in self.transient}


def member_trial_id(trial, index: int) -> str:
    """The id a grid point's run is tagged with: the Tune trial id, or ``<pack trial id>/<member>``."""
    return f"{trial.trial_id}/{index}" if is_pack(trial.config) else trial.trial_id


class MLflowTrialLogger(PicklableCallback):
    """Creates each grid point's child run on start and logs its metrics after every epoch. A fused
    pack's members get a run each.

    Epochs are written in batches: what the trials report is kept per run and sent every
    ``flush_s`` seconds, when a run has REPORTED_AGAIN - 1 epochs waiting (what a trial resumed
    after its driver died reports again: workers.checkpoints), when a trial ends, and at the end of
    the sweep: all runs' pending epochs in one write (RunStore.log_runs: one transaction on a
    database, one ``log_batch`` per run on a server). One write costs about as much for 50 epochs as
    for one (a transaction, or an HTTP request), so a fast engine's epochs do not queue behind their
    writes (docs/load.md). ``flush_s`` 0 writes every epoch as it comes."""

    # A driver that continues a dead one's sweep (restored by Tune, with this callback unpickled)
    # finds the runs its trials already have in one search of the sweep's runs, on the first
    # trial's start; a search per trial would cost more as the store grows.
    # (epochs not yet written are lost with a dead driver, as its outbox is: a continuing driver asks
    # the store which epochs each run has, and the trials report their last epochs again)
    transient = ("existing", "_outbox", "_now", "_epochs", "_params", "_flushed_at")
    existing: dict[str, tuple[str, dict[str, str]]] | None = None
    _outbox: Outbox | None = None
    _now: RunStore | None = None
    _epochs: dict | None = None
    _params: dict | None = None
    _flushed_at = 0.0

    def __init__(self, runs: RunStore, experiment_id: str, parent_run_id: str, sweep_tags: dict[str, str],
                 resuming: bool = False, dataset: DatasetRef | None = None, flush_s: float = 1.0):
        self.runs = runs
        self.flush_s = flush_s
        self._flushed_at = time.monotonic()
        self.dataset = dataset  # logged as each run's input (MLflow's Dataset column)
        if not resuming:  # a new sweep has no runs yet: nothing to look up (see `existing`)
            self.existing = {}
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.sweep_tags = sweep_tags
        self.run_ids: dict[str, list[str | None]] = {}  # Tune trial id → MLflow run id of each member (None: not made yet)
        self.ended: set[str] = set()
        self.logged_epochs: dict[str, int] = {}  # member trial id → the last epoch logged (by this driver or a dead one)
        self.nodes: dict[str, list[str]] = {}  # Tune trial id → the Ray nodes it has run on, in order

    # While MLflow is away, what the trials report waits in an outbox and is sent, in order, once it
    # answers (with backoff): the Tune loop goes on, and so do the trials. The end of the sweep waits
    # until everything is sent (ACTSWEEP_OUTAGE_PATIENCE_S at most).
    @property
    def outbox(self) -> Outbox:
        if self._outbox is None:
            self._outbox = Outbox(lambda exc: isinstance(exc, RunsUnavailable), self.runs.patience_s)
        return self._outbox

    @property
    def now(self) -> RunStore:
        if self._now is None:
            self._now = self.runs.impatient()
        return self._now

    def on_trial_start(self, iteration, trials, trial, **info):
        if trial.trial_id in self.run_ids:  # a retried trial keeps its runs
            self.ended.discard(trial.trial_id)
            return
        configs = members(trial.config)
        self.run_ids[trial.trial_id] = [self._existing_run(trial, i) for i in range(len(configs))]
        for i, cfg in enumerate(configs):
            # its params go with its first epochs (one write); a continued run's again (the same values:
            # MLflow keeps one), as the dead driver may have died before sending them
            self.params[(trial.trial_id, i)] = mlflow_params(cfg)
            if self.run_ids[trial.trial_id][i] is None:
                self._create_now_or_later(trial, i, cfg, len(configs))
                if self.dataset is not None:
                    self.outbox.put(self._send, "log_dataset", trial.trial_id, i, self.dataset)

    def _existing_run(self, trial, index: int) -> str | None:
        """The run of a trial that a dead driver had started: a driver restored from Tune's
        experiment state (Tuner.restore) continues its runs instead of opening new ones."""
        if self.existing is None:
            self.existing = self.runs.trial_runs_by_trial_id(self.sweep_tags[SWEEP_ID])
        found = self.existing.get(member_trial_id(trial, index))
        if found is None:
            return None
        run_id, tags = found
        last_epoch = self.runs.last_epoch(run_id)
        if NODE_IDS in tags:
            self.nodes[trial.trial_id] = tags[NODE_IDS].split(",")
        self.logged_epochs[member_trial_id(trial, index)] = last_epoch
        return run_id

    def _create_now_or_later(self, trial, index: int, cfg: dict, pack_size: int) -> None:
        # A run is made on Tune's loop, not by the writer thread, so that the trial's record names it
        # from the trial's start (TrialStateRecorder reads run_ids). No write of the run can be ahead
        # of it. While the store is away it waits in the outbox, and the run's writes queue behind it.
        if self.outbox.away_since is None:
            try:
                return self._create_run(trial, index, cfg, pack_size)
            except RunsUnavailable:
                pass
        self.outbox.put(self._create_run, trial, index, cfg, pack_size)

    def _create_run(self, trial, index: int, cfg: dict, pack_size: int) -> None:
        tags = {**self.sweep_tags, PHASE: cfg.get("phase", "grid"), TRIAL_ID: member_trial_id(trial, index)}
        if is_pack(trial.config):
            tags.update({EXECUTION: "fused", PACK_ID: trial.trial_id, PACK_SIZE: str(pack_size)})
        if KEY_FIELD in cfg:  # service.runs.cache finds finished trials by it
            tags[TRIAL_KEY] = cfg[KEY_FIELD]
        self.run_ids[trial.trial_id][index] = self.now.create_trial_run(self.experiment_id, self.parent_run_id, tags,
                                                                        GridPoint.of(cfg))

    def _send(self, method: str, trial_id: str, index: int, *args) -> None:
        getattr(self.now, method)(self.run_ids[trial_id][index], *args)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        tags = {}
        nodes = self.nodes.setdefault(trial.trial_id, [])
        if result.get("node_id") and result["node_id"] not in nodes[-1:]:  # first result, or moved to another node
            nodes.append(result["node_id"])
            tags.update({NODE_ID: nodes[-1], NODE_IDS: ",".join(nodes), GPUS: f"{result.get('gpus', 0.0):g}"})
        resumed = {}
        if "resumed_from_epoch" in result:  # retried after a failure, or restored with its sweep
            resumed = {"resumed_from_epoch": result["resumed_from_epoch"]}  # a pack's members get it too
            tags[RESUMED_FROM_EPOCH] = str(result["resumed_from_epoch"])
        due, reported = False, []
        for index, values in member_results(result):
            member, step = member_trial_id(trial, index), int(values["epoch"])
            metrics = {}
            if step > self.logged_epochs.get(member, 0):  # not an epoch logged already (reported again after
                self.logged_epochs[member] = step          # a retry, or logged by a driver that died)
                metrics = {k: v for k, v in {**values, **resumed}.items()
                           if k not in TUNE_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)}
            member_tags = {DIVERGED: "true"} if values.get("diverged") else {}
            if metrics and values.get("step_mode"):  # (a string: a tag, not a metric)
                member_tags[STEP_MODE] = values["step_mode"]
            if metrics or tags:  # (one timestamp, taken now: a write sent again later is the same write)
                key = (trial.trial_id, index)
                pending = self.epochs.setdefault(key, [])
                # What a resumed trial reports again must cover what a dead driver had not written:
                # fewer than REPORTED_AGAIN epochs of a run wait, here and in the outbox. Where the
                # writer lags that far behind a run, its trial waits for it (a store slower than the
                # training); while the store is away it does not.
                if self._unwritten(key) >= REPORTED_AGAIN - 1:
                    self.outbox.wait_for(key)
                pending.append((step, metrics, {**tags, **member_tags}, _now_ms()))
                reported.append(key)
                due = due or self._unwritten(key) >= REPORTED_AGAIN - 1
        if time.monotonic() - self._flushed_at >= self.flush_s:
            self._write_epochs()
        elif due:  # (a pack's members come due together: one write for them all, not one per member)
            self._write([(key, self.epochs.pop(key), None) for key in reported])

    def on_step_end(self, iteration, trials, **info):  # (Tune's loop, between results: what waits is written)
        if self.epochs and time.monotonic() - self._flushed_at >= self.flush_s:
            self._write_epochs()

    @property
    def epochs(self) -> dict[tuple[str, int], list]:
        """(Tune trial id, member) → the epochs reported and not yet written, in order."""
        if self._epochs is None:
            self._epochs = {}
        return self._epochs

    @property
    def params(self) -> dict[tuple[str, int], dict[str, str]]:
        """(Tune trial id, member) → the run's params, until they go out with its first write."""
        if self._params is None:
            self._params = {}
        return self._params

    def _unwritten(self, key: tuple[str, int]) -> int:
        return len(self.epochs.get(key, ())) + self.outbox.unsent(key)

    def _write_epochs(self) -> None:
        """Every run's pending epochs to the outbox, as one write (RunStore.log_runs)."""
        self._write([(key, self.epochs.pop(key), None) for key in list(self.epochs)])
        self._flushed_at = time.monotonic()

    def _write(self, runs: list[tuple[tuple[str, int], list, str | None]]) -> None:
        """One write of several runs, each (key, its pending epochs, its signature key or None), with
        the params of those whose params are not sent yet."""
        batch = [(key, epochs, self.params.pop(key, None), sign_key) for key, epochs, sign_key in runs]
        batch = [run for run in batch if run[1] or run[2] or run[3]]
        if batch:
            self.outbox.put(self._send_runs, batch, weights={key: len(epochs) for key, epochs, _, _ in batch})

    def _send_runs(self, batch: list) -> None:
        self.now.log_runs([self.now.run_write(self.run_ids[trial_id][index], epochs, params, sign_key)
                           for (trial_id, index), epochs, params, sign_key in batch])

    def _send_end(self, trial_id: str, status: str) -> None:
        self.now.end_runs(self.run_ids[trial_id], status)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._end(trial, "FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._end(trial, "FAILED")

    def on_experiment_end(self, trials, **info):
        self._write_epochs()
        for trial in trials:  # stopped by a cancel: what was logged stays, the run is marked KILLED
            self._end(trial, "KILLED")
        self.flush()  # every epoch in MLflow before the sweep goes on (or ends)

    def flush(self) -> None:
        """Every epoch reported so far written now; returns once the store has them."""
        self._write_epochs()
        self.outbox.flush(wait=True)

    def _end(self, trial, status: str):
        if trial.trial_id in self.run_ids and trial.trial_id not in self.ended:
            # each member's last epochs, and, if the trial cache may reuse it, the store vouching for
            # it, in one write before their end (a run is reused only once FINISHED: service.runs.cache)
            self._write([((trial.trial_id, index), self.epochs.pop((trial.trial_id, index), []),
                          cfg[KEY_FIELD] if status == "FINISHED" and KEY_FIELD in cfg else None)
                         for index, cfg in enumerate(members(trial.config))])
            self.outbox.put(self._send_end, trial.trial_id, status)
            self.ended.add(trial.trial_id)
