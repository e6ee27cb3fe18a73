"""What a sweep's bookkeeping costs as it grows: 100, 300, 1,000 trials of a tiny model.

    actsweep bench --workload scale [--sizes 100,300,1000] [--pack-size 50] [--mode fused|per_trial]

Each size is one sweep, in a process of its own (so its driver's peak memory is its own), on a
local Ray with the real MLflow store (SQLite) under a fresh home. Every trial trains a 1 × 16 MLP
on the embedded digits for one epoch, so what is measured is the orchestration, not the training:

- wall time end to end, and the orchestration overhead per trial: (wall − the packs' own
  training and evaluation time, from the epochs they report, divided among the slots) / trials;
- the driver's peak resident memory above what it held before the sweep;
- the MLflow writes the driver made (trial runs, params, metrics, tags, signatures), timed
  around each RunStore call, and reading every trial run back with its histories;
- the REST API (``actsweep serve`` in its own process, over HTTP) on a sweep record holding
  every trial: the paged trial list (first, middle and last page of 100), the sweep list and
  the sweep's detail, each the median of 5 requests; and, while the sweep runs, the sweep list
  asked every 0.5 s (its p50, p99 and slowest answer);
- the report: ``sweep_results`` read from MLflow, then the Markdown and the HTML report with
  its figures.

Written to docs/benchmarks/scale.json, and a plot beside it (scale.png).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ACTIVATIONS = ["relu", "gelu", "elu", "silu"]
LRS = [1e-3, 1e-4]  # with the activations, 8 grid points per seed


def tiny_spec(trials: int, mode: str, pack_size: int) -> dict:
    """A sweep of ``trials`` one-epoch trials of a 1 × 16 MLP on the embedded digits."""
    lrs = LRS if trials <= len(ACTIVATIONS) * len(LRS) * 1000 else [  # (a spec holds at most 1,000 seeds)
        round(10 ** (-3 - i / 4), 6) for i in range(-(-trials // (len(ACTIVATIONS) * 1000)))]
    seeds = max(1, trials // (len(ACTIVATIONS) * len(lrs)))
    return {"name": "scale", "title": "orchestration at scale", "paper": "gelu", "section": "bench",
            "dataset": "digits", "val_size": 200, "model": {"kind": "mlp", "depth": 1, "width": 16},
            "optimizer": "adam", "epochs": 1, "batch_size": 128, "activation": ACTIVATIONS, "lr": lrs,
            "dropout": [0.0], "seeds": seeds,
            "execution": {"mode": mode, "pack_size": pack_size, "rerun": True}}


class _Timed:
    """Seconds spent in the wrapped methods of an object's class (this process only)."""

    def __init__(self, cls, names):
        self.seconds, self.calls = 0.0, 0
        for name in names:
            original = getattr(cls, name)

            def timed(*args, _original=original, **kwargs):
                started = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - started
                    self.calls += 1
            setattr(cls, name, timed)


def _median_ms(client, url: str, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(url)
        times.append(1000 * (time.perf_counter() - started))
        response.raise_for_status()
    return round(statistics.median(times), 1)


def _stop_api_and_its_head(api, settings) -> int:
    """The API server, then the Ray head it started for this home (``actsweep stop --force``): the
    head outlives its API by design, and an idle head with its dashboard uses 2-4 CPU-s a minute
    here. Returns how many of the head's processes are left."""
    from service.control.jobs import RayJobs
    from service.records import SweepStore

    api.stop()
    head, _ = RayJobs(settings).stop_own_head(True, SweepStore(settings.resolved_database_url))
    return len(head.processes()) if head is not None else 0


def measure_one(trials: int, mode: str, pack_size: int, home: Path) -> dict:
    """One sweep of ``trials``; everything measured about it."""
    import httpx
    from ray import tune

    from search_spaces.schema import SweepSpec
    from service.local_servers import ApiServer
    from service.records import SweepRecord, SweepStore
    from service.driver.sweeps import connect_ray, run_sweep
    from service.reporting.figures import stored_figures
    from service.reporting.render import render
    from service.reporting.results import sweep_results
    from service.runs.store import RunStore
    from service.settings import Settings
    from workers.trial import member_results

    settings = Settings(home=home, num_cpus=os.cpu_count(), dashboard=False, download=False)
    connect_ray(settings)
    spec = SweepSpec.model_validate(tiny_spec(trials, mode, pack_size))
    writes = _Timed(RunStore, ["log_params", "create_trial_run", "log_epoch", "log_run_batch", "log_runs", "log_dataset",
                               "end_run", "end_runs", "sign", "copy_run", "start_sweep"])
    training: dict[str, float] = {}

    class Training(tune.Callback):  # each Tune trial's own epoch time (training and evaluation)
        def on_trial_result(self, iteration, trials, trial, result, **info):
            members = [values for _, values in member_results(result)]
            training[trial.trial_id] = training.get(trial.trial_id, 0.0) + members[0].get("epoch_seconds", 0.0)

    env = {**os.environ, "ACTSWEEP_HOME": str(home), "ACTSWEEP_DOWNLOAD": "false", "ACTSWEEP_DASHBOARD": "false"}
    api = ApiServer(env, log=home / "api.log").start(timeout_s=120)  # (it starts its own Ray head: a minute on busy cores)
    during: list[float] = []  # the sweep list's latency while the sweep runs, ms (one request every 0.5 s)
    running = threading.Event()
    running.set()

    def poll_api():
        with httpx.Client(base_url=api.url, timeout=60) as client:
            while running.is_set():
                asked = time.perf_counter()
                client.get("/sweeps?limit=20").raise_for_status()
                during.append(1000 * (time.perf_counter() - asked))
                time.sleep(0.5)

    poller = threading.Thread(target=poll_api, daemon=True)
    poller.start()
    memory_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    try:
        outcome = run_sweep(spec, settings, callbacks=(Training(),))
    except BaseException:
        _stop_api_and_its_head(api, settings)
        raise
    finally:
        running.clear()
        poller.join()
    wall = time.perf_counter() - started
    memory_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    slots = min(len(training), os.cpu_count() or 1)
    overhead = (wall - sum(training.values()) / max(slots, 1)) / outcome.trials

    runs = RunStore(settings.resolved_tracking_uri)
    started = time.perf_counter()
    frame = runs.trial_runs(outcome.sweep_id)
    histories = runs.histories(frame, ["train_loss", "val_error"])
    read = time.perf_counter() - started
    # nothing lost or written twice: a run per grid point, each FINISHED with its one epoch once
    losses = histories[histories["metric"] == "train_loss"]
    integrity = {"runs": len(frame), "grid_points": len(spec.grid_points()),
                 "duplicate_points": int(frame.duplicated(["activation", "lr", "dropout", "seed"]).sum()),
                 "finished": int((frame["status"] == "FINISHED").sum()),
                 "runs_with_every_epoch_once": int((losses.groupby("run_id")["epoch"].agg(
                     lambda e: sorted(e) == list(range(1, spec.epochs + 1)))).sum())}

    started = time.perf_counter()
    results = sweep_results(settings.resolved_tracking_uri, outcome.sweep_id)
    render(results, "md")
    render(results, "html", stored_figures(results, runs))
    report = time.perf_counter() - started

    # the REST API on a record of this sweep: its trials, as the driver of a REST sweep leaves them
    store = SweepStore(settings.resolved_database_url)
    points = [{"activation": r["activation"], "lr": float(r["lr"]), "dropout": float(r["dropout"]),
               "seed": int(r["seed"]), "state": "succeeded", "epoch": 1, "mlflow_run_id": r["run_id"],
               "metrics": {"val_error": r.get("val_error"), "test_error": r.get("test_error")}}
              for r in frame.to_dict("records")]
    store.create(SweepRecord(id=outcome.sweep_id, experiment=spec.name, spec=spec.model_dump(mode="json"),
                             state="succeeded", trials_total=len(points), epochs=1,
                             mlflow_experiment_id=outcome.experiment_id, mlflow_parent_run_id=outcome.parent_run_id),
                 points)
    try:
        with httpx.Client(base_url=api.url, timeout=60) as client:
            last = (len(points) - 1) // 100 * 100
            rest = {f"trials page at {offset}": _median_ms(client, f"/sweeps/{outcome.sweep_id}/trials?offset={offset}&limit=100")
                    for offset in sorted({0, last // 2 // 100 * 100, last})}
            rest["sweep list"] = _median_ms(client, "/sweeps?limit=20")
            rest["sweep detail"] = _median_ms(client, f"/sweeps/{outcome.sweep_id}")
    finally:
        head_processes_left = _stop_api_and_its_head(api, settings)
    return {"trials": outcome.trials, "tune_trials": len(training), "mode": mode, "wall_s": round(wall, 1),
            "training_s": round(sum(training.values()), 1), "overhead_per_trial_s": round(overhead, 3),
            "driver_peak_mb_above_start": round((memory_peak - memory_before) / 1024, 1),
            "driver_peak_mb": round(memory_peak / 1024, 1),
            "mlflow_write_s": round(writes.seconds, 1), "mlflow_write_calls": writes.calls,
            "mlflow_read_s": round(read, 2), "report_s": round(report, 2), "rest_ms": rest, **integrity,
            "rest_during_sweep_ms": {"requests": len(during), "p50": round(statistics.median(during), 1),
                                     "p99": round(sorted(during)[int(0.99 * (len(during) - 1))], 1),
                                     "max": round(max(during), 1)} if during else {},
            "head_processes_left": head_processes_left}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["trials"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    axes[0].plot(sizes, [r["overhead_per_trial_s"] for r in rows], "o-", label="overhead (all of it)")
    axes[0].plot(sizes, [r["mlflow_write_s"] / r["trials"] for r in rows], "o-", label="of which MLflow writes")
    axes[0].set(title="orchestration per trial (flat: linear)", ylabel="s")
    axes[0].legend(fontsize=7)
    for name in rows[0]["rest_ms"]:
        axes[1].plot(sizes, [r["rest_ms"][name] for r in rows], "o-", label=name)
    axes[1].set(title="REST (median of 5)", ylabel="ms")
    axes[1].legend(fontsize=7)
    axes[2].plot(sizes, [r["report_s"] for r in rows], "o-", label="report (md + html)")
    axes[2].plot(sizes, [r["mlflow_read_s"] for r in rows], "o-", label="MLflow read")
    axes[2].set(title="reading back", ylabel="s")
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.set(xlabel="trials", xscale="log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="actsweep bench --workload scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,300,1000", help="comma list of trial counts (multiples of 8)")
    parser.add_argument("--mode", choices=["fused", "per_trial"], default="fused")
    parser.add_argument("--pack-size", type=int, default=50, help="grid points per fused pack")
    parser.add_argument("--out", default="docs/benchmarks/scale.json")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # (a child process: one size)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.mode, args.pack_size, Path(args.home))))
        return []
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as home:
            child = subprocess.run([sys.executable, "-m", "service.benchmarks.scale", "--one", str(size), "--home", home,
                                    "--mode", args.mode, "--pack-size", str(args.pack_size)],
                                   capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
            if child.returncode:
                sys.stderr.write(child.stderr[-3000:])
                raise SystemExit(f"scale: the {size}-trial sweep failed (exit {child.returncode})")
            row = json.loads(child.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['trials']:5d} trials ({row['tune_trials']} Tune trials): wall {row['wall_s']:.0f} s, overhead "
              f"{row['overhead_per_trial_s']:.3f} s/trial, driver +{row['driver_peak_mb_above_start']:.0f} MB, MLflow "
              f"write {row['mlflow_write_s']:.1f} s / read {row['mlflow_read_s']:.1f} s, report {row['report_s']:.1f} s, "
              f"runs {row['runs']} of {row['grid_points']} grid points ({row['duplicate_points']} duplicated, "
              f"{row['finished']} finished, {row['runs_with_every_epoch_once']} with every epoch once), "
              f"REST " + ", ".join(f"{k} {v:.0f} ms" for k, v in row["rest_ms"].items())
              + (f"; while it ran, the sweep list p50 {row['rest_during_sweep_ms']['p50']:.0f} ms, p99 "
                 f"{row['rest_during_sweep_ms']['p99']:.0f} ms over {row['rest_during_sweep_ms']['requests']} requests"
                 if row.get("rest_during_sweep_ms") else ""), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"mode": args.mode, "pack_size": args.pack_size, "cores": os.cpu_count(),
                               "rows": rows}, indent=2))
    plot(rows, out.with_suffix(".png"))
    print(f"written: {out} and {out.with_suffix('.png')}")
    return rows


if __name__ == "__main__":
    main()
