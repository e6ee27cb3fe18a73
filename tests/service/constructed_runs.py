"""Constructed sweeps written to a real MLflow store by the real trial logger (no Tune)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from service.runs.logger import MLflowTrialLogger
from service.runs.store import Provenance, RunStore
from tests.conftest import migrated_mlflow_store


def sweep_logger(root: Path, sweep_id: str, experiment: str, parent_tags: dict, spec: dict) -> tuple[str, MLflowTrialLogger]:
    """A SQLite store under ``root`` with the sweep's parent run; returns (tracking URI, trial logger)."""
    uri = migrated_mlflow_store(root)
    runs = RunStore(uri)
    exp = runs.experiment_id(f"actsweep/{experiment}", root / "artifacts")
    tags = {"sweep_id": sweep_id, "experiment": experiment}
    parent = runs.start_sweep(exp, sweep_id, Provenance.of({**tags, **parent_tags}), {}, spec)
    return uri, MLflowTrialLogger(runs, exp, parent, tags)


def log_trial(logger: MLflowTrialLogger, trial_id: str, config: dict, results: list[dict], failed: bool = False) -> None:
    """One trial's run as Tune would drive the logger: start, a result per epoch, then the end."""
    trial = SimpleNamespace(trial_id=trial_id, config=config)
    logger.on_trial_start(0, [], trial)
    for result in results:
        logger.on_trial_result(0, [], trial, result)
    (logger.on_trial_error if failed else logger.on_trial_complete)(0, [], trial)
    logger.outbox.flush(wait=True)  # (its writer thread has sent it all, as at the end of Tune's experiment)
