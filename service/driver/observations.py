"""What the execution plan (service.driver.execution_plan) reads before deciding: the cluster
through Ray (CPUs, GPUs and memory per node, a GPU's memory), the measured footprint of a fused
pack's member, and the estimated footprint of a lone trial.

The driver imports no torch (a Ray job's process: seconds and a gigabyte saved): both footprints
are measured by a Ray task, on a node where the trials train (:class:`Footprints`), and this
machine's GPUs are read from nvidia-smi or NVML."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import psutil
import ray

from search_spaces import SweepSpec
from service.driver.execution_plan import Cluster, ExecutionPlan, Node, resolve_plan
from service.driver.trial_env import tune_runtime_env
from workers.data import Splits
from workers.pack_footprint import PackFootprint
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
    """The measured footprint (workers.pack_memory, torch) of packs of the spec's ``points``, in
    this process: from one config per activation, eager (compiled steps save fewer tensors: the
    eager count bounds them)."""
    from workers.pack_memory import measure_footprint

    one_per_activation = list({p.activation: p for p in points}.values())
    return measure_footprint([replace(spec.trial_config(p), compile=False) for p in one_per_activation], data)


def trial_bytes(spec: SweepSpec) -> float:
    """One lone trial's estimated memory (workers.footprint, on the meta device: torch), in this
    process; 0 where unknown."""
    from workers.footprint import estimate

    footprint = estimate(spec)
    return float(footprint.memory_bytes) if footprint else 0.0


@ray.remote(num_cpus=0)  # (its resources are set per call: Footprints.options)
def _pack_footprint_task(spec: SweepSpec, points: list[GridPoint], data: Splits) -> tuple[int, int]:
    found = pack_footprint(spec, points, data)
    return found.fixed, found.per_member  # (plain ints: the driver unpickles no torch-side type)


@ray.remote(num_cpus=0)
def _trial_bytes_task(spec: SweepSpec) -> float:
    return trial_bytes(spec)


def trains_on_gpu(spec: SweepSpec, cluster: Cluster) -> bool:
    """Whether the spec's trials will ask for GPUs on ``cluster`` (its ``auto``: where it has any)."""
    asked = spec.execution.gpus_per_trial
    return cluster.gpus > 0 and (asked == "auto" or asked > 0)


class Footprints:
    """A sweep's two footprints, each measured at most once, when first asked: the pack member's
    (:func:`pack_footprint`) and the lone trial's (:func:`trial_bytes`). With Ray connected each is
    measured by a Ray task where the trials train, so the driver never imports torch: with a sliver
    of a GPU where they train on GPUs (the node's torch and libraries are the trials'), else with a
    CPU (a node that trains: a head node kept free of trials declares none). The measurement itself
    runs on the task's CPU, as it did in the driver: a step counts the same tensors there as on a
    GPU (workers.pack_memory). Without Ray (``actsweep plan`` on this machine), or ``here`` (the CLI,
    torch imported, on a Ray of its own), it runs in this process.
    ``data``: the sweep's splits, or their ref in Ray's object store."""

    def __init__(self, spec: SweepSpec, data: Splits | ray.ObjectRef, points: list[GridPoint] | None = None,
                 on_gpu: bool = False, kept: "KeptFootprints | None" = None, here: bool = False):
        self.spec, self.data, self.on_gpu, self.kept, self.here = spec, data, on_gpu, kept, here
        self.points = spec.grid_points() if not points else points
        self._pack: PackFootprint | None = None
        self._trial: float | None = None

    def options(self) -> dict:
        """The Ray resources of a measuring task: where the trials will run; and the runtime
        environment Tune gives its trials, so that in a warm home it runs in a warm trial worker
        (torch imported: service.driver.warm) and leaves that worker to the sweep's first trial."""
        where = {"num_gpus": 0.001, "num_cpus": 0} if self.on_gpu else {"num_cpus": 1}
        return {**where, "runtime_env": tune_runtime_env()}

    def pack(self) -> PackFootprint:
        """The measured footprint of a pack member (a real step of a small pack, about a second; or
        the one measured for the same members, data and code before: ``kept``)."""
        if self._pack is None and self.kept is not None:
            found = self.kept.get("pack", self._members())
            self._pack = PackFootprint(*found) if found else None
        if self._pack is None:
            if self._by_task():
                if not isinstance(self.data, ray.ObjectRef):
                    self.data = ray.put(self.data)
                task = _pack_footprint_task.options(**self.options()).remote(self.spec, self.points, self.data)
                self._pack = PackFootprint(*ray.get(task))
            else:  # (here: the arrays themselves, where the driver had put them into Ray's object store)
                data = ray.get(self.data) if isinstance(self.data, ray.ObjectRef) else self.data
                self._pack = pack_footprint(self.spec, self.points, data)
            if self.kept is not None:
                self.kept.put("pack", self._members(), [self._pack.fixed, self._pack.per_member])
        return self._pack

    def trial_bytes(self) -> float:
        """One lone trial's estimated memory in bytes (0 where unknown)."""
        if self._trial is None and self.kept is not None:
            self._trial = self.kept.get("trial", self.spec.model_dump(mode="json"))
        if self._trial is None:
            self._trial = (ray.get(_trial_bytes_task.options(**self.options()).remote(self.spec))
                           if self._by_task() else trial_bytes(self.spec))
            if self.kept is not None:
                self.kept.put("trial", self.spec.model_dump(mode="json"), self._trial)
        return self._trial

    def _by_task(self) -> bool:
        """Measured by a Ray task: with Ray connected, unless ``here`` (a process on the machine of the
        trials that has torch imported already, as the CLI does for its checks: a task's worker would
        import it again)."""
        return ray.is_initialized() and not self.here

    def _members(self) -> list:
        """What a pack's measured footprint depends on: its members' trial configs (as measured)."""
        one_per_activation = list({p.activation: p for p in self.points}.values())
        return [repr(replace(self.spec.trial_config(p), compile=False)) for p in one_per_activation]


class KeptFootprints:
    """Footprints measured before, kept in a folder of the home: the same members (or spec), on the
    same data, by the same code, measure the same, so a sweep that repeats one skips its Ray task
    (a worker's start and a step: seconds). ``identity``: the data's fingerprint and sizes and the
    code's version, part of every key."""

    def __init__(self, folder, identity: dict):
        self.folder, self.identity = Path(folder), identity

    def _path(self, kind: str, what):
        key = json.dumps({"kind": kind, "what": what, **self.identity}, sort_keys=True, default=str)
        return self.folder / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def get(self, kind: str, what):
        """The value kept for ``kind`` and ``what``, or None."""
        try:
            return json.loads(self._path(kind, what).read_text())
        except (OSError, ValueError):
            return None

    def put(self, kind: str, what, value) -> None:
        """Keep ``value`` (written whole or not at all; a folder that cannot be written keeps nothing)."""
        path = self._path(kind, what)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.part")
            partial.write_text(json.dumps(value))
            partial.replace(path)
        except OSError:
            pass


def observe_this_machine(num_cpus: int | None = None) -> Cluster:
    """This machine as a local Ray started here would report it (``actsweep plan`` without a
    cluster): its CPUs (or ACTSWEEP_NUM_CPUS), its GPUs and their memory, its memory free."""
    memory = psutil.virtual_memory()
    count, gpu_bytes = local_gpus()
    return Cluster((Node(float(num_cpus or os.cpu_count() or 1), float(count), float(memory.total)),),
                   gpu_bytes if count else None, float(memory.available))


def local_gpus() -> tuple[int, float | None]:
    """(GPUs this process may use on this machine, the memory of one): from nvidia-smi, else NVML
    (as a local Ray counts them); no CUDA context made and no torch imported."""
    gpus = visible_gpus()
    return len(gpus), (gpus[0][1] if gpus else None)


def visible_gpus() -> list[tuple[str, float]]:
    """(name, memory in bytes) of each GPU of this machine that CUDA_VISIBLE_DEVICES leaves this
    process: from nvidia-smi where it is installed, else from NVML through Ray's copy of pynvml;
    [] where neither answers."""
    found = None
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20, check=True).stdout
            found = [(name.strip(), float(mib) * 2 ** 20)
                     for name, mib in (line.rsplit(",", 1) for line in out.splitlines() if line.strip())]
        except (subprocess.SubprocessError, OSError, ValueError):
            found = None
    if found is None:
        found = _nvml_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        found = [found[int(i)] for i in visible.split(",") if i.strip().isdigit() and int(i) < len(found)]
    return found


def _nvml_gpus() -> list[tuple[str, float]]:
    try:
        import ray._private.thirdparty.pynvml as pynvml

        pynvml.nvmlInit()
    except Exception:  # (no NVIDIA driver, or Ray moved its copy)
        return []
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            found.append((name.decode() if isinstance(name, bytes) else str(name),
                          float(pynvml.nvmlDeviceGetMemoryInfo(handle).total)))
        return found
    except Exception:
        return []
    finally:
        pynvml.nvmlShutdown()


def plan_sweep(spec: SweepSpec, data: Splits | ray.ObjectRef, context_bytes: float,
               points: list[GridPoint] | None = None, cluster: Cluster | None = None, local: bool = False,
               footprints: Footprints | None = None) -> ExecutionPlan:
    """The plan for ``spec`` on the connected Ray cluster (observed now unless given; ``local``: a
    Ray started on this machine), its footprints measured on ``data`` (workers.data.Splits, or
    its ref) where the plan needs them (``footprints``: the sweep's, to keep what they measure)."""
    cluster = cluster or observe_cluster(local)
    points = spec.grid_points() if points is None else points
    footprints = footprints or Footprints(spec, data, points, on_gpu=trains_on_gpu(spec, cluster))
    return resolve_plan(spec, cluster, points, pack_footprint=footprints.pack if points or spec.grid_points() else None,
                        trial_bytes=footprints.trial_bytes, context_bytes=context_bytes)
