"""The execution plan: how a sweep's trials use the cluster, decided once, before Tune starts.

``execution.mode``, ``execution.pack_size`` and ``execution.gpus_per_trial`` default to ``auto``.
This module alone resolves them, from what the cluster reports through Ray (CPUs, GPUs and memory
per node, the GPU's memory) and from the spec (its model kind, its grid, the measured footprint of
a pack member or the estimated footprint of a trial). An explicit value in the spec, or in
``--set``, always wins. The driver (service.driver.sweeps) carries the plan out; ``actsweep plan``
prints it without training; the sweep's record and its MLflow parent run keep it.

The rules, each with the measurement behind it:

- **GPUs where the cluster has them.** ``gpus_per_trial: auto`` trains on a GPU wherever Ray
  reports one: the papers' MLPs run 30–340× faster on an H100 than on two CPU cores (docs/speed.md).
- **Fused packs for models that fuse.** ``mode: auto`` trains an MLP or autoencoder grid as fused
  packs (workers.fused): on a CPU a fused pack ran the Figure 2 workload at 2.1× a plain PyTorch
  loop where one trial per process ran at 1.65×; on an H100, 384 members ran at 167 trial-epochs/s
  against 0.5 for one network per process. Convnets, augmentation, fine-tuning, top-5 and lr searches
  train one trial per process (vmap packs of convnets measured 0.40–0.87× one at a time on a CPU,
  docs/fused.md).
- **Packs as large as memory allows, one per slot.** On a GPU a pack gets as many members as its
  share of the card holds (measured footprint, less the process's CUDA context and a headroom;
  at most 256), and packs are dealt over every GPU the cluster has, on every node. On CPUs a pack
  trains per core (``cpus_per_trial`` 1: two packs on one thread each ran 1.12× one pack on two
  threads), and the grid is dealt so that no core idles.
- **A GPU share from the footprint.** A pack or trial asks for the fraction of a GPU that lets as
  many of them share a card as its memory (each with its CUDA context) and the node's CPUs allow,
  and no more than there are packs or trials to run (service.driver.gpu_placement checks it).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

from search_spaces import SpecError, SweepSpec, packs
from service.driver.gpu_placement import check_gpu_placement, processes_per_gpu
from workers.convnet_plan import convnet_strategy
from workers.registry import FUSABLE_MODELS
from workers.trial import GridPoint

GIB = 2 ** 30
GPU_HEADROOM = 0.85  # of a pack's share of its GPU (less its CUDA context): the rest for what the count misses
CPU_SHARE = 0.5  # of the memory free on the driver's node, shared by the packs that run at once
MAX_PACK = 256  # members: past this a pack's step gains nothing on an H100 (docs/speed.md) and its launch grows
ASSUMED_GPU_BYTES = 16 * GIB  # a GPU the cluster declares but whose worker sees no CUDA device (a made-up resource)


class PlanError(SpecError):
    """A plan that cannot be made: a pack member larger than its budget, say; names the field."""


@dataclass(frozen=True)
class Node:
    """One alive node of the cluster, as Ray reports it."""

    cpus: float
    gpus: float
    memory_bytes: float


@dataclass(frozen=True)
class Cluster:
    """What the plan reads of the cluster: its nodes, the memory of one of its GPUs (None where its
    GPU workers see no CUDA device), and the memory free on the driver's node."""

    nodes: tuple[Node, ...]
    gpu_bytes: float | None = None
    free_bytes: float = 0.0

    @property
    def cpus(self) -> float:
        return sum(n.cpus for n in self.nodes)

    @property
    def gpus(self) -> float:
        return sum(n.gpus for n in self.nodes)

    def cpus_per_gpu(self) -> float:
        """CPUs beside each GPU on the GPU nodes (the fewest, where nodes differ)."""
        return min((n.cpus / n.gpus for n in self.nodes if n.gpus), default=0.0)

    def describe(self) -> str:
        cpus, gpus = f"{self.cpus:g} CPUs", ""
        if self.gpus:
            memory = f"{self.gpu_bytes / GIB:.1f} GiB each" if self.gpu_bytes else "memory unknown: no CUDA device seen"
            gpus = f"{self.gpus:g} GPU{'s' if self.gpus != 1 else ''} ({memory}), "
        return f"{gpus}{cpus} on {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}"


@dataclass
class ExecutionPlan:
    """The resolved execution of a sweep's grid, and why each ``auto`` resolved so."""

    mode: str                      # fused | per_trial
    gpus_per_trial: float          # per Tune trial (a pack, or one grid point)
    cpus_per_trial: float
    pack_size: int | None          # the most members of a pack (fused)
    slots: int                     # Tune trials that run at once
    devices: str                   # the cluster, in words
    device: str                    # where the trials train: cuda | cpu
    units: list[int] = field(default_factory=list)  # members of each Tune trial of the grid (1s per trial)
    unit_bytes: float = 0.0        # memory one Tune trial is expected to hold on its device
    trial_epochs: int = 0          # of the grid (first phase)
    cuda_graphs: bool = False
    why: dict[str, str] = field(default_factory=dict)  # field -> why it resolved so

    def resolved(self, spec: SweepSpec) -> SweepSpec:
        """The spec with every ``auto`` of its execution replaced by the plan's value."""
        execution = spec.execution.model_copy(update={
            "mode": self.mode, "gpus_per_trial": self.gpus_per_trial,
            "pack_size": self.pack_size if self.pack_size is not None else spec.execution.pack_size})
        return spec.model_copy(update={"execution": execution})

    def summary(self) -> str:
        """The plan in one line (what ``actsweep run`` prints at its start)."""
        if self.mode == "fused":
            sizes = sorted(set(self.units))
            what = (f"{len(self.units)} fused pack{'s' if len(self.units) != 1 else ''} of "
                    f"{'–'.join(map(str, (sizes[0], sizes[-1]))) if len(sizes) > 1 else sizes[0] if sizes else 0} members")
        else:
            what = f"{len(self.units)} trials, one per process"
        gpu = f", {self.gpus_per_trial:g} GPU each" if self.gpus_per_trial else ""
        graphs = ", CUDA graphs" if self.cuda_graphs else ""
        return (f"Plan: {what} on {self.device}{gpu}{graphs}, {self.slots} at once, about "
                f"{self.unit_bytes / GIB:.2f} GiB each; {self.trial_epochs} trial-epochs ({self.devices})")

    def as_dict(self) -> dict:
        return {**asdict(self), "summary": self.summary()}


def fusable(spec: SweepSpec) -> str | None:
    """Why the spec's trials cannot train as fused packs, or None where they can (the spec-level
    mirror of workers.fused.fusable)."""
    if spec.model.kind not in FUSABLE_MODELS:
        return f"model.kind {spec.model.kind} does not fuse (fused packs take {', '.join(FUSABLE_MODELS)})"
    if spec.augment is not None and (spec.augment.crop_padding or spec.augment.flip):
        return "augment: fused packs take vector inputs without augmentation"
    if spec.search is not None:
        return "an lr search (search:) runs one trial per suggestion"
    if spec.fine_tune:
        return "fine_tune: fused packs have no per-stack dropout"
    if spec.top5:
        return "top5: fused packs measure the top-1 error"
    return None


def resolve_plan(spec: SweepSpec, cluster: Cluster, points: list[GridPoint] | None = None, *,
                 pack_footprint: Callable[[], "object"] | None = None,
                 trial_bytes: Callable[[], float] | None = None,
                 context_bytes: float = 810 * 2 ** 20) -> ExecutionPlan:
    """Resolve the spec's execution for ``cluster`` (Ray's view of it).

    ``points`` are the grid points to plan (default: the spec's grid). ``pack_footprint()`` gives
    the measured footprint of a pack member (workers.pack_memory.PackFootprint: asked only for a
    fused plan with ``pack_size: auto``); ``trial_bytes()`` the estimated memory of one lone trial
    (asked only for a per-trial plan on a GPU). ``context_bytes`` is what each process on a GPU holds
    beside its tensors (ACTSWEEP_CUDA_CONTEXT_MB). Raises PlanError naming the field to change."""
    execution, why = spec.execution, {}
    points = spec.grid_points() if points is None else points

    # -- mode --------------------------------------------------------------------------------------
    refusal = fusable(spec)
    if execution.mode != "auto":
        mode = execution.mode
        why["mode"] = f"{mode}: set in the spec"
    elif refusal is None:
        mode = "fused"
        why["mode"] = (f"fused: model.kind {spec.model.kind} fuses; a fused pack trains its members as one batched "
                       f"model (2.1× a plain loop on CPUs, 1.65× for one trial per process; docs/speed.md)")
    else:
        mode = "per_trial"
        why["mode"] = f"per_trial: {refusal}"
    if execution.compile and mode != "fused":
        raise PlanError(f"execution.compile: compiles a fused pack's step, and this plan trains one trial per "
                        f"process ({why['mode']}); set compile: false")

    # -- devices -----------------------------------------------------------------------------------
    if execution.gpus_per_trial != "auto":
        on_gpu = execution.gpus_per_trial > 0
        why["gpus_per_trial"] = f"{execution.gpus_per_trial:g}: set in the spec"
    else:
        on_gpu = cluster.gpus > 0
        if not on_gpu:
            why["gpus_per_trial"] = "0: the cluster reports no GPU"
    gpu_bytes = cluster.gpu_bytes or ASSUMED_GPU_BYTES
    if on_gpu and cluster.gpu_bytes is None:
        why["gpu_memory"] = (f"the cluster declares {cluster.gpus:g} GPU(s) but its workers see no CUDA device: "
                             f"{ASSUMED_GPU_BYTES / GIB:.0f} GiB assumed, and the trials train on the CPU")
    device = "cuda" if on_gpu and cluster.gpu_bytes else "cpu"
    cpus_per_trial = execution.cpus_per_trial

    # -- packs and shares ----------------------------------------------------------------------------
    pack_size, units, unit_bytes = None, [1] * len(points), 0.0
    if mode == "fused":
        gpus = max(1, math.floor(cluster.gpus)) if on_gpu else 0
        if execution.pack_size != "auto":
            pack_size = execution.pack_size
            why["pack_size"] = f"{pack_size}: set in the spec"
            footprint = pack_footprint() if pack_footprint else None
        else:
            footprint = pack_footprint()
            if execution.pack_memory_gb is not None:
                budget, whence = execution.pack_memory_gb * GIB, "execution.pack_memory_gb"
            elif on_gpu:
                share = 1.0 if execution.gpus_per_trial == "auto" else min(1.0, execution.gpus_per_trial)
                budget = (gpu_bytes * share - context_bytes) * GPU_HEADROOM
                whence = (f"{share:g} of a {gpu_bytes / GIB:.1f} GiB GPU, less its CUDA context "
                          f"({context_bytes / GIB:.2f} GiB) and {1 - GPU_HEADROOM:.0%} headroom")
            else:
                cpu_slots = max(1, int(cluster.cpus // cpus_per_trial))
                budget = cluster.free_bytes * CPU_SHARE / cpu_slots
                whence = (f"{CPU_SHARE:.0%} of the {cluster.free_bytes / GIB:.1f} GiB free on this node, shared by "
                          f"{cpu_slots} packs at once")
            fits = footprint.largest_pack(int(budget))
            if fits < 1:
                raise PlanError(f"execution.pack_size auto: a pack of one member needs "
                                f"{footprint.bytes(1) / GIB:.2f} GiB ({footprint.describe()}), more than the "
                                f"{budget / GIB:.2f} GiB budget ({whence}); raise execution.pack_memory_gb or "
                                f"gpus_per_trial, or set mode: per_trial")
            pack_size = min(MAX_PACK, fits)
            why["pack_size"] = (f"{pack_size}: the most members that fit {budget / GIB:.2f} GiB ({whence}) at "
                                f"{footprint.describe()}" + (f", capped at {MAX_PACK}" if fits > MAX_PACK else ""))
        if on_gpu:
            count = -(-len(points) // pack_size) if points else 0
            per_gpu = max(1, -(-count // gpus)) if count else 1
            pack_bytes = footprint.bytes(min(pack_size, max(1, -(-len(points) // max(1, count))))) if footprint else 0
            gpu_share = _gpu_share(execution.gpus_per_trial, per_gpu, pack_bytes, gpu_bytes, context_bytes,
                                   cluster, cpus_per_trial, "pack", why)
            slots = _slots(cluster, cpus_per_trial, gpu_share, execution.max_concurrent_trials)
        else:
            gpu_share = 0.0
            slots = _slots(cluster, cpus_per_trial, 0.0, execution.max_concurrent_trials)
        units = [len(p.points) for p in packs(points, pack_size, slots)] if points else []
        unit_bytes = footprint.bytes(max(units, default=1)) if footprint else 0.0
        if on_gpu:
            check_gpu_placement(gpu_share, unit_bytes, gpu_bytes, context_bytes, fused=True)
    else:
        if on_gpu:
            one = trial_bytes() if trial_bytes else 0.0
            gpu_share = _gpu_share(execution.gpus_per_trial, len(points) or 1, one, gpu_bytes, context_bytes,
                                   cluster, cpus_per_trial, "trial", why)
            check_gpu_placement(gpu_share, one, gpu_bytes, context_bytes, fused=False)
            unit_bytes = one
            if gpu_share < 1:  # several trial processes on a card: what the cifar bench measured fastest
                strategy = convnet_strategy(spec.model.kind)
                why["sharing"] = (f"{spec.model.kind}: trial processes side by side on each GPU"
                                  + (" (the fastest way the cifar bench measured, docs/benchmarks/cifar_cuda.json)"
                                     if strategy == "processes" else f" (the bench's choice, {strategy}, is not a trial kind)"
                                     if strategy != "per_trial" else " (not measured by the cifar bench)"))
        else:
            gpu_share = 0.0
            unit_bytes = trial_bytes() if trial_bytes else 0.0
        slots = _slots(cluster, cpus_per_trial, gpu_share, execution.max_concurrent_trials)
    unplaceable = _unplaceable(cluster, cpus_per_trial, gpu_share, "pack" if mode == "fused" else "trial")
    if unplaceable:  # (Tune would wait for such a node for ever; the API refuses it too: control.submission)
        raise PlanError(unplaceable)
    cuda_graphs = device == "cuda" and execution.cuda_graphs and mode == "fused"
    if device == "cuda":
        why["cuda_graphs"] = ("on: each pack's step captured once and replayed (workers/graphs.py)" if cuda_graphs
                              else "off: " + ("execution.cuda_graphs: false" if not execution.cuda_graphs
                                              else "lone trials step eagerly"))
    return ExecutionPlan(mode=mode, gpus_per_trial=gpu_share, cpus_per_trial=cpus_per_trial, pack_size=pack_size,
                         slots=slots, devices=cluster.describe(), device=device, units=units, unit_bytes=unit_bytes,
                         trial_epochs=len(points) * spec.epochs, cuda_graphs=cuda_graphs, why=why)


def _gpu_share(asked: float | str, wanted: int, unit_bytes: float, gpu_bytes: float, context_bytes: float,
               cluster: Cluster, cpus_per_trial: float, unit: str, why: dict[str, str]) -> float:
    """The fraction of a GPU one pack or trial asks for: as many share a card as its memory (each
    with its CUDA context) and the node's CPUs allow, and no more than there are (``wanted``)."""
    if asked != "auto":
        return float(asked)
    by_memory = max(1, math.floor(gpu_bytes / (context_bytes + unit_bytes))) if unit_bytes or context_bytes else wanted
    by_cpus = max(1, math.floor(cluster.cpus_per_gpu() / cpus_per_trial)) if cluster.cpus_per_gpu() else 1
    per_gpu = max(1, min(wanted, by_memory, by_cpus))
    share = 1.0 if per_gpu == 1 else math.floor(10_000 / per_gpu) / 10_000  # Ray's fractions: 4 digits
    while processes_per_gpu(share) > per_gpu:
        share = math.ceil(share * 10_000 + 1) / 10_000
    limits = {"the memory": by_memory, "the CPUs beside it": by_cpus, f"the {unit}s to run": wanted}
    binding = min(limits, key=limits.get)
    why["gpus_per_trial"] = (f"{share:g}: {per_gpu} {unit}{'s' if per_gpu != 1 else ''} per GPU, as many as "
                             f"{binding} allow{'s' if binding.endswith('memory') else ''} (memory: {by_memory}, at "
                             f"{unit_bytes / GIB:.2f} GiB + {context_bytes / GIB:.2f} GiB of CUDA context each; "
                             f"CPUs: {by_cpus}; {unit}s: {wanted})")
    return share


def _unplaceable(cluster: Cluster, cpus_per_trial: float, gpu_share: float, unit: str) -> str | None:
    """Why no node of ``cluster`` can hold one pack or trial of this plan, naming the field; None
    where one can."""
    if any(n.cpus >= cpus_per_trial and n.gpus + 1e-9 >= gpu_share for n in cluster.nodes):
        return None
    if not any(n.gpus + 1e-9 >= gpu_share for n in cluster.nodes):
        most = max((n.gpus for n in cluster.nodes), default=0.0)
        return (f"execution.gpus_per_trial: each {unit} asks for {gpu_share:g} GPU, and no node of the cluster has "
                f"{'any' if not most else f'more than {most:g}'} ({cluster.describe()}); set gpus_per_trial: "
                f"{'0 to train on the CPUs' if not most else f'{most:g} or less'}, or auto")
    most = max((n.cpus for n in cluster.nodes if n.gpus + 1e-9 >= gpu_share), default=0.0)
    return (f"execution.cpus_per_trial: each {unit} asks for {cpus_per_trial:g} CPUs, and no node of the cluster "
            f"{'with its GPUs ' if gpu_share else ''}has more than {most:g} ({cluster.describe()}); set cpus_per_trial: "
            f"{most:g} or less")


def _slots(cluster: Cluster, cpus_per_trial: float, gpu_share: float, max_concurrent: int | None) -> int:
    """How many Tune trials of this plan the cluster runs at once."""
    slots = sum(n.cpus // cpus_per_trial for n in cluster.nodes) or 1
    if gpu_share:
        slots = min(slots, sum(math.floor(n.gpus / gpu_share + 1e-9) for n in cluster.nodes))
    if max_concurrent:
        slots = min(slots, max_concurrent)
    return max(1, int(slots))

