"""How many trial-epochs a second a sweep's bookkeeping keeps up with: the real MLflow logger
(service.runs.logger) writing to a real store, driven as Tune's loop drives it, with a stand-in
for the trainables that reports epochs as fast as the logger takes them.

    actsweep bench --workload bookkeeping [--trials 1000] [--epochs 20] [--pack-size 50]
                                          [--flush-s 0,1] [--stores sqlite,sqlite-wal,http-postgres]
                                          [--writers log_batch,sql]

Each trial is a member of a fused pack (Tune trial), as Fig. 2's grid runs; every epoch it reports
the 16 metrics a classifier's epoch logs. Per store, writer and ``--flush-s`` value, one sweep under
a fresh store (a SQLite file, or PostgreSQL behind ``mlflow server`` over HTTP), in three timed
phases: the runs created; the epochs, until every one is in the store (the trial-epochs per second
the bookkeeping sustains); the runs ended. It prints the sustained rate, the overhead per trial
(creation and end), the rate end to end, the store writes the epochs took, and the driver's peak
memory. ``--flush-s 0`` writes each epoch as it comes; a positive value batches what waits into one
write per flush. ``--writers``: ``sql`` writes a flush's runs in one transaction into MLflow's tables
(service.runs.sql_writes; a database store only), ``log_batch`` one MLflow ``log_batch`` per run.
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

    def counted(write):
        def call(*args, **kwargs):
            calls["n"] += 1
            return write(*args, **kwargs)

        return call

    runs.client.log_batch = counted(runs.client.log_batch)
    if runs.sql_writer is not None:
        runs.sql_writer.write = counted(runs.sql_writer.write)
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
    logger.flush()
    created = time.perf_counter()
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
    logger.flush()  # every epoch in the store
    trained = time.perf_counter()
    writes = calls["n"]
    for pack in packs:
        logger.on_trial_complete(epochs, packs, pack)
    logger.on_experiment_end(packs)
    wall = time.perf_counter() - started
    table = runs.trial_runs(sweep_id)
    overhead = (created - started) + (wall - (trained - started))
    return {"flush_s": flush_s, "trials": trials, "epochs": epochs, "pack_size": pack_size, "wall_s": round(wall, 2),
            "epochs_s": round(trained - created, 2),
            "sustained_trial_epochs_per_s": round(trials * epochs / (trained - created), 1),
            "overhead_ms_per_trial": round(1000 * overhead / trials, 2),
            "trial_epochs_per_s": round(trials * epochs / wall, 1), "epoch_write_calls": writes,
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
    parser.add_argument("--writers", default="log_batch,sql",
                        help="comma list of log_batch (MLflow's, a call per run) and sql (a transaction per flush "
                             "for all runs: a database store only; an HTTP store always gets log_batch)")
    parser.add_argument("--out", default=None, help="a JSON file for the rows")
    args = parser.parse_args(argv)
    rows = []
    for store in args.stores.split(","):
        for writer in args.writers.split(","):
            if writer not in ("log_batch", "sql"):
                raise SystemExit(f"--writers: unknown {writer!r}; accepted: log_batch, sql")
            if writer == "sql" and store == "http-postgres":
                continue  # (a server is written to by log_batch only)
            for flush_s in (float(v) for v in args.flush_s.split(",")):
                with _fresh_store(store, writer) as uri:
                    row = {"store": store, "writer": writer,
                           **measure(args.trials, args.epochs, args.pack_size, flush_s, uri)}
                rows.append(row)
                print(f"{store}, {writer}, flush every {flush_s:g} s: {row['trials']} trials × {row['epochs']} epochs: "
                      f"sustained {row['sustained_trial_epochs_per_s']:.0f} trial-epochs/s "
                      f"({row['epoch_write_calls']} writes), {row['overhead_ms_per_trial']:.1f} ms a trial to create "
                      f"and end its run, {row['trial_epochs_per_s']:.0f} trial-epochs/s end to end "
                      f"({row['wall_s']:.1f} s); {row['runs_finished']} runs finished, every epoch once in "
                      f"{row['sampled_runs_with_every_epoch_once']} sampled runs, Tune's loop "
                      f"{row['tune_loop_s_in_logger']:.1f} s in the logger, driver +{row['driver_peak_mb_above_start']:.0f} MB",
                      flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"workload": {"trials": args.trials, "epochs": args.epochs,
                                                           "pack_size": args.pack_size, "metrics_per_epoch": len(METRICS)},
                                              "rows": rows}, indent=2))
    return rows


@contextmanager
def _fresh_store(store: str, writer: str = "log_batch") -> Iterator[str]:
    """A new, empty tracking store of the kind named, written by ``writer``; yields its URI."""
    from service.local_servers import mlflow_server, postgres_server

    with tempfile.TemporaryDirectory() as folder:
        if store in ("sqlite", "sqlite-wal"):
            with patch.dict(os.environ, {"ACTSWEEP_SQLITE_WAL": str(store == "sqlite-wal").lower(),
                                         "ACTSWEEP_DIRECT_SQL_WRITES": str(writer == "sql").lower()}):
                yield f"sqlite:///{Path(folder) / 'mlflow.db'}"
        elif store == "http-postgres":
            with postgres_server(("mlflow",)) as urls, \
                    mlflow_server(urls["mlflow"], Path(folder) / "artifacts", Path(folder) / "mlflow.log") as url:
                yield url
        else:
            raise SystemExit(f"--stores: unknown {store!r}; accepted: sqlite, sqlite-wal, http-postgres")


if __name__ == "__main__":
    main()
