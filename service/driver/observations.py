"""What the execution plan (service.driver.execution_plan) reads before deciding: the cluster
through Ray (CPUs, GPUs and memory per node, a GPU's memory), the measured footprint of a fused
pack's member, and the estimated footprint of a lone trial."""
from __future__ import annotations

import os
from dataclasses import replace

import psutil
import ray

from search_spaces import SweepSpec
from service.driver.execution_plan import Cluster, ExecutionPlan, Node, resolve_plan
from workers.data import Splits
from workers.pack_memory import PackFootprint, measure_footprint
from workers.trial import GridPoint


def observe_cluster(local: bool = False) -> Cluster:
    """The connected Ray cluster's alive nodes, a GPU's memory where it has GPUs, and the memory
    free on this (the driver's) node. ``local``: the cluster is a Ray started on this machine, whose
    GPUs nvidia-smi reports in milliseconds (a Ray task would start a worker and a CUDA context)."""
    nodes = tuple(Node(cpus=n["Resources"].get("CPU", 0.0), gpus=n["Resources"].get("GPU", 0.0),
                       memory_bytes=n["Resources"].get("memory", 0.0)) for n in ray.nodes() if n.get("Alive"))
    gpu_bytes = None
    if any(n.gpus for n in nodes):
        try:
            gpu_bytes = (local_gpus()[1] if local else None) or gpu_memory()
        except Exception:  # (ray.exceptions.RayTaskError: a GPU resource declared where no CUDA device is seen)
            gpu_bytes = None
    return Cluster(nodes, gpu_bytes, float(psutil.virtual_memory().available))


def gpu_memory() -> int:
    """The memory of the GPU a GPU worker of the cluster sees (bytes): asked of a task given a
    sliver of one, so it runs where the trials will."""
    return ray.get(_gpu_memory.options(num_gpus=0.001).remote(), timeout=120)


@ray.remote(num_cpus=0)
def _gpu_memory() -> int:
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("the worker given a GPU sees no CUDA device")
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory


def pack_footprint(spec: SweepSpec, points: list[GridPoint], data: Splits) -> PackFootprint:
    """The measured footprint (workers.pack_memory) of packs of the spec's ``points``: from one
    config per activation, eager (compiled steps save fewer tensors: the eager count bounds them)."""
    one_per_activation = list({p.activation: p for p in points}.values())
    return measure_footprint([replace(spec.trial_config(p), compile=False) for p in one_per_activation], data)


def trial_bytes(spec: SweepSpec) -> float:
    """One lone trial's estimated memory (workers.footprint, on the meta device); 0 where unknown."""
    from workers.footprint import estimate

    footprint = estimate(spec)
    return float(footprint.memory_bytes) if footprint else 0.0


def observe_this_machine(num_cpus: int | None = None) -> Cluster:
    """This machine as a local Ray started here would report it (``actsweep plan`` without a
    cluster): its CPUs (or ACTSWEEP_NUM_CPUS), its GPUs and their memory, its memory free."""
    memory = psutil.virtual_memory()
    count, gpu_bytes = local_gpus()
    return Cluster((Node(float(num_cpus or os.cpu_count() or 1), float(count), float(memory.total)),),
                   gpu_bytes if count else None, float(memory.available))


def local_gpus() -> tuple[int, float | None]:
    """(GPUs on this machine, the memory of one), from nvidia-smi where it is installed (no CUDA
    context made here), else from torch."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20, check=True).stdout.split()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            mib = [float(v) for v in out]
            if visible is not None:
                mib = [mib[int(i)] for i in visible.split(",") if i.strip().isdigit() and int(i) < len(mib)]
            return len(mib), (mib[0] * 2 ** 20 if mib else None)
        except (subprocess.SubprocessError, OSError, ValueError):
            pass
    import torch

    if not torch.cuda.is_available():
        return 0, None
    return torch.cuda.device_count(), float(torch.cuda.get_device_properties(0).total_memory)


def plan_sweep(spec: SweepSpec, data: Splits, context_bytes: float, points: list[GridPoint] | None = None,
               cluster: Cluster | None = None, local: bool = False) -> ExecutionPlan:
    """The plan for ``spec`` on the connected Ray cluster (observed now unless given; ``local``: a
    Ray started on this machine), its pack footprint measured on ``data`` (workers.data.Splits)
    where the plan needs it."""
    cluster = cluster or observe_cluster(local)
    points = spec.grid_points() if points is None else points
    measured = []

    def measured_footprint():
        if not measured:  # (measured once: a real step of a small pack, about a second)
            measured.append(pack_footprint(spec, points or spec.grid_points(), data))
        return measured[0]

    return resolve_plan(spec, cluster, points, pack_footprint=measured_footprint if points or spec.grid_points() else None,
                        trial_bytes=lambda: trial_bytes(spec), context_bytes=context_bytes)
