"""The cache of finished trials: a trial already trained, with everything that affects its training
the same, is not trained again. Its MLflow run is copied into the new sweep (tagged
``reused_from``) unless the spec asks for a rerun (``execution.rerun``, ``--rerun``).

The key is a hash of the trial's training settings (the spec's ``trial_base()`` without the
fields that only place or label it), its grid point and seed, the data it sees (dataset, split
sizes, preprocessing, phase) and :data:`TRAINING_CODE_VERSION`, which is raised whenever a change to
workers/ changes what a trial computes.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from service.aggregate import search_runs

TRAINING_CODE_VERSION = 3  # 3: schedules moved every step, noise metrics named by %g, eval_train/top5/fine_tune
# trial_base() fields that do not change what a trial computes: its name and where it runs
NOT_TRAINING = frozenset({"experiment", "cpus_per_trial", "gpus_per_trial"})
_METRIC_BATCH = 1000  # MLflow's log_batch limit on metrics per call


def trial_key(base: dict, point: dict, data: dict) -> str:
    """The cache key of one trial: 32 hex digits."""
    settings = {k: v for k, v in base.items() if k not in NOT_TRAINING}
    identity = {"code": TRAINING_CODE_VERSION, "settings": settings, "data": data,
                "point": {"activation": point["activation"], "dropout": float(point["dropout"]),
                          "lr": float(point["lr"]), "seed": int(point["seed"])}}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:32]


@dataclass
class Reused:
    point: dict
    source_run_id: str
    run_id: str
    metrics: dict[str, float]


def find_finished(client: MlflowClient, key: str, sweep_id: str | None = None):
    """The most recent finished run with this trial key (in sweep ``sweep_id`` if given), or None."""
    query = f"tags.trial_key = '{key}' and attributes.status = 'FINISHED'"
    runs = search_runs(client, query + (f" and tags.sweep_id = '{sweep_id}'" if sweep_id else ""))
    runs = [r for r in runs if "reused_from" not in r.data.tags] or runs  # prefer the run that trained
    return max(runs, key=lambda r: r.info.start_time) if runs else None


def copy_run(client: MlflowClient, source, experiment_id: str, parent_run_id: str, tags: dict[str, str]) -> str:
    """A new run in the sweep with the source run's params, tags, and every metric's full history."""
    run = client.create_run(experiment_id, run_name=source.info.run_name, tags={
        **{k: v for k, v in source.data.tags.items() if not k.startswith("mlflow.")}, **tags,
        "mlflow.parentRunId": parent_run_id, "reused_from": source.info.run_id})
    history = [m for key in source.data.metrics for m in client.get_metric_history(source.info.run_id, key)]
    for i in range(0, max(len(history), 1), _METRIC_BATCH):
        client.log_batch(run.info.run_id, metrics=[Metric(m.key, m.value, m.timestamp, m.step)
                                                   for m in history[i:i + _METRIC_BATCH]],
                         params=[Param(k, v) for k, v in source.data.params.items()] if i == 0 else [])
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def reuse_finished(client: MlflowClient, points: list[dict], experiment_id: str, parent_run_id: str,
                   sweep_tags: dict[str, str], resuming: bool = False) -> tuple[list[dict], list[Reused]]:
    """Split ``points`` (each with its ``trial_key``) into those still to train and those reused.
    ``resuming``: the sweep's driver died after copying some; those are not copied twice."""
    to_train, reused = [], []
    for point in points:
        if resuming and find_finished(client, point["trial_key"], sweep_tags["sweep_id"]) is not None:
            continue
        source = find_finished(client, point["trial_key"])
        if source is None:
            to_train.append(point)
            continue
        run_id = copy_run(client, source, experiment_id, parent_run_id,
                          {**sweep_tags, "trial_id": f"reused-{source.info.run_id[:12]}"})
        reused.append(Reused(point, source.info.run_id, run_id, dict(source.data.metrics)))
    return to_train, reused
