"""The direct SQL writer (service.runs.sql_writes) against MLflow's own log_batch, on every database
MLflow's store runs on here: the same writes through either path leave the same runs behind (every
metric value once, the same latest values, params, tags and end), and both refuse the same bad writes."""
from __future__ import annotations

import math

import pytest
from mlflow.exceptions import MlflowException

from service.runs.store import Provenance, RunStore
from tests.conftest import migrated_mlflow_store
from workers.trial import GridPoint

PATHS = ("log_batch", "sql")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def tracking_uri(request, tmp_path):
    if request.param == "sqlite":
        return migrated_mlflow_store(tmp_path)
    return request.getfixturevalue("postgres")["mlflow"]


def _store(monkeypatch, tracking_uri: str, path: str) -> RunStore:
    monkeypatch.setenv("ACTSWEEP_DIRECT_SQL_WRITES", str(path == "sql").lower())
    runs = RunStore(tracking_uri, cache_secret=b"k" * 32)
    assert (runs.sql_writer is not None) == (path == "sql")  # (decided once, on first use)
    return runs


def _runs(runs: RunStore, tmp_path, name: str, n: int = 3) -> list[str]:
    exp = runs.experiment_id(f"actsweep/sql-writes-{name}", tmp_path / "artifacts")
    parent = runs.start_sweep(exp, name, Provenance(name, "sql-writes"), {}, {})
    return [runs.create_trial_run(exp, parent, {"sweep_id": name}, GridPoint("gelu", 0.01, 0.0, s)) for s in range(n)]


def _epoch(step: int, seed: int) -> tuple:
    return (step, {"loss": 1.0 / step + seed, "error": 0.5, "lr": 0.01 * step, "odd": float("nan") if step == 2 else
                   float("inf") if step == 3 else -float("inf")}, {"node_id": f"n{step}"}, 1_000 + step)


def _write_sweep(runs: RunStore, run_ids: list[str]) -> None:
    params = {"activation": "gelu", "depth": "8"}
    first = [runs.run_write(r, [_epoch(s, i) for s in (1, 2, 3)], params) for i, r in enumerate(run_ids)]
    runs.log_runs(first)
    runs.log_runs(first)  # sent again (a retry after a store that did not answer): written once
    # epoch 5 before epoch 4 (the latest value is the highest step's, not the last one written)
    runs.log_runs([runs.run_write(r, [_epoch(5, i)]) for i, r in enumerate(run_ids)])
    runs.log_runs([runs.run_write(r, [_epoch(4, i)], sign_key=f"key{i}") for i, r in enumerate(run_ids)])
    runs.end_runs(run_ids[:2], "FINISHED")
    runs.end_runs(run_ids[2:], "FAILED")


def _what_is_stored(runs: RunStore, run_id: str) -> dict:
    run = runs.client.get_run(run_id)
    return {"history": {k: sorted((m.step, m.timestamp, "nan" if math.isnan(m.value) else m.value) for m in runs.client.get_metric_history(run_id, k))
                        for k in run.data.metrics},
            "latest": run.data.metrics, "params": run.data.params, "status": run.info.status,
            "ended": run.info.end_time is not None,
            "tags": {k: v for k, v in run.data.tags.items() if k not in ("mlflow.parentRunId", "trial_signature", "sweep_id")},
            "signed": "trial_signature" in run.data.tags}


def test_both_paths_leave_the_same_runs(monkeypatch, tracking_uri, tmp_path):
    stored = {}
    for path in PATHS:
        runs = _store(monkeypatch, tracking_uri, path)
        run_ids = _runs(runs, tmp_path, f"same-{path}")
        _write_sweep(runs, run_ids)
        stored[path] = [_what_is_stored(runs, r) for r in run_ids]
    assert stored["sql"] == stored["log_batch"]
    first = stored["sql"][0]
    assert [step for step, _, _ in first["history"]["loss"]] == [1, 2, 3, 4, 5]  # every epoch once
    assert first["latest"]["loss"] == pytest.approx(1 / 5) and first["tags"]["node_id"] == "n4"
    assert first["latest"]["odd"] == -1.7976931348623157e308 and first["signed"]
    assert [s["status"] for s in stored["sql"]] == ["FINISHED", "FINISHED", "FAILED"]


@pytest.mark.parametrize("path", PATHS)
def test_a_changed_param_is_refused_and_nothing_of_its_write_is_stored(monkeypatch, tracking_uri, tmp_path, path):
    runs = _store(monkeypatch, tracking_uri, path)
    run_ids = _runs(runs, tmp_path, f"param-{path}", n=2)
    runs.log_runs([runs.run_write(r, [_epoch(1, 0)], {"depth": "8"}) for r in run_ids])
    with pytest.raises(MlflowException, match="(?i)changing param"):
        runs.log_runs([runs.run_write(run_ids[1], [_epoch(2, 0)], {"depth": "9"})])
    assert runs.client.get_run(run_ids[1]).data.params["depth"] == "8"
    assert [m.step for m in runs.client.get_metric_history(run_ids[1], "loss")] == [1]


@pytest.mark.parametrize("path", PATHS)
def test_a_deleted_run_is_refused(monkeypatch, tracking_uri, tmp_path, path):
    runs = _store(monkeypatch, tracking_uri, path)
    run_ids = _runs(runs, tmp_path, f"deleted-{path}", n=1)
    runs.client.delete_run(run_ids[0])
    with pytest.raises(MlflowException, match="active"):
        runs.log_runs([runs.run_write(run_ids[0], [_epoch(1, 0)])])
    with pytest.raises(MlflowException, match="active"):
        runs.end_runs(run_ids, "FINISHED")
