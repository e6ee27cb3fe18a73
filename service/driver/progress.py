"""A live progress display of a running sweep (rich), driven by Tune's callback hooks."""
from __future__ import annotations

import time

from ray import tune
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from service.runs.logger import member_trial_id
from workers.trial import member_results, members

LOG_EVERY_S = 5.0  # where no terminal shows the bars: a progress line at most this often


class LiveProgress(tune.Callback):
    """Two bars (trials finished, trial-epochs done) and a line per finished trial (a fused
    pack's members count as the trials they are)."""

    def __init__(self, trials: int, epochs: int, console: Console):
        self.console = console
        self.total = trials
        self.epochs = epochs
        self.progress = Progress(TextColumn("{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=console)
        self.trials = self.progress.add_task("trials", total=trials, status="")
        self.epoch_task = self.progress.add_task("trial-epochs", total=trials * epochs, status="")
        self.seen: dict[str, int] = {}
        self.running: set[str] = set()
        self.done = 0
        # when the first trial started and its first epoch came back (time.time()): the fixed start
        self.first_start: float | None = None
        self.first_epoch: float | None = None
        self.last_line = 0.0  # when the last progress line went to a console that is no terminal

    def __getstate__(self):  # Tune pickles its callbacks; a display holds locks and a terminal
        return {"total": self.total, "epochs": self.epochs}

    def __setstate__(self, state):
        self.__init__(state["total"], state["epochs"], Console(stderr=True))

    def setup(self, **info):
        self.progress.start()

    def _status(self):
        self.progress.update(self.trials, status=f"running {len(self.running)}")

    def on_trial_start(self, iteration, trials, trial, **info):
        self.first_start = self.first_start or time.time()
        for index in range(len(members(trial.config))):
            self.running.add(member_trial_id(trial, index))
        if self.done + len(self.running) > self.total:  # a second phase (retraining on all data)
            self.total = self.done + len(self.running)
            self.progress.update(self.trials, total=self.total)
            self.progress.update(self.epoch_task, total=self.total * self.epochs)
        self._status()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        configs = members(trial.config)
        self.first_epoch = self.first_epoch or time.time()
        for index, values in member_results(result):
            member = member_trial_id(trial, index)
            if int(values["epoch"]) <= self.seen.get(member, 0):  # reported again after a retry
                continue
            self.seen[member] = int(values["epoch"])
            self.progress.advance(self.epoch_task)
            if values.get("diverged"):  # a pack member leaves its pack; the others go on
                self._finish(member_trial_id(trial, index), configs[index], values, "diverged")
        self._log_line(result)

    def _log_line(self, result: dict) -> None:
        # Where no terminal shows the bars (a log file, CI), a line every LOG_EVERY_S seconds at
        # most: how far the sweep is, and how long its last epoch took to train and evaluate.
        if self.console.is_terminal or time.time() - self.last_line < LOG_EVERY_S:
            return
        self.last_line = time.time()
        seconds = next((v.get("epoch_seconds") for _, v in member_results(result)), None)
        done = int(self.progress.tasks[self.epoch_task].completed)
        took = f", last epoch {seconds:.2f} s to train and evaluate" if seconds is not None else ""
        self.console.print(f"{time.strftime('%H:%M:%S')} trial-epochs {done}/{self.total * self.epochs}, "
                           f"{len(self.running)} trials running{took}")

    def _finish(self, member: str, cfg: dict, last: dict, outcome: str):
        if member not in self.running:
            return
        self.running.discard(member)
        self.progress.advance(self.epoch_task, self.epochs - self.seen.get(member, 0))
        self.progress.advance(self.trials)
        self.done += 1
        if cfg.get("task") == "reconstruct":  # an autoencoder's error is its loss (MSE)
            detail = f"test_loss {last['test_loss']:.5f}" if "test_loss" in last else ""
        else:
            detail = f"test_error {100 * last['test_error']:.2f}%" if "test_error" in last else ""
        self.progress.console.print(f"{time.strftime('%H:%M:%S')} [{self.done}/{self.total}] {outcome:<8} "
                                    f"{cfg['activation']:<9} lr={cfg['lr']:<7g} dropout={cfg['dropout']:<4g} "
                                    f"seed={cfg['seed']}  {detail}")
        self._status()

    def _finish_trial(self, trial, outcome: str):
        last = dict(member_results(trial.last_result or {}))
        for index, cfg in enumerate(members(trial.config)):
            values = last.get(index, {})
            self._finish(member_trial_id(trial, index), cfg, values,
                         "diverged" if values.get("diverged") and outcome == "done" else outcome)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._finish_trial(trial, "done")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._finish_trial(trial, "FAILED")

    def on_experiment_end(self, trials, **info):
        self.progress.stop()

    def round(self, state: dict, points: list) -> None:
        """until_decided: after a look, its seeds and the claims still open; the next round's trials
        join the bars."""
        self.progress.start()
        decided = ", ".join(f"{c}: {v}" for c, v in state["decided"].items()) or "none"
        self.progress.console.print(
            f"{time.strftime('%H:%M:%S')} look {state['look']} at {state['seeds']} seeds (budget "
            f"{state['max_seeds']}): {len(state['open'])} claims open; decided: {decided}")
        if points:
            self.progress.console.print(f"{time.strftime('%H:%M:%S')} round {state['look']}: {len(points)} more trials "
                                        f"for {', '.join(f'{a} (dropout {d:g})' for a, d in state['pairs'])}")
            self.total += len(points)
            self.progress.update(self.trials, total=self.total)
            self.progress.update(self.epoch_task, total=self.total * self.epochs)

    def reused(self, reused) -> None:
        """Trials not trained because an identical one had finished (service.runs.cache)."""
        self.progress.start()  # idempotent; the cache is consulted before Tune calls setup()
        for trial in reused:
            self.done += 1
            self.progress.advance(self.trials)
            self.progress.advance(self.epoch_task, self.epochs)
            p = trial.point
            self.progress.console.print(f"{time.strftime('%H:%M:%S')} [{self.done}/{self.total}] reused   "
                                        f"{p.activation:<9} lr={p.lr:<7g} dropout={p.dropout:<4g} "
                                        f"seed={p.seed}  from run {trial.source_run_id} (--rerun trains it again)")
