"""Each trial's state and last metrics, written to the sweep record by a Tune callback.

A module of its own (not the driver's ``__main__``) so that Tune pickles the callback by reference.
"""
from __future__ import annotations

from functools import cached_property

from service.patience import Outbox
from service.records import SweepStore, _database_away
from service.runs.logger import PicklableCallback, member_trial_id
from service.runs.store import RunStore
from workers.trial import GridPoint, member_results, members


class TrialStateRecorder(PicklableCallback):
    """Writes each trial's state and last metrics to the sweep record."""

    transient = ("store", "mlflow_logger", "_outbox")
    mlflow_logger = None  # the sweep's MLflowTrialLogger (run_sweep sets it): its run ids, without a search per trial
    _outbox: Outbox | None = None

    def __init__(self, database_url: str, runs: RunStore, sweep_id: str, positions: dict[tuple, int],
                 patience_s: float = 0.0):
        self.database_url = database_url
        self.patience_s = patience_s  # how long a write waits out an outage of the database
        self.runs = runs
        self.sweep_id = sweep_id
        self.positions = positions
        self.diverged: set[str] = set()
        self.run_id_recorded: set[str] = set()  # members whose record has their MLflow run id

    @cached_property
    def store(self) -> SweepStore:
        return SweepStore(self.database_url)

    # While the sweep database is away, the trials' states wait in an outbox and are written, in
    # order, once it answers: the Tune loop and the trials go on (ACTSWEEP_OUTAGE_PATIENCE_S at most).
    @property
    def outbox(self) -> Outbox:
        if self._outbox is None:
            self._outbox = Outbox(_database_away, self.patience_s)
        return self._outbox

    def _mlflow_run_id(self, trial, index: int) -> dict:
        """{"mlflow_run_id": ...} once the member's run exists and its record lacks it, else {}."""
        member = member_trial_id(trial, index)
        if member in self.run_id_recorded:
            return {}
        # MLflowTrialLogger runs before this callback and creates the trial's runs (once MLflow answers)
        if self.mlflow_logger is not None and trial.trial_id in self.mlflow_logger.run_ids:
            run_id = self.mlflow_logger.run_ids[trial.trial_id][index]
        else:
            found = self.runs.trial_run(self.sweep_id, member)  # (restored without it)
            run_id = found[0] if found else None
        if run_id is None:
            return {}
        self.run_id_recorded.add(member)
        return {"mlflow_run_id": run_id}

    def _update(self, trial, index: int, **fields):
        cfg = members(trial.config)[index]
        key = GridPoint.of(cfg).key()
        # retraining runs, and the trials of an lr search, are in MLflow but not in the grid's list
        if cfg.get("phase", "grid") != "grid" or key not in self.positions:
            return
        self.outbox.put(self.store.update_trial, self.sweep_id, self.positions[key], fields)

    def on_trial_start(self, iteration, trials, trial, **info):
        for index in range(len(members(trial.config))):
            self._update(trial, index, state="running", **self._mlflow_run_id(trial, index))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        for index, values in member_results(result):
            metrics = {k: v for k, v in values.items() if k.endswith(("_loss", "_error", "_eval")) or k == "diverged"}
            diverged = bool(values.get("diverged"))
            if diverged:  # a pack member stops there while its pack-mates go on
                self.diverged.add(member_trial_id(trial, index))
            self._update(trial, index, epoch=int(values["epoch"]), metrics=metrics,
                         **({"state": "diverged"} if diverged else {}), **self._mlflow_run_id(trial, index))

    def on_trial_complete(self, iteration, trials, trial, **info):
        for index in range(len(members(trial.config))):
            if member_trial_id(trial, index) not in self.diverged:
                self._update(trial, index, state="succeeded")

    def on_trial_error(self, iteration, trials, trial, **info):
        for index in range(len(members(trial.config))):
            self._update(trial, index, state="failed")

    def on_experiment_end(self, trials, **info):
        self.outbox.flush(wait=True)  # every state written before the driver records the sweep's end
