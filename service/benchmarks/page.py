"""The benchmarks page, docs/benchmarks/README.md, generated from the evidence beside it.

    python -m service.benchmarks.page           # rewrites docs/benchmarks/README.md
    python -m service.benchmarks.page --check   # exits 1, naming the lines, where the page and the evidence differ

Every figure the docs quote is a row here: what was measured, the figure as read from its evidence (a
JSON file or a log under docs/benchmarks/), the command that measures it again, the hardware, the date
and the commit. The command, hardware, date and commit are read from the evidence where it holds them
(keys of those names, or a function of the row), else from what the row declares; never both.

To add a row: run the command with ``--out docs/benchmarks/NAME.json``, add a ``Row`` to its section
below (a stable ``anchor``, the ``figure`` as a function of the parsed JSON), run this module, and link
the docs to ``docs/benchmarks/README.md#ANCHOR``. A JSON that no row reads is deleted: git keeps it.

Only json, re and pathlib: the page is rendered and checked without torch.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Union

BENCH = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
PAGE = "README.md"
META = ("command", "hardware", "date", "commit")

Read = Callable[[Any], str]
Field = Union[str, Read, None]


@dataclass(frozen=True)
class Row:
    """One measured figure. ``source`` is a file under docs/benchmarks/ (``.json`` parsed, anything else
    read as text); ``part`` a key path into the JSON (``"runs.0"``) that the figure and the metadata read."""
    anchor: str
    what: str
    source: str
    figure: Read
    part: str = ""
    command: Field = None
    hardware: Field = None
    date: Field = None
    commit: Field = None


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    rows: tuple[Row, ...]
    needs: str = ""  # a file the whole section reads: where it is missing, the section says so
    missing: str = ""


class EvidenceError(ValueError):
    """A row whose evidence is missing, or that names a field twice or not at all."""


# ---- reading the evidence

def at(data: Any, path: str) -> Any:
    """The value at a dotted key path: ``at(d, "results.fused.seconds")``, list items by index."""
    for key in filter(None, path.split(".")):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def key(path: str) -> Read:
    return lambda data: str(at(data, path))


def load(bench: Path, row: Row) -> Any:
    path = bench / row.source
    if not path.is_file():
        raise EvidenceError(f"row {row.anchor}: {row.source} is missing from {bench}")
    text = path.read_text()
    return at(json.loads(text), row.part) if path.suffix == ".json" else text


def meta(row: Row, data: Any, name: str) -> str:
    declared = getattr(row, name)
    held = data.get(name) if isinstance(data, dict) else None
    if callable(declared):
        return declared(data)
    if held is not None and declared is not None:
        raise EvidenceError(f"row {row.anchor}: {name} is in {row.source} and declared by the row; keep one")
    if held is None and declared is None:
        raise EvidenceError(f"row {row.anchor}: no {name} (neither {row.source} nor the row gives one)")
    return str(held if held is not None else declared)


def num(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


def ms(value: float) -> str:
    return f"{num(value / 1000, 2)} s" if value >= 1000 else f"{num(value, 0)} ms"


def spread(values: list[float], unit: str = " s") -> str:
    low, high = min(values), max(values)
    return f"{num(low)}{unit}" if low == high else f"{num(low)}-{num(high)}{unit}"


WALL = re.compile(r"Wall time ([\d.]+) s: [\d.]+ s from the command to the first trial-epoch \(([^)]*)\), "
                  r"([\d.]+) s to the last, ([\d.]+) s for the tables")


def wall_line(text: str, after: str = "") -> dict[str, float]:
    """The numbers of ``actsweep run``'s last line (the first such line after the marker ``after``)."""
    start = text.index(after) if after else 0
    found = WALL.search(text, start)
    if not found:
        raise EvidenceError(f"no 'Wall time' line after {after!r}")
    marks = dict((name, float(value)) for value, name in (
        (m.group(2), m.group(1)) for m in re.finditer(r"(Ray ready|planned|first trial started) at ([\d.]+) s",
                                                      found.group(2))))
    return {"wall": float(found.group(1)), "training": float(found.group(3)), "tables": float(found.group(4)),
            "ray": marks.get("Ray ready", float("nan")), "first_trial": marks["first trial started"]}


def cifar_log_rows(text: str, net: str) -> dict[str, dict[str, float]]:
    """A cifar bench log's rows for one net: trial-epochs/s, share of the fp32 peak, epoch seconds."""
    block = text[text.index(f"{net}:"):]
    rows = {}
    for line in block.splitlines()[1:]:
        found = re.match(r"\s+(\w+)\s+([\d.]+) trial-epochs/s.*?([\d.]+)% of fp32 peak.*?an epoch per trial ([\d.]+) s", line)
        if not found:
            break
        rows[found.group(1)] = {"rate": float(found.group(2)), "fp32": float(found.group(3)) / 100,
                                "epoch_s": float(found.group(4))}
    return rows


# ---- the figures, each a function of its evidence

def demo_runs(d: dict) -> str:
    runs = d["runs"]
    return (f"**{spread([r['wall_s'] for r in runs])}** to its last line ({len(runs)} runs); the first trial "
            f"started at {spread([r['first_trial_s'] for r in runs])}, training took "
            f"{spread([r['training_s'] for r in runs])}, the process exited at {spread([r['exited_s'] for r in runs])}")


def demo_fresh(d: dict) -> str:
    return f"**{num(d['wall_s'])} s** to its last line, every trial trained (none from the cache)"


def demo_plans(d: dict) -> str:
    auto, lone = d["auto"], d["per_trial"]
    return (f"`auto` (two fused packs of 12): **{num(auto['wall_s'], 0)} s**; one trial per process (the code "
            f"before `auto`): {num(lone['wall_s'], 0)} s ({lone['wall_s'] / auto['wall_s']:.2f}×)")


def paper_cpu(d: dict) -> str:
    r = d["results"]
    text = f"fused **{num(r['fused']['seconds'])} s**"
    if "per_trial" in r:
        text += f", one trial per process through Tune and MLflow {num(r['per_trial']['seconds'])} s"
    text += (f", the plain PyTorch script per trial {num(r['plain']['seconds'])} s "
             f"(**{d['ratios']['fused/plain']:.2f}×**")
    if "per_trial/plain" in d["ratios"]:
        text += f" and {d['ratios']['per_trial/plain']:.2f}×"
    peaks = d["machine"]["peaks_gflops"]
    return text + (f"); fused at {pct(r['fused']['steady_fraction_of_fp32_peak'])} of the fp32 peak in steady state; "
                   f"matmul peaks fp32 {num(peaks['fp32'], 0)} GFLOP/s, bf16 {num(peaks['bf16'], 0 if peaks['bf16'] >= 100 else 1)}"
                   + ("" if d["machine"]["native_bf16"] else " (emulated)"))


def paper_threads(d: dict) -> str:
    one, two = d["results"]["fused"], d["results"]["fused_threads"]
    return (f"a pack per core, one thread each: **{one['steady_trial_epochs_per_s']:.3f}** steady trial-epochs/s, "
            f"{num(one['fixed_start_s'])} s of fixed start; one pack on both cores: "
            f"{two['steady_trial_epochs_per_s']:.3f} and {num(two['fixed_start_s'])} s")


def paper_compile(d: dict) -> str:
    eager, compiled = d["results"]["fused"], d["results"]["fused_compile"]
    return (f"`torch.compile`d packs: steady {d['ratios']['fused_compile/fused steady']:.2f}× the eager ones "
            f"({compiled['steady_trial_epochs_per_s']:.3f} against {eager['steady_trial_epochs_per_s']:.3f} "
            f"trial-epochs/s), end to end {d['ratios']['fused_compile/fused']:.2f}× ({num(compiled['seconds'])} s "
            f"against {num(eager['seconds'])} s, {num(compiled['fixed_start_s'])} s of fixed start with compilation)")


def quick_cpu(d: dict) -> str:
    r = d["results"]
    return (f"fused **{num(r['fused']['seconds'])} s**, one trial per process {num(r['per_trial']['seconds'])} s, "
            f"the plain script {num(r['plain']['seconds'])} s ({d['ratios']['fused/plain']:.2f}× and "
            f"{d['ratios']['per_trial/plain']:.2f}×); each variant the faster of {d['repeats']} runs")


def profile(d: dict) -> str:
    p = d["phases_s"]
    return (f"a steady epoch **{num(d['steady_epoch_s'], 2)} s** ({d['trial_epochs_per_s']:.3f} trial-epochs/s, "
            f"{d['steady_percent_of_fp32_peak']:.0f}% of the fp32 peak): forward {num(p['train.forward'])} s, "
            f"backward {num(p['train.backward'])} s, Adam {num(p['train.optimizer'])} s, evaluation "
            f"{num(p['evaluate'])} s; the last epoch with Figure 3's noisy copies {num(d['profiled_last_epoch_s'])} s")


def step_ops(d: dict) -> str:
    ops, before = d["step_ops"], d["step_ops"][next(k for k in d["step_ops"] if k.startswith("before"))]
    return (f"**{ops['pack_18']:,}** aten ops a training step at 18 members, {ops['pack_360']:,} at 360 "
            f"(before the bounded step: {before['pack_18']:,} and {before['pack_360']:,}); a lone "
            f"`nn.Sequential` with `torch.optim.Adam`: {ops['lone_sequential']:,}")


def bounded_step_cost(d: dict) -> str:
    means = d["dropout_0"]["means"]
    return (f"end to end {num(means['end_to_end_s']['new'])} s with the bounded step, {num(means['end_to_end_s']['old'])} s "
            f"before (means of {len(d['dropout_0']['end_to_end_s']['new'])}, alternating); steady "
            f"{means['steady']['new']:.3f} against {means['steady']['old']:.3f} trial-epochs/s")


def wide_gemm(d: dict) -> str:
    small, large = d["batches"]["128"], d["batches"]["2000"]
    return (f"one wide GEMM for a shared-input first layer, training at batch 128: "
            f"{small['wide']['speedup_forward_backward']:.2f}× laid out once, "
            f"{small['wide_relaid']['speedup_forward_backward']:.2f}× laid out each step; evaluation's first layer "
            f"at batch 2,000: up to {large['wide_relaid']['speedup_forward']:.2f}×")


def eval_batch(d: dict) -> str:
    times = d["evaluation_s_by_batch"]
    return "evaluating 10,000 images: " + ", ".join(f"{num(s, 2)} s at batch {int(b):,}" for b, s in times.items())


def seed_slice(d: dict) -> str:
    return (f"**{num(d['wall_s'], 0)} s ({d['wall_s'] / 60:.1f} min)** for {d['runs']} trials × "
            f"{d['rows'] // d['runs']} epochs")


def drift(d: dict) -> str:
    first, last = d["after_epoch_1"]["train_loss"], d["after_the_last"]["val_loss"]
    text = (f"median difference after epoch 1, training loss: GELU {first['gelu_tanh']['median']:.1e}, ReLU "
            f"{first['relu']['median']:.1e}; after the last, validation loss: GELU {last['gelu_tanh']['median']:.1e}, "
            f"ReLU {last['relu']['median']:.1e}")
    if "seed_range_median" in last["relu"]:
        text += (f", against a range over seeds of {last['gelu_tanh']['seed_range_median']:.1e} and "
                 f"{last['relu']['seed_range_median']:.1e}")
    return text


def engine_rows(d: dict) -> dict[tuple[int, str], dict]:
    return {(r["members"], r["variant"]): r for r in d["rows"]}


def engine_384(d: dict) -> str:
    r = engine_rows(d)
    graph = r[(384, "engine")]
    return (f"a pack of 384: **{num(graph['steady_trial_epochs_per_s'])} trial-epochs/s** with CUDA graphs "
            f"({pct(graph['share_of_fp32'])} of the fp32 peak), {num(r[(384, 'engine_eager')]['steady_trial_epochs_per_s'])} "
            f"eager; TF32 {num(r[(384, 'engine_tf32')]['steady_trial_epochs_per_s'])}, bf16 "
            f"{num(r[(384, 'engine_bf16')]['steady_trial_epochs_per_s'])}; 768 members {num(r[(768, 'engine')]['steady_trial_epochs_per_s'])}")


def engine_small(d: dict) -> str:
    r = engine_rows(d)
    return "; ".join(
        f"{n} members: {num(r[(n, 'engine')]['steady_trial_epochs_per_s'])} with CUDA graphs, "
        f"{num(r[(n, 'engine_eager')]['steady_trial_epochs_per_s'])} eager "
        f"({r[(n, 'engine')]['steady_trial_epochs_per_s'] / r[(n, 'engine_eager')]['steady_trial_epochs_per_s']:.1f}×)"
        for n in (24, 96))


def paper_gpu(d: dict) -> str:
    r = d["results"]
    return (f"the engine alone {num(r['engine']['steady_trial_epochs_per_s'])} trial-epochs/s steady; through Tune and "
            f"MLflow **{num(r['fused']['steady_trial_epochs_per_s'])}** steady, {num(r['fused']['seconds'])} s end to end "
            f"of which {num(r['fused']['fixed_start_s'])} s is the fixed start; {d['step_ops']['pack_360']} aten ops "
            f"a step (a CUDA graph replay) at 18 and 360 members")


def machine(d: dict) -> str:
    m = d.get("machine", d)
    return f"one {m['processor']}, {m['cores']} cores" if m.get("device") == "cuda" else f"{m['cores']} cores, {m['processor']}"


def cifar_rows(d: dict, net: str) -> dict[str, dict[str, float]]:
    return {name: {"rate": r["trial_epochs_per_s"], "fp32": r["share_of_fp32_peak"], "epoch_s": r["epoch_seconds_per_trial"]}
            for name, r in d["nets"][net]["rows"].items()}


def wrn(rows: dict[str, dict[str, float]]) -> str:
    return (f"WRN-40-4 in fp32 at **{pct(rows['per_trial']['fp32'])} of the fp32 peak**; a TF32 epoch of 45,000 images "
            f"in **{num(rows['per_trial_tf32_channels_last']['epoch_s'], 2)} s** channels-last "
            f"({num(rows['per_trial_tf32']['epoch_s'], 2)} s channels-first); the plain script "
            f"{rows['plain']['rate']:.3f} trial-epochs/s, TF32 channels-last {rows['per_trial_tf32_channels_last']['rate']:.3f}")


def shallow(rows: dict[str, dict[str, float]]) -> str:
    best = rows["per_trial_tf32_channels_last"]["rate"]
    text = (f"cifar10_shallow, TF32 channels-last: **{best:.3f}** trial-epochs/s, {best / rows['plain']['rate']:.1f}× the "
            f"plain script ({rows['plain']['rate']:.3f}); fp32 {rows['per_trial']['rate']:.3f} "
            f"({pct(rows['per_trial']['fp32'])} of the fp32 peak)")
    if "per_trial_channels_last" in rows:
        text += f", fp32 channels-last {rows['per_trial_channels_last']['rate']:.3f}"
    return text + f"; 4 fp32 trial processes on the card {rows['processes']['rate']:.3f} together"


def elu_net(rows: dict[str, dict[str, float]]) -> str:
    return (f"elu_cifar100_11layer: fp32 {rows['per_trial']['rate']:.3f} trial-epochs/s, TF32 channels-last "
            f"{rows['per_trial_tf32_channels_last']['rate']:.3f}, the plain script {rows['plain']['rate']:.3f}")


def fig2_gpu(text: str) -> str:
    w = wall_line(text)
    ray = "" if w["ray"] != w["ray"] else f"Ray ready at {num(w['ray'])} s, "
    return (f"**{num(w['wall'])} s** from the command to the tables: {ray}the first trial started at "
            f"{num(w['first_trial'])} s, {num(w['training'])} s of training, {num(w['tables'])} s for the tables")


def gpu_plan(text: str) -> str:
    found = re.search(r"(\d+) packs? \((\d+) of (\d+) members\).*?about ([\d.]+) GiB", text)
    return (f"{found.group(1)} fused pack of {found.group(3)} members on the GPU, CUDA graphs, about "
            f"**{found.group(4)} GiB**")


def start_order(text: str) -> str:
    first, after = wall_line(text, "== start_early_ray_cpus_1 "), wall_line(text, "== start_early_ray_cpus_100000 ")
    return (f"Figure 2 for one epoch: Ray started first, ready at {num(first['ray'])} s, the first trial at "
            f"**{num(first['first_trial'])} s**; Ray after the spec's checks: {num(after['ray'])} s and "
            f"{num(after['first_trial'])} s")


def scale_1000(d: dict) -> str:
    r = d["rows"][-1]
    pages = [v for k, v in r["rest_ms"].items() if k.startswith("trials page")]
    return (f"{r['trials']:,} one-epoch trials in **{num(r['wall_s'], 0)} s**: {r['overhead_per_trial_s']:.3f} s of "
            f"orchestration a trial, the driver +{num(r['driver_peak_mb_above_start'], 0)} MB; a REST page of 100 "
            f"trials {spread(pages, ' ms')}")


def scale_10000(d: dict) -> str:
    r = d["rows"][-1]
    during = r["rest_during_sweep_ms"]
    return (f"{r['trials']:,} one-epoch trials in **{num(r['wall_s'], 0)} s**: {r['overhead_per_trial_s']:.3f} s of "
            f"orchestration a trial, the driver +{num(r['driver_peak_mb_above_start'], 0)} MB, "
            f"{r['runs_with_every_epoch_once']:,} of {r['grid_points']:,} runs whole; the sweep list while it ran "
            f"p50 {num(during['p50'], 0)} ms, p99 {num(during['p99'], 0)} ms; the sweep's detail after "
            f"{num(r['rest_ms']['sweep detail'], 0)} ms; the report {num(r['report_s'])} s")


def load_api(d: dict) -> str:
    text = (f"**{num(d['requests_per_s'])} requests/s**, p50 {ms(d['p50_ms'])}, p99 {ms(d['p99_ms'])}, "
            f"{d['server_errors']} server errors")
    return text + (f"; {d['sweeps_accepted']} sweeps accepted, {d['sweeps_lost']} lost" if d["sweeps_accepted"] else "")


def coldstart(d: dict) -> str:
    return (f"`import service.api.main` and `create_app()` in a new process **{num(d['import_s'], 2)} s**; "
            f"`actsweep serve` to its first `/healthz` {num(d['serve_to_healthz_s'], 2)} s; the import's peak "
            f"memory {d['import_peak_mib']} MiB")


def bookkeeping_row(d: dict, store: str, writer: str, flush: float) -> dict:
    return next(r for r in d["rows"] if r["store"] == store and r.get("writer", writer) == writer and r["flush_s"] == flush)


def bookkeeping_sql(d: dict) -> str:
    sql, batch = bookkeeping_row(d, "sqlite", "sql", 1.0), bookkeeping_row(d, "sqlite", "log_batch", 1.0)
    return (f"SQLite, the direct SQL writer (the default): **{sql['sustained_trial_epochs_per_s']:,.0f}** trial-epochs/s "
            f"sustained, {sql['trial_epochs_per_s']:,.0f} end to end; through MLflow's `log_batch`: "
            f"{batch['sustained_trial_epochs_per_s']:,.0f} and {batch['trial_epochs_per_s']:,.0f}")


def bookkeeping_wal(d: dict) -> str:
    wal, rollback = bookkeeping_row(d, "sqlite-wal", "sql", 1.0), bookkeeping_row(d, "sqlite", "sql", 1.0)
    return (f"SQLite in WAL mode, the SQL writer: {wal['sustained_trial_epochs_per_s']:,.0f} trial-epochs/s sustained, "
            f"against {rollback['sustained_trial_epochs_per_s']:,.0f} in the rollback journal")


def bookkeeping_http(d: dict) -> str:
    batched, each = bookkeeping_row(d, "http-postgres", "", 1.0), bookkeeping_row(d, "http-postgres", "", 0.0)
    return (f"{batched['trials']} trials × {batched['epochs']} epochs: **{num(batched['trial_epochs_per_s'], 0)}** "
            f"trial-epochs/s with a flush every second ({batched['epoch_write_calls']:,} writes), "
            f"{num(each['trial_epochs_per_s'], 0)} with a write per epoch ({each['epoch_write_calls']:,})")


def suite_run(d: dict) -> str:
    text = f"{d['passed']:,} passed, {d['skipped']} skipped, {d['failed']} failed in **{num(d['pytest_s'])} s ({d['pytest_s'] / 60:.1f} min)**"
    if "wall_s" in d:
        text += f", {num(d['wall_s'])} s for the whole command"
    if "past_half_their_bound" in d:
        text += f"; {d['past_half_their_bound']} tests past half their bound"
    return text


def suite_cpu(d: dict) -> str:
    return (f"{d['passed']:,} passed in {num(d['pytest_s'])} s: **{d['cpu_s']:,} CPU-s** ({d['test_processes_cpu_s']:,} in the "
            f"test processes' own tests, {d['started_cpu_s']:,} in the processes they started, "
            f"{d['outlived_cpu_s']:,} in ones that outlived their test, {d['daemons_cpu_s']:,} in daemons)")


def cuda_tests(text: str) -> str:
    found = re.search(r"(\d+) passed, \d+ deselected.*? in ([\d.]+)s", text)
    return f"**{found.group(1)} passed** in {num(float(found.group(2)))} s"


def from_export(name: str) -> Read:
    """An export's own metadata: its tags' hardware, its code's commit, the day it started."""
    return {"hardware": lambda d: d["tags"]["hardware"].split(";")[0],
            "commit": lambda d: d["tags"]["code_version"].split()[-1][:7],
            "date": lambda d: d["started_at"][:10]}[name]


# ---- the rows

EPYC_AVX2 = "2 cores of an AMD EPYC (AVX2, no native bf16)"
EPYC_AVX512 = "2 cores of an AMD EPYC (AVX-512, native bf16)"
XEON = "2 cores of an Intel Xeon (AVX-512, AMX), nothing else running"
H100 = "one NVIDIA H100 80GB HBM3, 16 cores"
PAPER = "`actsweep bench --workload paper`"
GPU_CHECK = "`make gpu-check`"

DEMO = Section("The demo", "`make demo`: 24 trials of 4 epochs on 20,000 MNIST images, in fused packs on a CPU.", (
    Row("demo-cpu", "`make demo`, from the command to its last line", "demo.json", demo_runs, part="xeon"),
    Row("demo-fresh-clone", "`make demo` in a fresh clone", "demo.json", demo_fresh, part="fresh_clone"),
    Row("demo-plans", "`make demo` with `auto`'s fused packs, and one trial per process", "demo.json", demo_plans,
        part="epyc"),
))

CPU = Section("Training on a CPU", "Figure 2's classifier (8 × 128, Adam, batch 128): `--workload paper` is 24 trials × "
              "3 epochs on all 55,000 training images, 70,000 evaluated each epoch; the quick workload 12,800.", (
    Row("engine-cpu", "the paper workload, fused against the plain PyTorch script", "speed_paper_avx512.json", paper_cpu,
        command="`actsweep bench --workload paper --variants plain,fused`", hardware=EPYC_AVX512, date="2026-11-25", commit="b0517e6"),
    Row("engine-cpu-avx2", "the paper workload, every variant", "speed_paper.json", paper_cpu,
        command=PAPER, hardware=EPYC_AVX2, date="2026-11-23", commit="4889f4e"),
    Row("engine-cpu-threads", "a pack per core, or one pack on every core", "speed_paper.json", paper_threads,
        command=PAPER, hardware=EPYC_AVX2, date="2026-11-23", commit="4889f4e"),
    Row("engine-cpu-compile", "`execution.compile: true` on a CPU", "speed_paper.json", paper_compile,
        command=PAPER, hardware=EPYC_AVX2, date="2026-11-23", commit="4889f4e"),
    Row("engine-cpu-quick", "the quick workload", "speed.json", quick_cpu,
        command="`actsweep bench --repeats 2`", hardware=machine, date="2026-11-22", commit="cd6cb9a"),
    Row("profile-epoch", "where a pack's epoch goes (12 members, one thread)", "profile_epoch.json", profile,
        command="`python benchmarks/profile_epoch.py --members 12 --threads 1`", hardware=EPYC_AVX512,
        date="2026-11-25", commit="b0517e6"),
    Row("step-ops", "aten ops a fused pack's training step dispatches", "speed_paper_packs_before_after.json", step_ops,
        command="`actsweep bench` (every workload prints them)", hardware=EPYC_AVX512, date="2026-11-26",
        commit="8af0c1d"),
    Row("bounded-step-cpu", "the bounded step's cost on a CPU", "speed_paper_packs_before_after.json",
        bounded_step_cost, command="`actsweep bench --workload paper --variants fused`, four times each way", hardware=EPYC_AVX512,
        date="2026-11-26", commit="8af0c1d"),
    Row("wide-gemm", "one wide GEMM for a shared-input first layer", "wide_gemm.json", wide_gemm,
        command="`python benchmarks/wide_gemm.py`", hardware=EPYC_AVX512, date="2026-11-25", commit="af50582"),
    Row("eval-batch", "the evaluation's batch size", "wide_gemm.json", eval_batch,
        command="`python benchmarks/wide_gemm.py`", hardware=EPYC_AVX512, date="2026-11-25", commit="af50582"),
    Row("fig2-slice-cpu", "a seed slice of Figure 2 (1 seed of 5), fused", "rerun_seed0/b5e5e7c70a4b.json", seed_slice,
        command="`actsweep run mnist_classification --slice seed=0 --set execution.mode=fused`",
        hardware=from_export("hardware"), date=from_export("date"), commit=from_export("commit")),
    Row("rerun-drift", "that seed slice against the committed record (trained on an AVX2 EPYC)",
        "rerun_seed0/drift_rerun_vs_record.json", drift,
        command="`python benchmarks/export_drift.py OLD NEW --spread EXPORT...`", hardware=EPYC_AVX512,
        date="2026-11-25", commit="af9b3fb"),
    Row("rerun-drift-old-code", "the record's own code rerun on the AVX-512 EPYC, against the record",
        "rerun_seed0/drift_old_code_vs_record.json", drift,
        command="`python benchmarks/export_drift.py OLD NEW --spread EXPORT...`", hardware=EPYC_AVX512,
        date="2026-11-25", commit="af50582"),
    Row("rerun-drift-code", "the new code against the old, both on the AVX-512 EPYC",
        "rerun_seed0/drift_rerun_vs_old_code.json", drift,
        command="`python benchmarks/export_drift.py OLD NEW --spread EXPORT...`", hardware=EPYC_AVX512,
        date="2026-11-25", commit="af9b3fb"),
))

GPU = Section("Training on a GPU", "Figure 2's classifier as one fused pack (the engine, `workers.fused.train_pack`), and "
              "through Ray Tune and MLflow; the convnets one trial at a time (`--workload cifar`: synthetic images in "
              "CIFAR's layout, training steps only).", (
    Row("engine-gpu", "the engine by pack size (synthetic MNIST-shaped data)", "engine_cuda_h100.json", engine_384,
        command="`python benchmarks/engine_scaling.py --device cuda --members 24,96,384,768 --variants "
                "engine,engine_eager,engine_tf32,engine_bf16`",
        hardware=key("device"), date="2026-11-26", commit="6f2fdfc"),
    Row("engine-gpu-small", "CUDA graphs against eager steps in small packs", "engine_cuda_h100.json", engine_small,
        command="the same", hardware=key("device"), date="2026-11-26", commit="6f2fdfc"),
    Row("paper-gpu", "the paper workload through Tune and MLflow", "gpu_check_h100/speed_paper_cuda.json", paper_gpu,
        command="`actsweep bench --device cuda --workload paper --variants engine,fused`", hardware=machine,
        date="2026-11-27", commit="a70db31"),
    Row("paper-gpu-h200", "the same on an H200", "speed_paper_cuda_h200.json", paper_gpu,
        command="`actsweep bench --device cuda --workload paper --variants engine,fused`", hardware=machine,
        date="2026-11-27", commit="0ed7b2c"),
    Row("cifar-wrn", "WRN-40-4 (cifar100_wrn), one trial", "gpu_check_h100/speed_cifar_cuda_wrn_elu.json",
        lambda d: wrn(cifar_rows(d, "cifar100_wrn")), command="`actsweep bench --device cuda --workload cifar`",
        hardware=machine, date="2026-11-27", commit="a70db31"),
    Row("cifar-shallow", "cifar10_shallow, one trial and four", "gpu_check_h100/bench_cifar.log",
        lambda text: shallow(cifar_log_rows(text, "cifar10_shallow")),
        command="`actsweep bench --device cuda --workload cifar`", hardware=H100, date="2026-11-27", commit="a70db31"),
    Row("cifar-elu", "the ELU paper's CIFAR-100 net, one trial", "gpu_check_h100/speed_cifar_cuda_wrn_elu.json",
        lambda d: elu_net(cifar_rows(d, "elu_cifar100_11layer")),
        command="`actsweep bench --device cuda --workload cifar`", hardware=machine, date="2026-11-27",
        commit="a70db31"),
    Row("cifar-h200", "the convnets on an H200 (the channels-last choices the plan reads)", "cifar_cuda.json",
        lambda d: "; ".join((wrn(cifar_rows(d, "cifar100_wrn")), shallow(cifar_rows(d, "cifar10_shallow")),
                             elu_net(cifar_rows(d, "elu_cifar100_11layer")))),
        command="`actsweep bench --device cuda --workload cifar`", hardware=machine, date="2026-11-27"),
    Row("cuda-tests", "the tests marked `cuda`", "gpu_check_h100/cuda_tests.log", cuda_tests,
        command=f"{GPU_CHECK} (`pytest -m cuda`)", hardware=H100, date="2026-11-27", commit="a70db31"),
))

FIG2_GPU = Section("Figure 2's full protocol on a GPU", "`actsweep run mnist_classification` with no flags: 90 trials × "
                   "50 epochs on all of MNIST, `execution: auto`, timed by `make gpu-check` from the command to the "
                   "printed tables.", (
    Row("fig2-gpu", "Figure 2's full protocol", "gpu_check_h100/fig2_full_protocol.log", fig2_gpu,
        command=GPU_CHECK, hardware=H100, date="2026-11-27", commit="a70db31"),
    Row("fig2-gpu-h200", "the same on an H200", "gpu_check_h200/fig2_full_protocol.log", fig2_gpu,
        command=GPU_CHECK, hardware="one NVIDIA H200 (141 GB), 16 cores", date="2026-11-27", commit="0ed7b2c"),
    Row("gpu-plan", "the plan it trains", "gpu_check_h100/plan.log", gpu_plan,
        command="`actsweep plan mnist_classification`", hardware=H100, date="2026-11-27", commit="a70db31"),
    Row("gpu-start", "Ray's start, first or after the spec's checks", "gpu_check_h100/extra.log", start_order,
        command="`GPU_CHECK_START_AB=1 make gpu-check`", hardware=H100, date="2026-11-27", commit="a70db31"),
))

# ==== START-UP: `actsweep bench --workload start` (docs/start.md) =========================================
# Each figure is this checkout's ("after"); "base" is the same measurement, alternating in the same run, at the
# commit the bench was given with --before (start.json names it: one commit a row here).
def start_median(d: dict, side: str, *path: str) -> float:
    value = d["sides"][side]
    for key in path:
        value = value[key]
    return value["median"]


def start_pair(*path: str) -> Callable[[dict], tuple[float, float]]:
    return lambda d: (start_median(d, "after", *path), start_median(d, "before", *path))


def start_cold_cli(d: dict) -> str:
    now, base = start_pair("cold_cli", "exit_s")(d)
    parts = d["sides"]["after"]["cold_cli"]["parts"]
    return (f"**{num(now)} s** from the command to its exit (base {num(base)} s): Ray ready at "
            f"{num(parts['ray_ready_s']['median'])} s, the first trial-epoch at {num(parts['first_epoch_s']['median'])} s")


def start_warm_rest(d: dict) -> str:
    now, base = start_pair("rest", "terminal_s")(d)
    running, base_running = start_pair("rest", "running_s")(d)
    runs = d["sides"]["after"]["rest"]["terminal_s"]["runs"]
    return (f"**{num(now)} s** from the POST to its end, median of {len(runs)} ({spread(runs)}; base {num(base)} s); "
            f"its driver running at {num(running)} s (base {num(base_running)} s)")


def start_warm_cli(d: dict) -> str:
    now, base = start_pair("warm_cli", "exit_s")(d)
    return (f"**{num(now)} s** from the command to its exit, through the home's service (base {num(base)} s, "
            f"with a Ray of its own)")


def start_demo(d: dict) -> str:
    first, base_first = start_pair("demo", "parts", "first_epoch_s")(d)
    done, base_done = start_pair("demo", "exit_s")(d)
    return (f"first trial-epoch at **{num(first)} s** (base {num(base_first)} s), exit at **{num(done)} s** "
            f"(base {num(base_done)} s)")


def start_concurrent(d: dict) -> str:
    now, base = (d["sides"][side]["concurrent"] for side in ("after", "before"))
    return (f"{now['succeeded'][0]} of {now['n']} succeeded, {now['lost'][0]} lost; the last ended at "
            f"**{num(now['last_end_s']['median'])} s** (base {num(base['last_end_s']['median'])} s); memory "
            f"**{num(now['peak_memory_above_idle_gib']['median'])} GiB** above idle (base "
            f"{num(base['peak_memory_above_idle_gib']['median'])} GiB); at most {now['max_driver_jobs'][0]} drivers at "
            f"once (base {base['max_driver_jobs'][0]}); places in the queue up to {now['max_queue_position'][0]}")


def start_command(d: dict) -> str:
    return (f"`actsweep bench --workload start --before BASE --repeats {d['repeats']} --concurrent {d['concurrent']}`")


def driver_import(d: dict) -> str:
    now, base = d["sides"]["after"], d["sides"]["before"]
    return (f"**{num(now['wall_s'], 2)} s**, {num(now['cpu_s'], 2)} CPU-s, **{num(now['peak_mib'], 0)} MiB** peak "
            f"(base {num(base['wall_s'], 2)} s, {num(base['cpu_s'], 2)} CPU-s, {num(base['peak_mib'], 0)} MiB); "
            f"torch {'imported' if now['torch'] else 'not imported'} (base: "
            f"{'imported' if base['torch'] else 'not imported'}), matplotlib "
            f"{'imported' if now['matplotlib'] else 'not imported'}")


START_ROWS: tuple[Row, ...] = (
    Row("start-cold-cli", "a one-trial sweep (1 epoch, 1,000 images) from a cold CLI, a fresh home", "start.json",
        start_cold_cli, command=start_command),
    Row("start-warm-rest", "the same sweep POSTed to a warm `actsweep serve`", "start.json", start_warm_rest,
        command=start_command),
    Row("start-warm-cli", "the same from `actsweep run` in that warm home", "start.json", start_warm_cli,
        command=start_command),
    Row("start-demo", "`make demo`'s sweep, a fresh home", "start.json", start_demo, command=start_command),
    Row("start-16-at-once", "16 one-trial sweeps POSTed at once to a warm service", "start.json", start_concurrent,
        command=start_command),
    Row("driver-import", "`import service.driver.__main__` in a new process (medians of 3, alternating)",
        "driver_import.json", driver_import, command=lambda d: "`python benchmarks/driver_import.py --before BASE`"),
)


START = Section("Start-up", "How long a sweep takes to start: a cold and a warm CLI, a warm REST submission of one "
                "trial, the demo's first epoch, and the API's memory under 16 submissions at once; each beside the "
                "same measurement at the base commit given with `--before` (named in the JSON), alternating in one "
                "run ([docs/start.md](../start.md)).", START_ROWS,
                needs="start.json", missing="Not measured yet: `actsweep bench --workload start` writes "
                                            "`docs/benchmarks/start.json`.")

SCALE = Section("Sweeps of thousands of trials", "`actsweep bench --workload scale`: 1-epoch trials of a 1 × 16 MLP "
                "on the embedded digits in fused packs of 50, on a local Ray with SQLite stores: what is measured is "
                "the orchestration.", (
    Row("scale-1000", "1,000 trials", "scale.json", scale_1000,
        command="`actsweep bench --workload scale --sizes 100,300,1000`", hardware=EPYC_AVX2, date="2026-11-23",
        commit="1508613"),
    Row("scale-10000", "10,000 trials", "scale_10000_sql_writes.json", scale_10000,
        command="`actsweep bench --workload scale --sizes 10000`", hardware="2 cores of an AMD EPYC",
        date="2026-11-27", commit="ba2b2c0"),
    Row("scale-10000-before", "10,000 trials, before members were reported as a list and the SQL writer",
        "scale_10000_tune_files_off.json", scale_10000,
        command="`actsweep bench --workload scale --sizes 10000`", hardware="2 cores of an AMD EPYC",
        date="2026-11-26", commit="af436d8"),
))

LOAD = Section("The REST API", "`actsweep serve` on SQLite stores and its own Ray head, on loopback; the clients, the "
               "API, the head and the drivers share the machine.", (
    Row("load-api", "50 clients for 30 s, 10 of them submitting a sweep first (queued: 2 run at once)", "load.json",
        load_api, command="`actsweep bench --workload load --clients 50 --seconds 30`", date="2026-12-02",
        commit="144cdc5"),
    Row("load-api-base", "the same at the base commit of the start-up rows, each sweep's driver started at once",
        "load_base.json", load_api, command="`actsweep bench --workload load --clients 50 --seconds 30`",
        date="2026-12-02", commit="142ce75"),
    Row("load-reads", "50 clients for 30 s, reads only", "load_reads_only.json", load_api),
    Row("api-coldstart", "the API's cold start (medians of 5)", "coldstart.json", coldstart),
))

BOOKKEEPING = Section("MLflow bookkeeping", "`actsweep bench --workload bookkeeping`: the driver's logger and a real "
                      "store, as Tune's loop drives them; 16 metrics an epoch, packs of 50.", (
    Row("bookkeeping", "1,000 trials × 20 epochs", "bookkeeping_sql_writes.json", bookkeeping_sql,
        command="`actsweep bench --workload bookkeeping --trials 1000 --epochs 20 --flush-s 0,1 --stores "
                "sqlite,sqlite-wal --writers log_batch,sql`",
        hardware="2 cores of an AMD EPYC, nothing else running", date="2026-11-27", commit="ba2b2c0"),
    Row("bookkeeping-wal", "SQLite's WAL mode (`ACTSWEEP_SQLITE_WAL`)", "bookkeeping_sql_writes.json", bookkeeping_wal,
        command="the same", hardware="2 cores of an AMD EPYC, nothing else running", date="2026-11-27",
        commit="ba2b2c0"),
    Row("bookkeeping-http", "PostgreSQL behind `mlflow server`, over HTTP", "bookkeeping_http_postgres.json",
        bookkeeping_http,
        command="`actsweep bench --workload bookkeeping --trials 300 --epochs 20 --flush-s 0,1 --stores http-postgres`",
        hardware="2 cores, a seed slice training beside it", date="2026-11-26", commit="216064d"),
))

SUITE = Section("The test suite", "What `make test` runs and needs: [docs/testing.md](../testing.md).", (
    Row("suite", "`make test`", "suite.json", suite_run, part="make_test"),
    Row("suite-fast", "`make test-fast`", "suite.json", suite_run, part="make_test_fast"),
    Row("suite-cpu", "`make test`'s CPU, by BSD process accounting", "suite.json", suite_cpu, part="suite_cpu"),
))

SECTIONS = (DEMO, CPU, GPU, FIG2_GPU, START, SCALE, LOAD, BOOKKEEPING, SUITE)


# ---- the page

HEAD = """\
<!-- Generated by `python -m service.benchmarks.page` from the files beside it; edit those or the rows in
service/benchmarks/page.py, never this page (tests/service/benchmarks/test_page.py compares them). -->
# Benchmarks

Every figure the documentation quotes, each read from its evidence in this folder: a JSON file that the
command wrote, or a log of the run. A row gives the figure, the command that measures it again, the
hardware, the day and the commit of the code measured (where a run did not record its commit, the commit
that added its evidence). Figures from 2-core machines move by 10-40% from one hour to the next: compare
ratios within one row, not times across rows.

`python -m service.benchmarks.page` rewrites this page from the evidence; `--check` exits 1 and names the
lines where the page and the evidence differ.
"""


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def source_link(row: Row) -> str:
    path = Path(row.source)
    return f"[{path.name}]({path.as_posix()})"


def render_row(bench: Path, row: Row) -> str:
    data = load(bench, row)
    fields = [f'<a id="{row.anchor}"></a>{row.what}', row.figure(data), *(meta(row, data, name) for name in META),
              source_link(row)]
    return "| " + " | ".join(cell(f) for f in fields) + " |"


def render(bench: Path = BENCH) -> str:
    anchors = [row.anchor for section in SECTIONS for row in section.rows]
    if len(anchors) != len(set(anchors)):
        raise EvidenceError(f"an anchor is used twice: {sorted(a for a in anchors if anchors.count(a) > 1)}")
    lines = [HEAD]
    lines += ["| section | rows |", "| --- | --- |"]
    lines += [f"| [{s.title}](#{slug(s.title)}) | {len(s.rows)} |" for s in SECTIONS]
    for section in SECTIONS:
        lines += ["", f"## {section.title}", "", section.intro, ""]
        if section.needs and not (bench / section.needs).is_file():
            lines.append(section.missing)
            continue
        if section.needs and not section.rows:
            raise EvidenceError(f"{section.needs} is committed and no row reads it: declare its rows "
                                f"(START_ROWS in service/benchmarks/page.py)")
        lines += ["| what | figure | command | hardware | date | commit | evidence |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [render_row(bench, row) for row in section.rows]
    return "\n".join(lines) + "\n"


def slug(title: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def sources() -> set[str]:
    """Every file a row reads, as a path under docs/benchmarks/."""
    return {row.source for section in SECTIONS for row in section.rows} | {s.needs for s in SECTIONS if s.needs}


def differences(bench: Path = BENCH) -> list[str]:
    """The lines where the committed page differs from what the evidence gives (none where they agree)."""
    page = bench / PAGE
    committed = page.read_text().splitlines() if page.is_file() else []
    return [line for line in difflib.unified_diff(committed, render(bench).splitlines(), f"{PAGE} (committed)",
                                                  f"{PAGE} (from the evidence)", lineterm="")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.benchmarks.page", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where the page differs from the evidence")
    parser.add_argument("--dir", type=Path, default=BENCH, help="the evidence's folder (default: docs/benchmarks)")
    args = parser.parse_args(argv)
    try:
        if args.check:
            found = differences(args.dir)
            if found:
                print(f"{args.dir / PAGE} differs from its evidence (python -m service.benchmarks.page rewrites it):",
                      *found, sep="\n", file=sys.stderr)
                return 1
            return 0
        (args.dir / PAGE).write_text(render(args.dir))
    except EvidenceError as error:
        print(f"benchmarks page: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
