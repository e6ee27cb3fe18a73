"""MLflow logging of a sweep: one parent run per sweep, one child run per trial.

Runs are written from the sweep driver by a Tune callback, so trial workers never need to reach
the tracking store, the SQLite default has a single writer, and metrics go out in one
``log_batch`` call per epoch.
"""
from __future__ import annotations

import time
from functools import cached_property
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from ray import tune

from workers.trainable import member_results, members

# What Tune adds to every result; everything else numeric that a trial reports is a metric.
TUNE_KEYS = frozenset({"epoch", "timestamp", "training_iteration", "time_this_iter_s", "time_total_s", "pid",
                       "time_since_restore", "iterations_since_restore", "done", "trial_id", "date", "hostname",
                       "node_ip", "config", "checkpoint_dir_name", "should_checkpoint", "experiment_tag"})
GRID_TAGS = ("activation", "lr", "dropout", "seed")


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def experiment_id(client: MlflowClient, name: str, artifact_root: Path | None) -> str:
    """The id of MLflow experiment ``name``, created on first use."""
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    location = (artifact_root / name.replace("/", "_")).as_uri() if artifact_root else None
    return client.create_experiment(name, artifact_location=location)


def _now_ms() -> int:
    return int(time.time() * 1000)


class PicklableCallback(tune.Callback):
    """A Tune callback whose clients (locks, connections) are made on first use and left out when
    Tune pickles its callbacks with the experiment state; ``transient`` names those attributes."""

    transient: tuple[str, ...] = ()

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in self.transient}


def member_trial_id(trial, index: int) -> str:
    """The id a grid point's run is tagged with: the Tune trial id, or ``<pack trial id>/<member>``."""
    return f"{trial.trial_id}/{index}" if "pack" in trial.config.get("point", {}) else trial.trial_id


class MLflowTrialLogger(PicklableCallback):
    """Creates each grid point's child run on start and logs its metrics after every epoch
    (one ``log_batch`` per run and epoch). A fused pack's members get a run each."""

    transient = ("client",)

    def __init__(self, tracking_uri: str, experiment_id: str, parent_run_id: str, sweep_tags: dict[str, str]):
        self.tracking_uri = tracking_uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.sweep_tags = sweep_tags
        self.run_ids: dict[str, list[str]] = {}  # Tune trial id → MLflow run id of each member
        self.ended: set[str] = set()
        self.logged_epochs: dict[str, int] = {}  # run id → the last epoch logged (by this driver or a dead one)
        self.nodes: dict[str, list[str]] = {}  # Tune trial id → the Ray nodes it has run on, in order

    @cached_property
    def client(self) -> MlflowClient:
        return MlflowClient(self.tracking_uri)

    def on_trial_start(self, iteration, trials, trial, **info):
        if trial.trial_id in self.run_ids:  # a retried trial keeps its runs
            self.ended.discard(trial.trial_id)
            return
        configs = members(trial.config)
        self.run_ids[trial.trial_id] = [self._existing_run(trial, i) or self._create_run(trial, i, cfg, len(configs))
                                        for i, cfg in enumerate(configs)]

    def _existing_run(self, trial, index: int) -> str | None:
        """The run of a trial that a dead driver had started: a driver restored from Tune's
        experiment state (Tuner.restore) continues its runs instead of opening new ones."""
        query = f"tags.sweep_id = '{self.sweep_tags['sweep_id']}' and tags.trial_id = '{member_trial_id(trial, index)}'"
        found = self.client.search_runs([self.experiment_id], query, max_results=1)
        if not found:
            return None
        run_id = found[0].info.run_id
        if "node_ids" in found[0].data.tags:
            self.nodes[trial.trial_id] = found[0].data.tags["node_ids"].split(",")
        history = self.client.get_metric_history(run_id, "train_loss")
        self.logged_epochs[run_id] = max((m.step for m in history), default=0)
        return run_id

    def _create_run(self, trial, index: int, cfg: dict, pack_size: int) -> str:
        tags = {**self.sweep_tags, "mlflow.parentRunId": self.parent_run_id, "role": "trial",
                "phase": cfg.get("phase", "grid"), "trial_id": member_trial_id(trial, index),
                **{k: str(cfg[k]) for k in GRID_TAGS}}
        if "pack" in trial.config.get("point", {}):
            tags.update({"execution": "fused", "pack_id": trial.trial_id, "pack_size": str(pack_size)})
        if "trial_key" in cfg:  # service.trial_cache finds finished trials by it
            tags["trial_key"] = cfg["trial_key"]
        name = f"{cfg['activation']}-lr{cfg['lr']:g}-do{cfg['dropout']:g}-s{cfg['seed']}"
        run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
        params = [Param(k, str(v)) for k, v in flatten({k: v for k, v in cfg.items() if k not in ("point", "trial_key", "checkpoint_root")}).items()]
        self.client.log_batch(run.info.run_id, params=params)
        return run.info.run_id

    def on_trial_result(self, iteration, trials, trial, result, **info):
        now = _now_ms()
        tags = []
        nodes = self.nodes.setdefault(trial.trial_id, [])
        if result.get("node_id") and result["node_id"] not in nodes[-1:]:  # first result, or moved to another node
            nodes.append(result["node_id"])
            tags += [RunTag("node_id", nodes[-1]), RunTag("node_ids", ",".join(nodes))]
        resumed = {}
        if "resumed_from_epoch" in result:  # retried after a failure, or restored with its sweep
            resumed = {"resumed_from_epoch": result["resumed_from_epoch"]}  # a pack's members get it too
            tags.append(RunTag("resumed_from_epoch", str(result["resumed_from_epoch"])))
        for index, values in member_results(result):
            run_id, step = self.run_ids[trial.trial_id][index], int(values["epoch"])
            metrics = []
            if step > self.logged_epochs.get(run_id, 0):  # not an epoch logged already (reported again after
                self.logged_epochs[run_id] = step          # a retry, or logged by a driver that died)
                metrics = [Metric(k, float(v), now, step) for k, v in {**values, **resumed}.items()
                           if k not in TUNE_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)]
            diverged = [RunTag("diverged", "true")] if values.get("diverged") else []
            if metrics or tags:
                self.client.log_batch(run_id, metrics=metrics, tags=tags + diverged)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._end(trial, "FINISHED")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._end(trial, "FAILED")

    def on_experiment_end(self, trials, **info):
        for trial in trials:  # stopped by a cancel: what was logged stays, the run is marked KILLED
            self._end(trial, "KILLED")

    def _end(self, trial, status: str):
        if trial.trial_id in self.run_ids and trial.trial_id not in self.ended:
            for run_id in self.run_ids[trial.trial_id]:
                self.client.set_terminated(run_id, status)
            self.ended.add(trial.trial_id)


def start_parent_run(client: MlflowClient, exp_id: str, run_name: str, tags: dict[str, str],
                     params: dict[str, Any], spec: dict) -> str:
    """The sweep's parent run, with the resolved spec attached as ``spec.json``."""
    run = client.create_run(exp_id, run_name=run_name, tags={**tags, "role": "sweep"})
    client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()])
    client.log_dict(run.info.run_id, spec, "spec.json")
    return run.info.run_id
