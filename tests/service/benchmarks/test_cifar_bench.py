"""The cifar bench (service.benchmarks.cifar) on the CPU: every row prints, tiny; the conv pack's
grouped network computes its members' nets; the plan's choice reads the bench's JSON."""
from __future__ import annotations

import json

import pytest
import torch

from service.benchmarks.cifar import GroupedShallowNet, choices, flops_per_training_image, isolated_rate, main, parser
from workers.convnet_plan import channels_last, convnet_strategy
from workers.models import build_model

pytestmark = pytest.mark.slow
SHALLOW = {"kind": "cifar_shallow", "width": 4, "input_noise": 0.15, "init": "torch_default"}
ROWS = "plain,per_trial,per_trial_tf32,per_trial_channels_last,per_trial_tf32_channels_last,streams,grouped_conv"  # (processes: the GPU run's)


def test_the_bench_prints_every_row_tiny(tmp_path, capsys, one_torch_thread):
    out = tmp_path / "cifar.json"
    report = main(["--tiny", "--steps", "1", "--warmup", "1", "--nets", "cifar10_shallow", "--rows", ROWS,
                   "--out", str(out)])
    assert torch.get_num_threads() == 1  # (given back: see one_torch_thread)
    printed = capsys.readouterr().out
    assert "synthetic images in CIFAR's layout" in printed and report["synthetic_data"]
    rows = report["nets"]["cifar10_shallow"]["rows"]
    assert list(rows) == ROWS.split(",")
    for row, measured in rows.items():
        assert f"  {row} " in printed
        assert measured["images_per_s"] > 0 and measured["trial_epochs_per_s"] == pytest.approx(
            measured["images_per_s"] / 45_000, rel=1e-2, abs=1e-4)
    assert rows["streams"]["trials"] == rows["grouped_conv"]["trials"] == 2
    assert json.loads(out.read_text())["nets"]["cifar10_shallow"]["fastest_to_share"] in ("per_trial", "streams", "grouped_conv")


def test_a_row_in_its_own_process_that_runs_past_its_limit_is_stopped_and_reported_none():
    args = parser().parse_args(["--tiny", "--steps", "1", "--warmup", "1", "--pack", "2", "--batch", "16"])
    # (injected: a limit shorter than the child's imports, so the row cannot finish in it)
    assert isolated_rate("cifar10_shallow", "streams", args, timeout_s=0.5) is None


def test_the_grouped_pack_computes_each_members_net():
    members = []
    for seed in range(3):
        torch.manual_seed(seed)
        members.append(build_model(SHALLOW, (3, 32, 32), 10, "relu", 0.5).eval())
    pack = GroupedShallowNet(members).eval()
    x = torch.rand(3, 5, 3, 32, 32)  # each member its own images
    with torch.no_grad():
        ours = pack(x)
        theirs = torch.stack([m(x[p]) for p, m in enumerate(members)])
    assert ours.shape == (3, 5, 10)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_flops_count_the_convolutions():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10))
    assert flops_per_training_image(net, (3, 4, 4)) == 6 * (8 * 16 * 3 * 9 + 128 * 10)


def test_the_plan_reads_the_benchs_choices():
    measured = {"nets": {"cifar10_shallow": {"model": "cifar_shallow", "fastest_to_share": "streams",
                                             "rows": {"per_trial": {"images_per_s": 10.0},
                                                      "per_trial_channels_last": {"images_per_s": 9.0},
                                                      "per_trial_tf32": {"images_per_s": 20.0},
                                                      "per_trial_tf32_channels_last": {"images_per_s": 28.0}}}}}
    found = choices(measured["nets"])
    assert found == {"strategy": {"cifar_shallow": "streams"}, "channels_last": {"cifar_shallow": False},
                     "channels_last_tf32": {"cifar_shallow": True}}
    assert convnet_strategy("cifar_shallow", "cuda", found) == "streams"
    assert convnet_strategy("cifar_shallow", "cpu", found) == "per_trial"
    assert convnet_strategy("wide_resnet", "cuda", found) == "per_trial"  # (not measured: one trial per process)
    # the layout per precision, as measured (a GPU's fp32 and tensor-core kernels favour different ones)
    assert channels_last("cifar_shallow", "tf32", found) is True and channels_last("cifar_shallow", "fp32", found) is False
    assert channels_last("cifar_shallow", "bf16", found) is False  # (fp32's measurement serves bf16)
    assert channels_last("wide_resnet", "tf32", found) is False


def test_the_goals_judge_each_precision_on_its_faster_layout():
    """A trial takes channels-last where the bench measured it faster (workers.convnet_plan), so the
    fp32 and TF32 goals are each judged on the faster of the two layouts."""
    from service.benchmarks.cifar import goals

    def row(share, seconds):
        return {"share_of_fp32_peak": share, "epoch_seconds_per_trial": seconds}

    wrn = {"per_trial": row(0.594, 9.0), "per_trial_channels_last": row(0.61, 8.8),
           "per_trial_tf32": row(0.2, 4.4), "per_trial_tf32_channels_last": row(0.25, 3.7)}
    found = goals({"cifar100_wrn": {"rows": wrn}})
    assert found["WRN-40-4 fp32 >= 60% of fp32 peak"] == "61.0%, per_trial_channels_last (met)"
    assert found["WRN-40-4 tf32 epoch of 45,000 <= 4 s"] == "3.70 s, per_trial_tf32_channels_last (met)"
    found = goals({"cifar100_wrn": {"rows": {"per_trial": row(0.594, 9.0)}}})
    assert found["WRN-40-4 fp32 >= 60% of fp32 peak"] == "59.4%, per_trial (not met)"
