"""The ``actsweep`` command line: experiments, run, report, export, bench, serve."""
from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.table import Column, Table

from search_spaces import SpecError, catalog, load_spec, parse_set_options
from service.reporting import FORMATS
from service.settings import get_settings
from workers.activation_defs import ActivationError, parse_name
from workers.data import DatasetNotFound, SplitError

# Each command imports the MLflow, pandas and scipy side where it needs it (2.3 CPU-s): `--help`,
# `stop`, `experiments` and the API's worker process (which imports this module again) go without.
class OutputPathError(ValueError):
    """An --out that cannot be written: a file where a folder goes, a folder that does not exist."""


USER_ERRORS = (SpecError, DatasetNotFound, SplitError, ActivationError, OutputPathError)  # exit code 2 (and the MLflow side's in main)


def cmd_experiments(args) -> int:
    rows = catalog()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table("paper", "section", "dataset", "grid", "trials", "--quick")
    # the name is what a user types: whole on one line however narrow the terminal
    table.columns.insert(0, Column("name", no_wrap=True, min_width=max(len(row["name"]) for row in rows)))
    for row in rows:
        grid = row["grid"]
        table.add_row(row["name"], row["paper"], row["section"], row["dataset"],
                      f"{len(grid['activation'])} act × {len(grid['lr'])} lr × {len(grid['dropout'])} dropout "
                      f"× {grid['seeds']} seeds", str(row["trials"]), str(row["quick_trials"]))
    _listing_console().print(table)
    return 0


def _listing_console() -> Console:
    """A terminal's width on a terminal; in a pipe or a file, each row on one line (rich would wrap
    at 80 columns)."""
    return Console() if sys.stdout.isatty() else Console(width=400)


def _output_folder(out: str) -> Path:
    """``--out`` as a folder to write into, made where missing; OutputPathError where it cannot be."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = "a file, not a folder" if folder.exists() else exc.strerror.lower()
        raise OutputPathError(f"--out: cannot write into {out} ({why})") from None
    return folder


def _output_file(out: str) -> Path:
    """``--out`` as a file to write, in a folder that exists; OutputPathError where it cannot be."""
    path = Path(out)
    if path.is_dir():
        raise OutputPathError(f"--out: cannot write {out} (a folder)")
    if not path.parent.is_dir():
        raise OutputPathError(f"--out: cannot write {out} (no folder {path.parent})")
    return path


def cmd_activations(args) -> int:
    from workers.activation_defs import FAMILIES, expand_entry, plugin_families

    if args.plot:
        from service.reporting.figures import activation_figure
        from workers.activations import probe

        expressions: dict[str, str] = {}
        names = [d.canonical for entry in args.plot for d in expand_entry(_activation_entry(entry), expressions)]
        for name in names:
            probe(parse_name(name, expressions))
        _output_file(args.out).write_bytes(activation_figure(names, expressions))
        print(f"wrote {args.out}: f and f′ of {', '.join(names)} on [-4, 4]")
        return 0
    rows = [{"name": name, "kind": kind, "parameters": dict(family.params), "learnable": list(family.learnable),
             "per_unit": family.per_unit and bool(family.learnable), "stochastic": family.stochastic, "about": family.doc}
            for kind, table in (("built-in", FAMILIES), ("plugin", plugin_families())) for name, family in table.items()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table("name", "kind", "parameters (defaults)", "learnable", "about")
    for row in rows:
        learnable = ", ".join(row["learnable"]) + (" (per unit)" if row["per_unit"] else "")
        table.add_row(row["name"], row["kind"], ", ".join(f"{k}={v:g}" for k, v in row["parameters"].items()),
                      learnable, row["about"])
    _listing_console().print(table)
    print("Also: an expression, {expr: \"x * sigmoid(1.702 * x)\", name: gelu_sigmoid}, of x, numbers, + - * / **, "
          "comparisons and sigmoid tanh erf exp log1p softplus abs relu Phi where.")
    return 0


def _activation_entry(text: str):
    """``gelu(sigma=0.5)`` as it is, ``name=expression`` as an expression entry."""
    name, eq, expression = text.partition("=")
    if eq and "(" not in name:
        return {"name": name.strip(), "expr": expression}
    return text


def _spec_of(args):
    """The spec a ``run`` or ``plan`` command names, with its --set, --slice and seed options."""
    return load_spec(args.experiment, quick=args.quick, overrides=_overrides_of(args))


def _overrides_of(args) -> dict:
    """The spec fields a ``run`` or ``plan`` command overrides: --set, --slice and the seed options."""
    overrides = parse_set_options(args.set or [])
    for axis, values in parse_set_options(args.slice or [], flag="--slice").items():
        overrides[f"slice.{axis}"] = values if isinstance(values, list) else [values]
    if args.rerun:
        overrides["execution.rerun"] = True
    if args.until_decided:
        overrides["until_decided"] = {k: v for k, v in (("max_seeds", args.max_seeds),
                                                         ("seeds_per_round", args.seeds_per_round)) if v is not None}
    elif args.max_seeds is not None or args.seeds_per_round is not None:
        raise SpecError("--max-seeds and --seeds-per-round go with --until-decided")
    return overrides


def cmd_plan(args) -> int:
    """The execution plan a run would use, without training: on the configured cluster where
    ACTSWEEP_RAY_ADDRESS names one, else on this machine as a local Ray would see it."""
    settings = get_settings()
    spec = _spec_of(args)
    _check_memory_floor(spec)
    _check_footprint(spec, settings)
    from service.driver.observations import observe_cluster, observe_this_machine, plan_sweep
    from service.driver.sweeps import connect_ray, load_splits

    splits = load_splits(spec, settings)
    if settings.ray_address:
        _check_ray_address(settings)
        connect_ray(settings)
        cluster = observe_cluster()
    else:
        cluster = observe_this_machine(settings.num_cpus)
    plan = plan_sweep(spec, splits, settings.cuda_context_mb * 2 ** 20, cluster=cluster)
    if args.json:
        print(json.dumps(plan.as_dict()))
        return 0
    console = Console(soft_wrap=True)
    console.print(f"[bold]{spec.name}[/]{' (quick)' if args.quick else ''}: {spec.trial_count} trials of "
                  f"{spec.epochs} epochs on {spec.dataset} ({splits.sizes()['train']} training examples)")
    console.print(f"devices: {plan.devices}; trials train on {plan.device}")
    table = Table("setting", "resolved", "why")
    for key, value in (("execution.mode", plan.mode), ("execution.pack_size", plan.pack_size),
                       ("execution.gpus_per_trial", f"{plan.gpus_per_trial:g}"),
                       ("execution.cpus_per_trial", f"{plan.cpus_per_trial:g}")):
        table.add_row(key, str(value if value is not None else "–"), plan.why.get(key.split(".")[1], "set in the spec"
                      if key != "execution.pack_size" else "one trial per process"))
    for key in ("gpu_memory", "cuda_graphs"):
        if key in plan.why:
            table.add_row(key, "", plan.why[key])
    console.print(table)
    unit = "pack" if plan.mode == "fused" else "trial"
    sizes = {}
    for members in plan.units:
        sizes[members] = sizes.get(members, 0) + 1
    shapes = ", ".join(f"{count} of {members} member{'s' if members != 1 else ''}" for members, count in sorted(sizes.items()))
    console.print(f"{len(plan.units)} {unit}{'s' if len(plan.units) != 1 else ''} ({shapes}), {plan.slots} at once; "
                  f"each holds about {plan.unit_bytes / 2 ** 30:.2f} GiB on its device; {plan.trial_epochs} "
                  f"trial-epochs in the grid")
    return 0


def cmd_run(args) -> int:
    import psutil

    started = psutil.Process().create_time()  # the command's start, imports included
    settings = get_settings()
    spec = _spec_of(args)
    _check_memory_floor(spec)  # (before torch is imported: an impossible spec is refused in a second)
    from service.warm_run import request_body, run_via_api, running_api

    api = None if (settings.ray_address or os.environ.get("RAY_ADDRESS")) else running_api(settings)
    if api:  # this home's service runs: the sweep goes to it, as a POST would (its queue, warm driver and head)
        return run_via_api(api, settings, request_body(args.experiment, args.quick, _overrides_of(args), args.name),
                           args.json, started)
    _check_ray_address(settings)  # (a cluster where nothing listens, named before seconds of imports)
    from service.background import in_background
    from service.driver.data import load_splits  # (numpy only)
    from service.ray_session import start_ray

    loading = in_background(load_splits, spec, settings)  # (while torch imports and the spec is checked)
    if (os.cpu_count() or 1) >= settings.early_ray_cpus:  # (many cores: Ray's start overlaps the checks below)
        start_ray(settings)
    from workers.activations import probe

    for name in spec.activation:  # f and f′ finite on a probe tensor, or a clear error now
        probe(spec.activation_def(name))
    _check_footprint(spec, settings)
    splits = loading.result()  # (a missing dataset raises DatasetNotFound, with instructions; no Ray started)
    # On few cores Ray starts once the spec and the data are good (a refusal prints one line, no Ray's),
    # in the background while Tune and MLflow import (docs/plan.md: what starting it sooner measured)
    start_ray(settings)  # (a start already under way: the same one)
    # Imported once the spec is valid: Ray and Tune take seconds to import.
    from service.driver.progress import LiveProgress
    from service.driver.sweeps import connect_ray, log_sweep_figures, run_sweep
    from service.records import new_sweep_id
    from service.reporting.render import render
    from service.reporting.results import sweep_results
    from service.runs.links import experiment_link

    console = Console(stderr=True, soft_wrap=True)
    sweep_id = new_sweep_id()
    part = f" slice {spec.slice.label()}" if spec.slice.label() else ""
    console.print(f"[bold]{spec.name}[/] sweep {sweep_id}{' (quick)' if args.quick else ''}{part}: "
                  f"{len(spec.activation)} activations × {len(spec.lr)} lrs × {len(spec.dropout)} dropouts × "
                  f"{len(spec.seed_list)} seeds = {spec.trial_count} trials of {spec.epochs} epochs on {spec.dataset} "
                  f"({splits.sizes()['train']} training examples, from {splits.source})")
    dashboard = connect_ray(settings)
    marks = {"Ray ready": time.time()}  # (where the fixed start went: the wall time's line below)
    console.print(f"MLflow: {settings.resolved_tracking_uri}   Ray dashboard: {dashboard or 'not running'}")
    progress = LiveProgress(spec.trial_count, spec.epochs, console)
    if spec.until_decided:
        console.print(f"Seeds until decided: looks at {', '.join(map(str, spec.look_sizes()))} seeds, more seeds "
                      f"only for the configurations of open claims")
    try:
        outcome = run_sweep(spec, settings, splits=splits, sweep_id=sweep_id, quick=args.quick, name=args.name,
                            callbacks=(progress,), on_reused=progress.reused, on_round=progress.round,
                            on_plan=partial(_print_plan, console, marks), figures_later=True)
    except KeyboardInterrupt:  # Ctrl-C: Tune stopped the trials; the sweep's runs ended KILLED
        progress.progress.stop()
        print(f"actsweep: sweep {sweep_id} interrupted; the trials that finished are kept in the MLflow store, and "
              f"the same command again trains only the rest (the trial cache)", file=sys.stderr)
        return 130
    progress.progress.stop()  # Tune stops it, unless every trial came from the cache

    trained = time.time()
    results = sweep_results(settings.resolved_tracking_uri, outcome.sweep_id)  # read back from MLflow
    if args.json:
        print(json.dumps({"sweep_id": outcome.sweep_id, "results": results.rows()}))
    else:
        print(render(results, "md"))
        ui = settings.resolved_mlflow_ui_url
        serve = ("" if settings.resolved_tracking_uri.startswith(("http://", "https://"))
                 else f"mlflow ui --backend-store-uri {settings.resolved_tracking_uri}, then open ")
        console.print(f"Report again: actsweep report {outcome.sweep_id}\nMLflow UI: {serve}"
                      f"{experiment_link(ui, outcome.experiment_id, outcome.sweep_id)}", soft_wrap=True)
    log_sweep_figures(settings.resolved_tracking_uri, outcome)  # (after the tables: the MLflow UI's figures)
    if progress.first_epoch:  # where the wall time went (docs/plan.md): the fixed start, training, the report
        start = ", ".join(f"{name} at {at - started:.1f} s" for name, at in marks.items())
        console.print(f"Wall time {time.time() - started:.1f} s: {progress.first_epoch - started:.1f} s from the command "
                      f"to the first trial-epoch ({start}, first trial started at {progress.first_start - started:.1f} s), "
                      f"{trained - progress.first_epoch:.1f} s to the last, {time.time() - trained:.1f} s for the tables "
                      f"and figures")
    if outcome.errors:
        console.print(f"[red]{outcome.errors} of {outcome.trials} trials failed[/]")
        return 1
    return 0


def cmd_report(args) -> int:
    from service.reporting.render import render
    from service.reporting.results import sweep_results
    from service.runs.store import RunStore

    settings = get_settings()
    if args.from_export:
        from service.reporting.results import parse_spec_option, results_from_exports

        results = results_from_exports([Path(p) for p in args.from_export], parse_spec_option(args.spec))
        name = results.experiment
    elif args.sweep_id:
        results = sweep_results(settings.resolved_tracking_uri, args.sweep_id)
        name = args.sweep_id
    else:
        return _list_sweeps(settings.resolved_tracking_uri)
    figures = None
    if args.format == "html" or args.out:
        from service.reporting.figures import render_figures, stored_figures

        figures = render_figures(results) if args.from_export else stored_figures(
            results, RunStore(settings.resolved_tracking_uri))
    text = render(results, args.format, figures, settings.resolved_mlflow_ui_url)
    if args.out:
        out = _output_folder(args.out)
        path = out / f"{name}.{args.format}"
        path.write_text(text)
        print(path)
        if args.format != "html":  # (the HTML page embeds them)
            for figure, png in (figures or {}).items():
                (out / f"{name}_{figure}").write_bytes(png)
                print(out / f"{name}_{figure}")
    else:
        print(text)
    return 0


NEWEST_SWEEPS = 15  # listed by `actsweep report` without a sweep id


def _list_sweeps(tracking_uri: str) -> int:
    """`actsweep report` without a sweep: the newest sweeps in the store, for their ids."""
    from datetime import datetime

    from service.runs.store import RunStore
    from service.settings import mask_secrets

    sweeps = RunStore(tracking_uri).newest_sweeps(NEWEST_SWEEPS)
    where = mask_secrets(tracking_uri)  # (an MLflow server's URL may hold a password)
    if not sweeps:
        raise SpecError(f"report: no sweep in the MLflow store at {where} yet; run one (actsweep run), "
                        "or give --from-export FILE ...")
    table = Table("sweep id", "experiment", "name", "started", "state", title=f"The newest sweeps in {where}")
    for sweep in sweeps:
        started = datetime.fromtimestamp(sweep["start_time"] / 1000).strftime("%Y-%m-%d %H:%M") if sweep["start_time"] else ""
        named = "" if sweep["name"] == f"{sweep['experiment']}-{sweep['sweep_id']}" else sweep["name"]  # (not the default)
        table.add_row(sweep["sweep_id"], sweep["experiment"] + (" (quick)" if sweep["quick"] else ""), named, started,
                      sweep["state"].lower())
    _listing_console().print(table)
    print("actsweep report SWEEP_ID prints one sweep's tables")
    return 0


def cmd_record(args) -> int:
    from service.reporting.record import build_record

    for path in build_record(Path(args.manifest)):
        print(path)
    return 0


def cmd_export(args) -> int:
    from service.runs.exports import export_sweep
    from service.runs.store import RunStore

    for path in export_sweep(RunStore(get_settings().resolved_tracking_uri), args.sweep_id, _output_folder(args.out), args.format):
        print(path)
    return 0


def cmd_bench(args) -> int:
    from service.benchmarks.speed import main as bench

    bench([a for i, a in enumerate(args.bench_args) if not (i == 0 and a == "--")])
    return 0


def _check_ray_address(settings) -> None:
    from service.ray_address import wait_for_ray

    address = settings.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        wait_for_ray(address, settings.ray_join_timeout_s)


def _check_memory_floor(spec) -> None:
    """A dense model whose parameters alone exceed this machine's memory, refused without torch."""
    import psutil

    from workers.memory_floor import memory_floor_refusal

    refused = memory_floor_refusal(spec, psutil.virtual_memory().total)
    if refused is not None:
        raise SpecError(refused[1])


def _print_plan(console, marks: dict, plan) -> None:
    marks.setdefault("planned", time.time())  # (the first plan: seeds until decided plans each round)
    console.print(plan.summary(), soft_wrap=True)


def _check_footprint(spec, settings) -> None:
    """A trial larger than this machine's memory, or a sweep over ACTSWEEP_MAX_SWEEP_PFLOP, is refused
    before anything is allocated (estimated on the meta device: workers.footprint)."""
    import psutil

    from workers.footprint import unaffordable

    refused = unaffordable(spec, psutil.virtual_memory().total, settings.max_sweep_pflop * 1e15)
    if refused is not None:
        raise SpecError(refused[1])


def cmd_serve(args) -> int:
    settings = get_settings()
    if settings.api_token is None and not _loopback(args.host):  # (refused before seconds of imports)
        raise SpecError(f"--host: {args.host} is reachable from other machines, and without ACTSWEEP_API_TOKEN anyone "
                        f"there could run sweeps: set ACTSWEEP_API_TOKEN, or listen on 127.0.0.1 (the default)")
    import uvicorn

    from service.api.main import create_app
    from service.control.jobs import ClusterUnreachable, RayJobs
    from service.settings import mask_secrets

    try:  # this home's own head (reattached, or started on free ports), or the cluster it is pointed at
        jobs = RayJobs(settings)
        jobs.ensure_cluster(wait_s=settings.ray_join_timeout_s)
        jobs.ensure_driver_server()  # (its imports run while the API starts: the first sweep finds it warm)
    except (ClusterUnreachable, RuntimeError) as exc:
        print(f"actsweep serve: cannot join a Ray cluster: {mask_secrets(str(exc))}", file=sys.stderr)
        return 1
    from service.warm_run import forget_api, record_api

    record_api(settings, args.host, args.port)  # (where `actsweep run` finds this home's service)
    try:
        uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    finally:
        forget_api(settings)
    return 0


def cmd_stop(args) -> int:
    from service.control.jobs import RayJobs
    from service.records import SweepStore

    settings = get_settings()
    head, open_ids = RayJobs(settings).stop_own_head(args.force, SweepStore(settings.resolved_database_url))
    if head is None:
        print(f"no Ray head was started for {settings.root}")
        return 0
    if open_ids and not args.force:
        print(f"{len(open_ids)} sweep(s) still running on the Ray head at {head.dashboard_url}: {', '.join(open_ids)}. "
              f"Wait for them, cancel them (DELETE /sweeps/ID), or stop anyway with --force (they end "
              f"'interrupted')", file=sys.stderr)
        return 1
    print(f"stopped the Ray head at {head.dashboard_url}"
          + (f"; {len(open_ids)} sweep(s) interrupted: {', '.join(open_ids)}" if open_ids else ""))
    return 0


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="actsweep", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    experiments = commands.add_parser("experiments", help="list the experiment catalog")
    experiments.add_argument("--json", action="store_true", help="print the catalog as JSON")
    experiments.set_defaults(handler=cmd_experiments)

    activations = commands.add_parser("activations", help="list the activations (built-ins, plugins), or plot some")
    activations.add_argument("--plot", nargs="+", metavar="NAME",
                             help='draw f and f′ on [-4, 4]: names like relu "gelu(sigma=0.5)" swish, or '
                                  'NAME="EXPRESSION" (mish="x * tanh(softplus(x))")')
    activations.add_argument("--out", default="activations.png", help="the PNG --plot writes (default: activations.png)")
    activations.add_argument("--json", action="store_true", help="print the list as JSON")
    activations.set_defaults(handler=cmd_activations)

    run = commands.add_parser("run", help="run a sweep and print its results table")
    run.add_argument("experiment", help="a catalog name (see `actsweep experiments`) or a YAML spec file")
    run.add_argument("--quick", action="store_true", help="the spec's quick variant (minutes on 2 CPU cores)")
    run.add_argument("--set", action="append", metavar="NAME=VALUE",
                     help="override a spec field; a comma list replaces a grid axis (repeatable)")
    run.add_argument("--slice", action="append", metavar="AXIS=VALUES",
                     help="run only part of the grid, e.g. seed=0 or activation=relu,elu (repeatable); "
                          "combine the parts with `actsweep report --from-export`")
    run.add_argument("--name", help="a name for the sweep's MLflow parent run")
    run.add_argument("--json", action="store_true", help='end with one JSON object {"sweep_id", "results"}')
    run.add_argument("--rerun", action="store_true",
                     help="train every trial, even those an earlier sweep already trained identically")
    run.add_argument("--until-decided", action="store_true",
                     help="after the spec's seeds, add seeds in rounds to the configurations of undecided claims "
                          "until every claim is decided or --max-seeds (a group-sequential design, docs/statistics.md)")
    run.add_argument("--max-seeds", type=int, metavar="N", help="with --until-decided: the seed budget (default 20)")
    run.add_argument("--seeds-per-round", type=int, metavar="K", help="with --until-decided: seeds added per round "
                                                                      "(default 2)")
    run.set_defaults(handler=cmd_run)

    plan = commands.add_parser("plan", help="the execution plan a run would use (devices, packs, GPU shares, memory, "
                                            "why each auto resolved so), without training")
    plan.add_argument("experiment", help="a catalog name (see `actsweep experiments`) or a YAML spec file")
    plan.add_argument("--quick", action="store_true", help="the spec's quick variant")
    plan.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a spec field (repeatable)")
    plan.add_argument("--slice", action="append", metavar="AXIS=VALUES", help="plan only part of the grid (repeatable)")
    plan.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    plan.set_defaults(handler=cmd_plan, rerun=False, until_decided=False, max_seeds=None, seeds_per_round=None)

    report = commands.add_parser("report", help="print the tables of a finished sweep")
    report.add_argument("sweep_id", nargs="?", help="a sweep in the MLflow store (or use --from-export); without one, the newest sweeps are listed")
    report.add_argument("--from-export", nargs="+", metavar="FILE",
                        help="build the report from exported sweeps (actsweep export): slices of one grid, or "
                             "sweeps whose trials train alike, read under --spec")
    report.add_argument("--spec", metavar="EXPERIMENT_OR_YAML",
                        help="with --from-export: report the trials on this spec's grid, with its protocol and claims")
    report.add_argument("--format", choices=FORMATS, default="md")
    report.add_argument("--out", metavar="DIR", help="write the report (and its figures, as PNG) into DIR")
    report.set_defaults(handler=cmd_report)
    export = commands.add_parser("export", help="write a sweep's runs as tidy data: a row per trial and epoch")
    export.add_argument("sweep_id")
    export.add_argument("--format", choices=("csv", "csv.gz", "parquet"), default="csv")
    export.add_argument("--out", metavar="DIR", default=".", help="folder for <sweep_id>.csv and its <sweep_id>.json")
    export.set_defaults(handler=cmd_export)
    record = commands.add_parser("record", help="rebuild a reproduction record (reports, figures, index) from exports")
    record.add_argument("manifest", help="the campaign manifest, e.g. docs/reproductions/campaign.yaml")
    record.set_defaults(handler=cmd_record)
    bench = commands.add_parser("bench", add_help=False,
                                help="plain PyTorch vs per-trial vs fused, on the paper's MNIST classifier")
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="see `actsweep bench --help`")
    bench.set_defaults(handler=cmd_bench)
    serve = commands.add_parser("serve", help="the REST service (sweeps run as Ray jobs)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(handler=cmd_serve)

    stop = commands.add_parser("stop", help="end the Ray head this ACTSWEEP_HOME started (once its sweeps are over)")
    stop.add_argument("--force", action="store_true", help="end it anyway; its open sweeps end 'interrupted'")
    stop.set_defaults(handler=cmd_stop)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``actsweep`` console script; exit code 2 for bad input. Called without
    ``argv`` (as the console script is), the process ends with the command (:func:`_end_process`)."""
    ends_process = argv is None
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # its options are the benchmark's own (argparse's REMAINDER drops leading options)
        argv = ["bench", "--", *argv[1:]]
    args = build_parser().parse_args(argv)
    code = _command(args)
    if ends_process:
        _end_process(code)
    return code


def _command(args) -> int:
    # A new MLflow store announces its tables ("Creating initial MLflow database tables...") at INFO
    # on stderr, between the command's own lines.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    if args.command in ("report", "export"):
        from service.runs.store import configure_mlflow_client

        settings = get_settings()
        configure_mlflow_client(settings.mlflow_http_retries, settings.mlflow_http_timeout_s)
    try:
        return args.handler(args)
    except USER_ERRORS as exc:
        return _user_error(exc)
    except Exception as exc:
        joined = sys.modules.get("service.ray_address")  # (imported by the commands that join Ray)
        if joined is not None and isinstance(exc, joined.RayUnreachable):
            print(f"actsweep: cannot join a Ray cluster: {exc}", file=sys.stderr)
            return 1
        # The MLflow side's errors, imported only now: a command that can raise them has imported them.
        from service.runs.exports import ExportError
        from service.runs.store import RunsUnavailable, SweepNotFound
        from service.settings import mask_secrets

        if isinstance(exc, (SweepNotFound, ExportError)):
            return _user_error(exc)
        if isinstance(exc, RunsUnavailable):  # no verdict on any sweep: say which store, and that nothing changed
            print(f"actsweep: the MLflow store at {mask_secrets(get_settings().resolved_tracking_uri)} did not answer "
                  f"({exc}); nothing was changed, try again later", file=sys.stderr)
            return 3
        raise


def _end_process(code: int) -> NoReturn:
    """Exit as Python would, less the 2-3 s its teardown takes once torch, Ray, gRPC and MLflow are
    loaded (docs/plan.md): what an exit does first is done here, in its order (``threading``'s
    shutdown: its exit hooks, which stop the thread pools, then a join of every thread that is not a
    daemon; then every ``atexit`` handler: Ray's shutdown, the store writer's drain, logging's flush);
    then what Ray's shutdown left of a local Ray is killed (service.ray_session.kill_survivors), and
    ``os._exit`` skips the rest: the freeing of every module and the C++ libraries' destructors.
    (Ray is not stopped sooner, while the figures are drawn: runs that did so exited with status 1
    and no message in 3 of 5 test runs under load, their driver's log ending in Ray's "core worker
    process is not initialized yet or already shutdown", the exit it takes when something calls
    into it after ``ray.shutdown``.)"""
    session = sys.modules.get("service.ray_session")  # (imported by the commands that start Ray)
    ray_processes = session.local_ray_processes() if session is not None else []
    threading._shutdown()  # (private, but what the interpreter itself calls at exit)
    atexit._run_exitfuncs()
    if session is not None:
        session.kill_survivors(ray_processes)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0))  # (a handler's None is 0, as for sys.exit)


def _user_error(exc: Exception) -> int:
    print(f"actsweep: error: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
