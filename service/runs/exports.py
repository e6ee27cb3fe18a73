"""A sweep as tidy data: one row per trial run and epoch, every param a column.

``actsweep export SWEEP_ID`` writes ``<sweep id>.csv`` (or ``.csv.gz``, ``.parquet``), which pandas
loads as it is, and beside it ``<sweep id>.json``: the spec the sweep ran, its slice, and where
and how long it ran (code version, hardware, data source, wall time). Reading exports back
(service.reporting.results) gives the same tables, verdicts and figures as the live sweep.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from service.runs.store import (EXECUTION, HISTORY_COLUMNS, NODE_IDS, PACK_ID, PER_EPOCH_LR, REUSED_FROM, RUN_COLUMNS,
                                TRIAL_KEY, Provenance, RunStore)

FORMAT = "actsweep-export/1"
FORMATS = ("csv", "csv.gz", "parquet")
IDENTITY = ["sweep_id", "experiment", "run_id", "trial_id", "phase", "status", "diverged", "activation", "dropout",
            "lr", "seed"]
RUN_TAGS = [TRIAL_KEY, EXECUTION, PACK_ID, REUSED_FROM, NODE_IDS]  # run tags worth a column


class ExportError(ValueError):
    """An export that cannot be read or combined; the message names the file and the field."""


def export_sweep(runs: RunStore, sweep_id: str, out: Path, fmt: str = "csv") -> list[Path]:
    """Write the sweep's tidy table and its sidecar into ``out``; returns both paths."""
    if fmt not in FORMATS:
        raise ExportError(f"--format: unknown {fmt!r}; accepted: {', '.join(FORMATS)}")
    parent = runs.sweep(sweep_id)
    frame = runs.tidy_frame(sweep_id, RUN_TAGS)
    if len(frame):
        params = sorted(c for c in frame.columns if c.startswith("param."))
        metrics = sorted(set(frame.columns) - set(IDENTITY) - set(RUN_TAGS) - set(params) - {"epoch"})
        frame = frame[IDENTITY + ["epoch"] + metrics + RUN_TAGS + params].sort_values(
            ["phase", "activation", "dropout", "lr", "seed", "epoch"], kind="stable")
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{sweep_id}.{fmt}"
    if fmt == "parquet":
        frame.to_parquet(data, index=False)
    else:
        frame.to_csv(data, index=False)  # (.gz: compressed; pandas reads it back as it is)
    sidecar = sidecar_of(data)
    sidecar.write_text(json.dumps({
        "format": FORMAT, "sweep_id": sweep_id, "experiment": parent.provenance.experiment,
        "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": int(frame["run_id"].nunique()) if len(frame) else 0, "rows": len(frame),
        "tags": parent.provenance.as_tags(),
        "started_at": _iso(parent.start_time), "ended_at": _iso(parent.end_time),
        "wall_s": round((parent.end_time - parent.start_time) / 1000, 1) if parent.end_time else None,
        "mlflow": {"experiment_id": parent.experiment_id, "parent_run_id": parent.run_id},
        "spec": runs.spec(parent.run_id)}, indent=2, sort_keys=True))
    return [data, sidecar]


def _iso(ms: int | None) -> str | None:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="seconds") if ms else None


def sidecar_of(path: Path) -> Path:
    """``<sweep id>.json`` beside ``<sweep id>.csv``, ``.csv.gz`` or ``.parquet``."""
    return path.with_name(path.name.split(".")[0] + ".json")


@dataclass
class Export:
    """One exported sweep: its tidy table and what its sidecar says."""

    path: Path
    frame: pd.DataFrame
    sweep_id: str
    spec: dict
    provenance: Provenance
    runs: int
    wall_s: float | None


def read_export(path: Path) -> Export:
    """An export's table and its sidecar."""
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"--from-export: no such file {path}")
    sidecar = sidecar_of(path)
    if not sidecar.is_file():
        raise ExportError(f"--from-export: {path} has no sidecar {sidecar.name} (written by actsweep export)")
    meta = json.loads(sidecar.read_text())
    if meta.get("format") != FORMAT:
        raise ExportError(f"--from-export: {sidecar} is not an {FORMAT} sidecar")
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, low_memory=False)
    except Exception as exc:
        raise ExportError(f"--from-export: cannot read {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    missing = [c for c in IDENTITY + ["epoch"] if c not in frame]
    if missing:
        raise ExportError(f"--from-export: {path} lacks the columns {', '.join(missing)}")
    return Export(path, frame, meta["sweep_id"], meta["spec"], Provenance.of(meta.get("tags", {})), meta["runs"],
                  meta.get("wall_s"))


def runs_from_tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its identity and each metric's last logged value (as MLflow reports a run)."""
    metrics = [c for c in frame.columns if c not in IDENTITY + RUN_TAGS + ["epoch"] and not c.startswith("param.")]
    ordered = frame.sort_values(["run_id", "epoch"], kind="stable")
    last = ordered.groupby("run_id", sort=False)[metrics].last()  # last non-missing value of each metric
    identity = ordered.groupby("run_id", sort=False)[[c for c in RUN_COLUMNS if c != "run_id"]].first()
    runs = identity.join(last).reset_index()
    runs["diverged"] = runs["diverged"].astype(bool)
    return runs


def tidy_histories(frame: pd.DataFrame):
    """Per-epoch values of the runs in an export, as RunStore.histories gives them from MLflow."""

    def histories(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
        keys = [PER_EPOCH_LR if k == "lr" else k for k in keys]
        mine = frame[frame["run_id"].isin(runs["run_id"])]
        long = mine.melt(id_vars=["run_id", "activation", "dropout", "lr", "seed", "phase", "epoch"],
                         value_vars=[k for k in keys if k in mine], var_name="metric")
        return long.dropna(subset=["value"])[HISTORY_COLUMNS]

    return histories
