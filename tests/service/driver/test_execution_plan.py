"""The execution plan (service.driver.execution_plan): what `auto` resolves to on CPUs, on one GPU, on
a cluster of GPU nodes, and that an explicit value always wins. The cluster is given as Ray would
report it; the pack footprint is one measured here (workers.pack_memory) on the real digits."""
from __future__ import annotations

import pytest

from search_spaces import SpecError, load_spec
from service.driver.execution_plan import Cluster, Node, PlanError, resolve_plan
from service.driver.gpu_placement import processes_per_gpu
from workers.pack_memory import PackFootprint

GIB = 2 ** 30
H100 = 79.1 * GIB
CONTEXT = 810 * 2 ** 20
# Figure 2's MLP on MNIST, as workers.pack_memory measures it (docs/speed.md): 210 MiB of data + 67 MiB a member
FIG2_FOOTPRINT = PackFootprint(fixed=210 * 2 ** 20, per_member=67 * 2 ** 20)
TWO_CORES = Cluster((Node(2, 0, 24 * GIB),), None, free_bytes=22 * GIB)
ONE_H100 = Cluster((Node(16, 1, 128 * GIB),), H100, free_bytes=120 * GIB)


def plan(spec, cluster, footprint=FIG2_FOOTPRINT, trial_bytes=0.0):
    return resolve_plan(spec, cluster, pack_footprint=lambda: footprint, trial_bytes=lambda: trial_bytes,
                        context_bytes=CONTEXT)


def test_the_defaults_are_auto():
    execution = load_spec("mnist_classification").execution
    assert (execution.mode, execution.pack_size, execution.gpus_per_trial) == ("auto", "auto", "auto")


def test_on_cpus_an_mlp_grid_trains_as_fused_packs_one_per_core():
    """docs/speed.md measures fused packs faster than one trial per process on CPUs (2.1× against
    1.65× a plain loop), and two packs on one thread each faster than one on two."""
    spec = load_spec("mnist_classification")  # 3 activations × 3 lrs × 2 dropouts × 5 seeds = 90
    found = plan(spec, TWO_CORES)
    assert (found.mode, found.gpus_per_trial, found.device, found.slots) == ("fused", 0.0, "cpu", 2)
    assert found.units == [45, 45] and found.trial_epochs == 90 * 50
    budget = 22 * GIB * 0.5 / 2  # half the free memory, shared by the two packs at once
    assert found.pack_size == FIG2_FOOTPRINT.largest_pack(int(budget))
    assert found.unit_bytes == FIG2_FOOTPRINT.bytes(45)
    assert "fused" in found.why["mode"] and "no GPU" in found.why["gpus_per_trial"]
    resolved = found.resolved(spec).execution
    assert (resolved.mode, resolved.pack_size, resolved.gpus_per_trial) == ("fused", found.pack_size, 0.0)


def test_on_one_gpu_the_fig2_grid_is_one_pack_on_the_whole_card_with_cuda_graphs():
    found = plan(load_spec("mnist_classification"), ONE_H100)
    assert (found.mode, found.device, found.units, found.gpus_per_trial, found.cuda_graphs) == (
        "fused", "cuda", [90], 1.0, True)
    assert found.pack_size == 256  # the card would hold about a thousand members: capped
    assert "capped" in found.why["pack_size"]
    assert "1 pack per GPU" in found.why["gpus_per_trial"]


def test_a_grid_larger_than_a_pack_shares_the_gpu_by_fractions_that_fit():
    spec = load_spec("mnist_classification", overrides={"seeds": 100})  # 1,800 members: 8 packs of 225 at least
    found = plan(spec, ONE_H100)
    per_gpu = processes_per_gpu(found.gpus_per_trial)
    assert per_gpu > 1 and found.slots == per_gpu  # several packs share the card ...
    assert per_gpu * (CONTEXT + found.unit_bytes) <= H100  # ... as many as its memory holds, contexts included
    assert sum(found.units) == 1800 and max(found.units) <= 256 and len(found.units) % found.slots == 0  # no slot idles
    assert "as many as the memory allows" in found.why["gpus_per_trial"]


def test_on_a_cluster_packs_are_dealt_over_every_gpu_of_every_node():
    cluster = Cluster((Node(16, 4, 256 * GIB), Node(16, 4, 256 * GIB)), H100, free_bytes=200 * GIB)
    found = plan(load_spec("mnist_classification"), cluster)
    assert len(found.units) == 8 and sorted(set(found.units)) == [11, 12] and sum(found.units) == 90
    assert found.slots == 8 and found.gpus_per_trial == 1.0
    assert found.devices == "8 GPUs (79.1 GiB each), 32 CPUs on 2 nodes"


def test_a_model_that_does_not_fuse_trains_one_trial_per_process_sharing_the_gpu_by_its_footprint():
    spec = load_spec("cifar10_shallow")
    found = plan(spec, ONE_H100, trial_bytes=2 * GIB)
    assert found.mode == "per_trial" and "cifar_shallow does not fuse" in found.why["mode"]
    per_gpu = processes_per_gpu(found.gpus_per_trial)
    assert per_gpu == min(16, int(H100 // (CONTEXT + 2 * GIB)))  # CPUs beside the card bind first here: 16
    assert "the CPUs beside it" in found.why["gpus_per_trial"]
    assert "the fastest way the cifar bench measured" in found.why["sharing"]  # (processes, on the H100)
    assert found.units == [1] * spec.trial_count and found.unit_bytes == 2 * GIB


def test_an_explicit_value_always_wins():
    spec = load_spec("mnist_classification", overrides={"execution.mode": "per_trial", "execution.gpus_per_trial": 0})
    found = plan(spec, ONE_H100)
    assert (found.mode, found.gpus_per_trial, found.device, found.pack_size) == ("per_trial", 0.0, "cpu", None)
    assert found.why["mode"] == "per_trial: set in the spec" and "set in the spec" in found.why["gpus_per_trial"]
    spec = load_spec("mnist_classification", overrides={"execution.pack_size": 10, "execution.gpus_per_trial": 0.5})
    found = plan(spec, ONE_H100)
    assert (found.mode, found.pack_size, found.gpus_per_trial, len(found.units)) == ("fused", 10, 0.5, 10)


def test_a_gpu_the_cluster_declares_but_no_worker_sees_plans_shares_and_trains_on_the_cpu():
    made_up = Cluster((Node(2, 1, 24 * GIB),), None, free_bytes=22 * GIB)
    found = plan(load_spec("mnist_classification", quick=True), made_up)
    assert found.gpus_per_trial == 1.0 and found.device == "cpu" and "no CUDA device" in found.why["gpu_memory"]


def test_plans_that_cannot_be_made_name_the_field():
    with pytest.raises(PlanError, match="execution.pack_size auto: a pack of one member needs") as raised:
        plan(load_spec("mnist_classification", overrides={"execution.pack_memory_gb": 0.1}), TWO_CORES)
    assert isinstance(raised.value, SpecError) and "pack_memory_gb" in str(raised.value)
    with pytest.raises(PlanError, match="execution.compile: .*one trial per process"):
        plan(load_spec("cifar10_shallow", overrides={"execution.compile": True}), TWO_CORES)
    with pytest.raises(SpecError, match="execution.gpus_per_trial: 0.01 puts up to 100 pack processes"):
        plan(load_spec("mnist_classification", overrides={"execution.gpus_per_trial": 0.01, "seeds": 100,
                                                          "execution.pack_size": 10}), ONE_H100)


def test_a_pack_or_trial_no_node_can_hold_is_refused_naming_the_field():
    fig2 = {"execution.gpus_per_trial": 1}
    with pytest.raises(PlanError, match=r"execution.gpus_per_trial: each pack asks for 1 GPU, and no node of the "
                                        r"cluster has any \(2 CPUs on 1 node\); set gpus_per_trial: 0 to train on the CPUs"):
        plan(load_spec("mnist_classification", overrides=fig2), TWO_CORES)
    with pytest.raises(PlanError, match=r"execution.gpus_per_trial: each trial asks for 2 GPU, .* has more than 1 "):
        plan(load_spec("cifar10_shallow", overrides={"execution.gpus_per_trial": 2}), ONE_H100, trial_bytes=GIB)
    with pytest.raises(PlanError, match=r"execution.cpus_per_trial: each pack asks for 4 CPUs, and no node of the "
                                        r"cluster has more than 2 .*; set cpus_per_trial: 2 or less"):
        plan(load_spec("mnist_classification", overrides={"execution.cpus_per_trial": 4}), TWO_CORES)
    assert plan(load_spec("mnist_classification", overrides={"execution.cpus_per_trial": 2}), TWO_CORES).slots == 1

