"""A sweep's aggregated results, from the MLflow store (a live sweep) or from exported files.

Both give a :class:`service.reporting.aggregate.SweepResults` from the same code, so a report
built from committed exports equals the one of the live sweep.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from search_spaces import SpecError, SweepSpec
from service.lock import NO_LOCK
from service.reporting.aggregate import SweepResults, results_from_runs
from service.runs.exports import ExportError, read_export, runs_from_tidy, sidecar_of, tidy_histories
from service.runs.store import Provenance, RunStore


def sweep_results(runs: RunStore | str, sweep_id: str) -> SweepResults:
    """Everything the report needs about a sweep, read from the MLflow store (or its tracking URI)."""
    runs = RunStore(runs) if isinstance(runs, str) else runs
    parent = runs.sweep(sweep_id)
    return results_from_runs(runs.trial_runs(sweep_id), runs.spec(parent.run_id), parent.provenance, runs.histories,
                             sweep_id=sweep_id, parent_run_id=parent.run_id, experiment_id=parent.experiment_id)


def training_settings(spec: SweepSpec) -> dict:
    """What must agree for trials of two specs to be the same trials: everything that changes training."""
    settings = {k: v for k, v in spec.trial_base().items() if k not in ("experiment", "cpus_per_trial",
                                                                        "gpus_per_trial", "eval_noise", "compile",
                                                                        "cuda_graphs")}
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
    """Rows whose grid point is on the spec's grid (retraining rows: whose activation, dropout and seed are);
    with until_decided, every seed its rounds may add is on it."""
    if spec.until_decided:
        spec = spec.model_copy(update={"seeds": spec.sequential_seeds()})
    points = {p.key() for p in spec.grid_points()}
    pairs = {(a, d, s) for a, d, _, s in points}
    keys = zip(frame["activation"], frame["dropout"].astype(float), frame["lr"].astype(float), frame["seed"].astype(int),
               frame["phase"])
    return pd.Series([(a, d, lr, s) in points if phase == "grid" else (a, d, s) in pairs
                      for a, d, lr, s, phase in keys], index=frame.index)


def results_from_exports(paths: list[Path], spec: SweepSpec | None = None) -> SweepResults:
    """The aggregated results of one or more exports, as :func:`sweep_results` gives them for a live sweep.

    Without ``spec``, the exports must be slices of one grid (their specs equal but for the slice).
    With it, they may come from several experiments whose trials train alike (``mnist_robustness``
    from ``mnist_classification``'s exports): only the trials on the spec's grid count.
    """
    exports = [read_export(p) for p in paths]
    specs = []
    for export in exports:
        try:
            specs.append(SweepSpec.model_validate(export.spec).unsliced())
        except Exception as exc:
            raise ExportError(f"--from-export: the spec in {sidecar_of(export.path)} is not valid: {exc}"
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
    frame = pd.concat([e.frame for e in exports], ignore_index=True)
    frame = frame[_in_grid(frame, target)]
    _refuse_duplicates(frame, paths)
    # one whole export keeps its provenance; several (or another spec's view) have it per source
    provenance = exports[0].provenance if len(exports) == 1 and spec is None else Provenance(experiment=target.name)
    sources = [{"sweep": e.sweep_id, "experiment": e.provenance.experiment, "slice": e.provenance.slice or "whole grid",
                "runs": e.runs, "wall (s)": e.wall_s, "code version": e.provenance.code_version,
                "lock": e.provenance.environment_lock or NO_LOCK,
                "hardware": e.provenance.hardware, "file": e.path.name} for e in exports]
    return results_from_runs(runs_from_tidy(frame), target.model_dump(mode="json"), provenance, tidy_histories(frame),
                             sweep_id="+".join(e.sweep_id for e in exports), sources=sources)


def _comparable(spec: SweepSpec) -> dict:
    # how trials ran (per trial or fused, compiled) may differ between slices; the precision may not
    return {**spec.model_dump(mode="json", exclude={"execution", "slice"}), "execution.dtype": spec.execution.dtype}


def _refuse_duplicates(frame: pd.DataFrame, paths) -> None:
    runs = frame.drop_duplicates("run_id")
    twice = runs[runs.duplicated(["phase", "activation", "dropout", "lr", "seed"], keep=False)]
    if len(twice):
        r = twice.iloc[0]
        raise ExportError(f"--from-export: the trial ({r.activation}, lr {r.lr:g}, dropout {r.dropout:g}, seed "
                          f"{r.seed}, {r.phase}) is in more than one of {', '.join(map(str, paths))} "
                          f"(sweeps {', '.join(sorted(twice[twice['seed'] == r.seed]['sweep_id'].unique()))})")


def parse_spec_option(name_or_path: str | None) -> SweepSpec | None:
    """``--spec``: a catalog experiment or a YAML spec, as ``actsweep run`` reads it."""
    if name_or_path is None:
        return None
    from search_spaces import load_spec

    try:
        return load_spec(name_or_path)
    except SpecError as exc:
        raise ExportError(f"--spec: {exc}") from None
