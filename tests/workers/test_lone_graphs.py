"""One training step for every trial (workers.train.step_on_device): a lone network's step, a
convnet's included, is captured as a CUDA graph as a pack's is (workers.graphs), its lr a tensor on
the device so that schedules are captured too, and its batches augmented on the device.

On any machine: the lr-as-tensor path gives the lrs the float path gave, and trains the same; the
device augmentation draws what the per-image loop drew. On a GPU (skipped without one;
ACTSWEEP_REQUIRE_CUDA=1 makes them fail instead): a lone convnet's eager and captured steps are the
same code and give the same numbers."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import workers.train as train
from tests.conftest import make_cifar
from workers.data import load_dataset
from workers.fused import StackedPack
from workers.optim import TrialOptimizer
from workers.train import OneModel, augment_batch, lr_factor, step_on_device, train_epochs
from workers.trial import TrialConfig

SCHEDULES = [  # the papers' schedules: GELU §3.5 (linear decay, SGDR), ELU §4.2 (steps by iteration)
    {"kind": "linear_decay", "start": 1},
    {"kind": "cosine", "t0": 1, "t_mult": 2},
    {"kind": "piecewise", "unit": "iteration", "milestones": [7, 15], "factors": [1.0, 0.1, 0.01]},
]
MLP = {"kind": "mlp", "depth": 2, "width": 32, "init": "unit_norm_rows"}
SHALLOW = {"kind": "cifar_shallow", "width": 8, "input_noise": 0.15, "init": "torch_default"}
WRN = {"kind": "wide_resnet", "depth": 10, "widen_factor": 1, "init": "he"}
STACKED = {"kind": "stacked_conv", "init": "he", "width_scale": 0.05,
           "stacks": [[[1, 192, 5]], [[1, 192, 1], [1, 240, 3]], [[1, 240, 1], [1, 260, 2]], [[1, 100, 1]]],
           "stack_dropout": [0.0, 0.1, 0.2, 0.0]}


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    folder = make_cifar(tmp_path_factory.mktemp("data"), "cifar10", per_batch=64, test=64)
    return load_dataset("cifar10", folder, download=False, val_size=64)


@pytest.fixture(scope="module")
def small_cifar(tmp_path_factory):  # (half the images: the CPU's two trainings of a trial take seconds)
    folder = make_cifar(tmp_path_factory.mktemp("data"), "cifar10", per_batch=32, test=32)
    return load_dataset("cifar10", folder, download=False, val_size=32)


# -- on any machine -------------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s["kind"])
def test_the_lr_tensor_holds_the_lrs_the_float_path_used(schedule):
    """A lone trial's optimiser on the device, and a pack's: at every step of a schedule the lr
    the update reads is the one the float path computed (float32 of lr × factor; a pack's
    float32(lr) × float32(factor), as its lr tensor always gave)."""
    lr, steps_per_epoch, total = 0.05, 4, 24
    lone = TrialOptimizer("sgd", [torch.nn.Parameter(torch.ones(2))], lr=lr, momentum=0.9, on_device=True)
    cfg = TrialConfig("relu", lr, 0.0, 0, epochs=6, batch_size=8, model=MLP, optimizer="sgd", schedule=schedule)
    pack = StackedPack([cfg, replace(cfg, seed=1)], _tiny_vectors(), torch.device("cpu"))
    factors = []
    for step in range(total):
        factor = lr_factor(schedule, step, steps_per_epoch, total)
        factors.append(factor)
        lone.set_lr(lr * factor)
        assert lone.lr_now.item() == torch.tensor(lr * factor, dtype=torch.float32).item(), step
        pack.begin_step(factor)
        assert pack.optimizer._single_lr().item() == (torch.tensor(lr) * factor).item(), step
    assert len(set(factors)) >= 3  # (the schedule moved)


def _tiny_vectors():
    from workers.data.synthetic import mnist_shaped

    return mnist_shaped(train=64, val=16, test=16)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_scheduled_trial_trains_the_same_with_its_lr_on_the_device(small_cifar, monkeypatch, optimizer):
    """The CPU trains with a float lr (the records' path); the GPU's path, the lr a tensor read by
    fused Adam or foreach SGD, run here on the CPU, gives the same trial to float rounding."""
    settings = {"momentum": 0.9, "nesterov": True, "weight_decay": 5e-4} if optimizer == "sgd" else {}
    cfg = TrialConfig("elu", 0.01 if optimizer == "sgd" else 1e-3, 0.0, 0, epochs=2, batch_size=32, model=WRN,
                      optimizer=optimizer, schedule=SCHEDULES[1], augment={"crop_padding": 4, "flip": True}, **settings)
    floats = list(train_epochs(cfg, small_cifar))
    made = train.make_optimizer
    monkeypatch.setattr(train, "make_optimizer", lambda cfg, params, on_device=False: made(cfg, params, on_device=True))
    tensors = list(train_epochs(cfg, small_cifar))
    assert floats[-1]["lr"] < cfg.lr
    for a, b in zip(floats, tensors):
        for key in ("train_loss", "train_loss_eval", "val_loss", "test_loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-4), (key, a["epoch"])


def _augment_per_image(x, augment, generator):
    """The per-image loop the device gathers replaced (its draws, in its order)."""
    n, _, h, w = x.shape
    pad = augment.get("crop_padding", 0)
    if pad:
        padded = F.pad(x, (pad, pad, pad, pad))
        dy, dx = (torch.randint(0, 2 * pad + 1, (n,), generator=generator).tolist() for _ in range(2))
        x = torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])
    if augment.get("flip"):
        flip = torch.rand(n, generator=generator) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(3), x)
    return x


def test_device_augmentation_draws_what_the_per_image_loop_drew():
    x = torch.rand(37, 3, 32, 32)
    augment = {"crop_padding": 4, "flip": True}
    ours = augment_batch(x, augment, torch.Generator().manual_seed(5))
    theirs = _augment_per_image(x, augment, torch.Generator().manual_seed(5))
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, x)
    crops = augment_batch(torch.rand(5, 3, 40, 44), {"crop_size": 32}, torch.Generator().manual_seed(1))
    assert crops.shape == (5, 3, 32, 32)


def test_a_lone_trial_has_one_step_and_it_is_the_packs(cifar):
    """No second loop: a lone network's graph captures workers.train.step_on_device, as a pack's does."""
    cfg = TrialConfig("relu", 1e-3, 0.0, 0, epochs=1, batch_size=32, model=SHALLOW)
    one = OneModel([cfg], cifar, torch.device("cpu"))
    assert one.graphed.step_fn.func is step_on_device and one.graphed.step_fn.args[0] is one
    assert one.graphed.mode == "eager: not on a GPU"
    pack = StackedPack([replace(cfg, model=MLP)], cifar, torch.device("cpu"))
    assert pack.graphed.step_fn.func is step_on_device


# -- on a GPU -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("model, settings", [
    (SHALLOW, {"schedule": SCHEDULES[0]}),  # batch norm, Gaussian input noise, nn.Dropout, linear decay
    (WRN, {"optimizer": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4, "schedule": SCHEDULES[1],
           "augment": {"crop_padding": 4, "flip": True}}),  # cifar100_wrn's settings: SGDR, crops and flips
    (STACKED, {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 5e-4, "schedule": SCHEDULES[2],
               "augment": {"crop_padding": 4, "flip": True}}),  # the ELU net: counter-based dropout masks, steps
], ids=["cifar_shallow", "wide_resnet", "stacked_conv"])
def test_a_lone_convnets_captured_step_gives_its_eager_steps_numbers(cifar, cuda, model, settings):
    cfg = TrialConfig("elu", 1e-3 if "optimizer" not in settings else 0.01, 0.3, 0, epochs=3, batch_size=32,
                      model=model, **settings)
    graphed = list(train_epochs(cfg, cifar, cuda))
    eager = list(train_epochs(replace(cfg, cuda_graphs=False), cifar, cuda))
    assert [m["step_mode"] for m in graphed] == ["cuda graph"] * 3
    assert eager[0]["step_mode"] == "eager: execution.cuda_graphs: false"
    assert graphed[-1]["lr"] == eager[-1]["lr"] < cfg.lr
    for a, b in zip(graphed, eager):
        for key in ("train_loss", "train_loss_eval", "val_loss", "test_loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (key, a["epoch"])
