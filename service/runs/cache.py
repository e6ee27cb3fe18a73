"""The cache of finished trials: a trial already trained, with everything that affects its training
the same, is not trained again. Its MLflow run is copied into the new sweep (tagged
``reused_from``) unless the spec asks for a rerun (``execution.rerun``, ``--rerun``).

The key (workers.trial.trial_key) hashes the trial's training settings, its grid point and seed,
the data it sees (dataset, split sizes, preprocessing, phase) and the training code's version.
"""
from __future__ import annotations

from dataclasses import dataclass

from service.runs.store import PHASE, SWEEP_ID, TRIAL_ID, RunStore
from workers.trial import KEY_FIELD, GridPoint


@dataclass
class Reused:
    point: GridPoint
    phase: str
    source_run_id: str
    run_id: str
    metrics: dict[str, float]


def reuse_finished(runs: RunStore, points: list[dict], experiment_id: str, parent_run_id: str,
                   sweep_tags: dict[str, str], resuming: bool = False) -> tuple[list[dict], list[Reused]]:
    """Split ``points`` (each a grid point with its ``trial_key``) into those still to train and those
    reused. ``resuming``: the sweep's driver died after copying some; those are not copied twice."""
    to_train, reused = [], []
    for point in points:
        if resuming and runs.finished_with_key(point[KEY_FIELD], sweep_tags[SWEEP_ID]) is not None:
            continue
        source = runs.finished_with_key(point[KEY_FIELD])
        if source is None:
            to_train.append(point)
            continue
        run_id = runs.copy_run(source, experiment_id, parent_run_id,
                               {**sweep_tags, TRIAL_ID: f"reused-{source.info.run_id[:12]}"})
        reused.append(Reused(GridPoint.of(point), sweep_tags.get(PHASE, "grid"), source.info.run_id, run_id,
                             dict(source.data.metrics)))
    return to_train, reused
