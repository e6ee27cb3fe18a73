"""A sweep as tidy data: one row per trial run and epoch, every param a column.

``actsweep export SWEEP_ID`` writes ``<sweep id>.csv`` (or ``.parquet``), which pandas loads as
it is, and beside it ``<sweep id>.json``: the spec the sweep ran, its slice, and where it ran
(code version, hardware, data source). ``actsweep report --from-export FILES...`` reads one or
more exports back (the slices of one grid, or sweeps of several experiments under one spec) and
gives the same tables, verdicts and figures as the live sweep.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient

from search_spaces import SpecError, SweepSpec
from service.aggregate import (HISTORY_COLUMNS, PER_EPOCH_LR, RUN_COLUMNS, SweepResults, find_parent_run, parent_spec,
                               results_from_runs, search_runs)

FORMAT = "actsweep-export/1"
FORMATS = ("csv", "csv.gz", "parquet")
IDENTITY = ["sweep_id", "experiment", "run_id", "trial_id", "phase", "status", "diverged", "activation", "dropout",
            "lr", "seed"]
RUN_TAGS = ["trial_key", "execution", "pack_id", "reused_from", "node_ids"]  # run tags worth a column


class ExportError(ValueError):
    """An export that cannot be read or combined; the message names the file and the field."""


# -- writing ------------------------------------------------------------------------------------------

def tidy_frame(client: MlflowClient, sweep_id: str) -> pd.DataFrame:
    """Every trial run of the sweep, one row per epoch, with its metrics, params and grid point."""
    rows = []
    for run in search_runs(client, f"tags.sweep_id = '{sweep_id}' and tags.role = 'trial'"):
        tags = run.data.tags
        identity = {"sweep_id": sweep_id, "experiment": tags.get("experiment", ""), "run_id": run.info.run_id,
                    "trial_id": tags.get("trial_id", ""), "phase": tags.get("phase", "grid"),
                    "status": run.info.status, "diverged": tags.get("diverged") == "true",
                    "activation": tags["activation"], "dropout": float(tags["dropout"]), "lr": float(tags["lr"]),
                    "seed": int(tags["seed"]), **{k: tags.get(k, "") for k in RUN_TAGS},
                    **{f"param.{k}": v for k, v in run.data.params.items()}}
        epochs: dict[int, dict] = {}
        for key in run.data.metrics:
            for m in client.get_metric_history(run.info.run_id, key):
                epochs.setdefault(m.step, {})[PER_EPOCH_LR if key == "lr" else key] = m.value
        rows += [{**identity, "epoch": step, **values} for step, values in sorted(epochs.items())]
    frame = pd.DataFrame(rows)
    if not len(frame):
        return frame
    params = sorted(c for c in frame.columns if c.startswith("param."))
    metrics = sorted(set(frame.columns) - set(IDENTITY) - set(RUN_TAGS) - set(params) - {"epoch"})
    return frame[IDENTITY + ["epoch"] + metrics + RUN_TAGS + params].sort_values(
        ["phase", "activation", "dropout", "lr", "seed", "epoch"], kind="stable")


def export_sweep(tracking_uri: str, sweep_id: str, out: Path, fmt: str = "csv") -> list[Path]:
    """Write the sweep's tidy table and its sidecar into ``out``; returns both paths."""
    if fmt not in FORMATS:
        raise ExportError(f"--format: unknown {fmt!r}; accepted: {', '.join(FORMATS)}")
    client = MlflowClient(tracking_uri)
    parent = find_parent_run(client, sweep_id)
    frame = tidy_frame(client, sweep_id)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{sweep_id}.{fmt}"
    if fmt == "parquet":
        frame.to_parquet(data, index=False)
    else:
        frame.to_csv(data, index=False)  # (.gz: compressed; pandas reads it back as it is)
    tags = {k: v for k, v in parent.data.tags.items() if not k.startswith("mlflow.")}
    sidecar = out / f"{sweep_id}.json"
    sidecar.write_text(json.dumps({
        "format": FORMAT, "sweep_id": sweep_id, "experiment": tags.get("experiment", ""),
        "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": int(frame["run_id"].nunique()) if len(frame) else 0, "rows": len(frame), "tags": tags,
        "started_at": _iso(parent.info.start_time), "ended_at": _iso(parent.info.end_time),
        "wall_s": round((parent.info.end_time - parent.info.start_time) / 1000, 1) if parent.info.end_time else None,
        "mlflow": {"experiment_id": parent.info.experiment_id, "parent_run_id": parent.info.run_id},
        "spec": parent_spec(client, parent.info.run_id)}, indent=2, sort_keys=True))
    return [data, sidecar]


def _iso(ms: int | None) -> str | None:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="seconds") if ms else None


# -- reading ------------------------------------------------------------------------------------------

def sidecar_of(path: Path) -> Path:
    """``<sweep id>.json`` beside ``<sweep id>.csv``, ``.csv.gz`` or ``.parquet``."""
    return path.with_name(path.name.split(".")[0] + ".json")


def read_export(path: Path) -> tuple[pd.DataFrame, dict]:
    """An export's table and its sidecar (``<name>.json`` beside it)."""
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
    return frame, meta


def training_settings(spec: SweepSpec) -> dict:
    """What must agree for trials of two specs to be the same trials: everything that changes training."""
    settings = {k: v for k, v in spec.trial_base().items() if k not in ("experiment", "cpus_per_trial",
                                                                        "gpus_per_trial", "eval_noise")}
    return {**settings, "dataset": spec.dataset, "val_size": spec.val_size, "train_subset": spec.train_subset,
            "data_options": spec.data_options.model_dump()}


def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    found = []
    for key in sorted(set(a) | set(b)):
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            found += _differences(a[key], b[key], f"{prefix}{key}.")
        elif a.get(key) != b.get(key):
            found.append(f"{prefix}{key} ({a.get(key)!r} vs {b.get(key)!r})")
    return found


def _in_grid(frame: pd.DataFrame, spec: SweepSpec) -> pd.Series:
    """Rows whose (activation, dropout, lr, seed) is a point of the spec's grid (its retraining too)."""
    points = {(p["activation"], float(p["dropout"]), float(p["lr"]), int(p["seed"])) for p in spec.grid_points()}
    pairs = {(a, float(d), int(s)) for a, d, _, s in points}
    keys = zip(frame["activation"], frame["dropout"].astype(float), frame["lr"].astype(float), frame["seed"].astype(int),
               frame["phase"])
    return pd.Series([(a, d, lr, s) in points if phase == "grid" else (a, d, s) in pairs
                      for a, d, lr, s, phase in keys], index=frame.index)


def results_from_exports(paths: list[Path], spec: SweepSpec | None = None) -> SweepResults:
    """The aggregated results of one or more exports, as :func:`service.aggregate.sweep_results`
    gives them for a live sweep.

    Without ``spec``, the exports must be slices of one grid (their specs equal but for the slice).
    With it, they may come from several experiments whose trials train alike (``mnist_robustness``
    from ``mnist_classification``'s exports): only the trials on the spec's grid count.
    """
    frames, metas = zip(*(read_export(p) for p in paths))
    specs = []
    for path, meta in zip(paths, metas):
        try:
            specs.append(SweepSpec.model_validate(meta["spec"]).unsliced())
        except Exception as exc:
            raise ExportError(f"--from-export: the spec in {sidecar_of(Path(path))} is not valid: {exc}"
                              .splitlines()[0]) from None
    target = spec.unsliced() if spec is not None else specs[0]
    for path, other in zip(paths, specs):
        if spec is None:
            differing = _differences(_comparable(target), _comparable(other))
        else:
            differing = _differences(training_settings(target), training_settings(other))
        if differing:
            raise ExportError(f"--from-export: {path} is not a slice of the same {'training' if spec else 'grid'} as "
                              f"{paths[0] if spec is None else 'spec ' + target.name}: it differs in "
                              f"{'; '.join(differing[:5])}")
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[_in_grid(frame, target)]
    _refuse_duplicates(frame, paths)
    runs = runs_from_tidy(frame)

    def histories(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
        keys = [PER_EPOCH_LR if k == "lr" else k for k in keys]
        mine = frame[frame["run_id"].isin(runs["run_id"])]
        long = mine.melt(id_vars=["run_id", "activation", "dropout", "lr", "seed", "phase", "epoch"],
                         value_vars=[k for k in keys if k in mine], var_name="metric")
        return long.dropna(subset=["value"])[HISTORY_COLUMNS]

    # one whole export keeps its provenance tags; several (or another spec's view) have it per source
    tags = dict(metas[0]["tags"]) if len(metas) == 1 and spec is None else {"experiment": target.name}
    sources = [{"sweep": m["sweep_id"], "experiment": m["experiment"], "slice": m["tags"].get("slice", "whole grid"),
                "runs": m["runs"], "wall (s)": m.get("wall_s"), "code version": m["tags"].get("code_version", ""),
                "hardware": m["tags"].get("hardware", ""), "file": Path(p).name} for p, m in zip(paths, metas)]
    return results_from_runs(runs, target.model_dump(mode="json"), tags, histories,
                             sweep_id="+".join(m["sweep_id"] for m in metas), sources=sources)


def _comparable(spec: SweepSpec) -> dict:
    return spec.model_dump(mode="json", exclude={"execution", "slice"})


def _refuse_duplicates(frame: pd.DataFrame, paths) -> None:
    runs = frame.drop_duplicates("run_id")
    twice = runs[runs.duplicated(["phase", "activation", "dropout", "lr", "seed"], keep=False)]
    if len(twice):
        r = twice.iloc[0]
        raise ExportError(f"--from-export: the trial ({r.activation}, lr {r.lr:g}, dropout {r.dropout:g}, seed "
                          f"{r.seed}, {r.phase}) is in more than one of {', '.join(map(str, paths))} "
                          f"(sweeps {', '.join(sorted(twice[twice['seed'] == r.seed]['sweep_id'].unique()))})")


def runs_from_tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its identity and each metric's last logged value (as MLflow reports a run)."""
    metrics = [c for c in frame.columns if c not in IDENTITY + RUN_TAGS + ["epoch"] and not c.startswith("param.")]
    ordered = frame.sort_values(["run_id", "epoch"], kind="stable")
    last = ordered.groupby("run_id", sort=False)[metrics].last()  # last non-missing value of each metric
    identity = ordered.groupby("run_id", sort=False)[[c for c in RUN_COLUMNS if c != "run_id"]].first()
    runs = identity.join(last).reset_index()
    runs["diverged"] = runs["diverged"].astype(bool)
    return runs


def parse_spec_option(name_or_path: str | None) -> SweepSpec | None:
    """``--spec``: a catalog experiment or a YAML spec, as ``actsweep run`` reads it."""
    if name_or_path is None:
        return None
    from search_spaces import load_spec

    try:
        return load_spec(name_or_path)
    except SpecError as exc:
        raise ExportError(f"--spec: {exc}") from None
