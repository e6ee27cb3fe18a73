"""How many trial-epochs a second a sweep's bookkeeping keeps up with: the real MLflow logger
(service.runs.logger) writing to a real store, driven as Tune's loop drives it, with a stand-in
for the trainables that reports epochs as fast as the logger takes them.

    actsweep bench --workload bookkeeping [--trials 1000] [--epochs 20] [--pack-size 50]
                                          [--flush-s 0,1] [--stores sqlite,sqlite-wal,http-postgres]

Each trial is a member of a fused pack (Tune trial), as Fig. 2's grid runs; every epoch it reports
the 16 metrics a classifier's epoch logs. Per store and ``--flush-s`` value, one sweep under a fresh store
(a SQLite file, or PostgreSQL behind ``mlflow server`` over HTTP): its trial-epochs
per second end to end (runs created, every epoch written, runs ended), the MLflow calls it made,
and the driver's peak memory. ``--flush-s 0`` writes each run's epoch as it comes (one call per run
and epoch); a positive value batches each run's epochs into one write per flush. Both in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator
from unittest.mock import patch

METRICS = ("train_loss", "train_loss_eval", "train_error_eval", "val_loss", "val_error", "test_loss", "test_error",
           "best_val_epoch", "val_loss_at_best_val", "val_error_at_best_val", "test_loss_at_best_val",
           "test_error_at_best_val", "lr", "diverged", "epoch_seconds", "median_unit_activation")


def measure(trials: int, epochs: int, pack_size: int, flush_s: float, tracking_uri: str) -> dict:
    """One stand-in sweep through the real logger and store; its figures."""
    from service.runs.logger import MLflowTrialLogger
    from service.runs.store import Provenance, RunStore
    from workers.trial import GridPoint, Pack, tune_config

    runs = RunStore(tracking_uri)
    calls = {"n": 0}
    log_batch = runs.client.log_batch

    def counted(*args, **kwargs):
        calls["n"] += 1
        return log_batch(*args, **kwargs)

    runs.client.log_batch = counted
    sweep_id = f"bookkeeping-{flush_s:g}-{time.time_ns()}"
    exp = runs.experiment_id(f"actsweep/bench-{sweep_id}", Path(tempfile.gettempdir()) / "actsweep-bench-artifacts")
    parent = runs.start_sweep(exp, "bookkeeping", Provenance(sweep_id, "bookkeeping"), {}, {})
    logger = MLflowTrialLogger(runs, exp, parent, {"sweep_id": sweep_id}, flush_s=flush_s)
    logger._now = runs  # (its writes through the counted client)
    settings = {"epochs": epochs, "model": {"depth": 8}}
    packs = []
    for start in range(0, trials, pack_size):
        points = [GridPoint("gelu", 1e-3, 0.0, seed) for seed in range(start, min(start + pack_size, trials))]
        packs.append(SimpleNamespace(trial_id=f"pack{start // pack_size}", config=tune_config(settings, Pack(points))))
    memory_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    for pack in packs:
        logger.on_trial_start(0, packs, pack)
    calls["n"] = 0
    loop_s = 0.0  # the time Tune's loop spent in the logger: what the trials wait for (Tune's function
    for epoch in range(1, epochs + 1):  # trainables wait, after each report, until the loop takes it)
        for pack in packs:  # a pack's report: every member's epoch
            members = {str(i): {"epoch": epoch, **{m: 1.0 / (epoch + i + k) for k, m in enumerate(METRICS)}}
                       for i in range(len(pack.config["point"]["pack"]))}
            entered = time.perf_counter()
            logger.on_trial_result(epoch, packs, pack, {"members": members, "node_id": "node0"})
            logger.on_step_end(epoch, packs)
            loop_s += time.perf_counter() - entered
    for pack in packs:
        logger.on_trial_complete(epochs, packs, pack)
    logger.on_experiment_end(packs)
    wall = time.perf_counter() - started
    table = runs.trial_runs(sweep_id)
    return {"flush_s": flush_s, "trials": trials, "epochs": epochs, "pack_size": pack_size, "wall_s": round(wall, 2),
            "trial_epochs_per_s": round(trials * epochs / wall, 1), "epoch_write_calls": calls["n"],
            "tune_loop_s_in_logger": round(loop_s, 2),
            "runs_finished": int((table["status"] == "FINISHED").sum()),
            "sampled_runs_with_every_epoch_once": _every_epoch_once(runs, table, epochs),
            "driver_peak_mb_above_start": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - memory_before) / 1024, 1)}


def _every_epoch_once(runs, table, epochs: int, sample: int = 20) -> str:
    """Of ``sample`` runs spread over the sweep, how many hold epochs 1..``epochs`` exactly once each."""
    picked = table.iloc[:: max(1, len(table) // sample)]
    whole = sum(sorted(m.step for m in runs.client.get_metric_history(run_id, "train_loss")) == list(range(1, epochs + 1))
                for run_id in picked["run_id"])
    return f"{whole}/{len(picked)}"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="actsweep bench --workload bookkeeping", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--pack-size", type=int, default=50)
    parser.add_argument("--flush-s", default="0,1", help="comma list: seconds between a run's writes (0: every epoch)")
    parser.add_argument("--stores", default="sqlite",
                        help="comma list of sqlite (a fresh file, in SQLite's rollback journal: the default), "
                             "sqlite-wal (the same in WAL mode: ACTSWEEP_SQLITE_WAL=true) and http-postgres (a "
                             "fresh PostgreSQL behind `mlflow server`, over HTTP), each with every --flush-s value")
    parser.add_argument("--out", default=None, help="a JSON file for the rows")
    args = parser.parse_args(argv)
    rows = []
    for store in args.stores.split(","):
        for flush_s in (float(v) for v in args.flush_s.split(",")):
            with _fresh_store(store) as uri:
                row = {"store": store, **measure(args.trials, args.epochs, args.pack_size, flush_s, uri)}
            rows.append(row)
            print(f"{store}, flush every {flush_s:g} s: {row['trials']} trials × {row['epochs']} epochs in {row['wall_s']:.1f} s, "
              f"{row['trial_epochs_per_s']:.0f} trial-epochs/s, {row['epoch_write_calls']} metric writes, "
                  f"{row['runs_finished']} runs finished, every epoch once in {row['sampled_runs_with_every_epoch_once']} "
                  f"sampled runs, Tune's loop {row['tune_loop_s_in_logger']:.1f} s in the logger, "
                  f"driver +{row['driver_peak_mb_above_start']:.0f} MB", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"workload": {"trials": args.trials, "epochs": args.epochs,
                                                           "pack_size": args.pack_size, "metrics_per_epoch": len(METRICS)},
                                              "rows": rows}, indent=2))
    return rows


@contextmanager
def _fresh_store(store: str) -> Iterator[str]:
    """A new, empty tracking store of the kind named; yields its URI."""
    from service.local_servers import mlflow_server, postgres_server

    with tempfile.TemporaryDirectory() as folder:
        if store in ("sqlite", "sqlite-wal"):
            with patch.dict(os.environ, {"ACTSWEEP_SQLITE_WAL": str(store == "sqlite-wal").lower()}):
                yield f"sqlite:///{Path(folder) / 'mlflow.db'}"
        elif store == "http-postgres":
            with postgres_server(("mlflow",)) as urls, \
                    mlflow_server(urls["mlflow"], Path(folder) / "artifacts", Path(folder) / "mlflow.log") as url:
                yield url
        else:
            raise SystemExit(f"--stores: unknown {store!r}; accepted: sqlite, sqlite-wal, http-postgres")


if __name__ == "__main__":
    main()
