import subprocess
import sys

import pytest
import torch
from torch import nn

from tests.conftest import REPO
from workers.optim import TrialOptimizer

# (kind, hyperparameters) as TrialConfig passes them; each against the torch.optim class it stands for
SETTINGS = [
    ("adam", {"lr": 1e-2}),
    ("adam", {"lr": 3e-3, "weight_decay": 1e-2}),
    ("sgd", {"lr": 0.1}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
]


def torch_optimizer(kind: str, params, settings: dict) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, **settings)
    return torch.optim.SGD(params, **settings)


def net_and_unused_parameter() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    net.unused = nn.Parameter(torch.ones(2))  # never in the graph: no gradient, no step, no state
    return net


def train(net: nn.Module, optimizer, steps: range, lrs=None) -> None:
    for step in steps:
        generator = torch.Generator().manual_seed(step)
        x, y = torch.randn(16, 5, generator=generator), torch.randint(0, 3, (16,), generator=generator)
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        if isinstance(optimizer, TrialOptimizer):
            optimizer.step(lrs[step] if lrs else None)
        else:
            if lrs:
                optimizer.param_groups[0]["lr"] = lrs[step]
            optimizer.step()


@pytest.mark.parametrize("kind, settings", SETTINGS)
def test_each_step_is_torch_optims_bit_for_bit(kind, settings):
    ours, theirs = net_and_unused_parameter(), net_and_unused_parameter()
    lrs = [settings["lr"] * (1 - step / 20) for step in range(12)]  # a schedule moves lr every step
    train(ours, TrialOptimizer(kind, ours.parameters(), **settings), range(12), lrs)
    train(theirs, torch_optimizer(kind, theirs.parameters(), settings), range(12), lrs)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(ours.unused, torch.ones(2))


@pytest.mark.parametrize("kind, settings", SETTINGS)
def test_a_checkpoint_resumes_in_either_direction(kind, settings):
    """Checkpoints keep torch.optim's layout: trials checkpointed before this optimiser resume with it."""
    whole = net_and_unused_parameter()
    train(whole, torch_optimizer(kind, whole.parameters(), settings), range(10))

    ours = lambda params: TrialOptimizer(kind, params, **settings)  # noqa: E731
    theirs = lambda params: torch_optimizer(kind, params, settings)  # noqa: E731
    for first, second in [(theirs, ours), (ours, theirs)]:
        net = net_and_unused_parameter()
        before = first(net.parameters())
        train(net, before, range(5))
        saved = before.state_dict()
        # state for the four layers' tensors (1-4), none for the unused parameter (0) or plain SGD
        assert set(saved["state"]) == ({1, 2, 3, 4} if kind == "adam" or settings.get("momentum") else set())
        after = second(net.parameters())
        after.load_state_dict(saved)
        train(net, after, range(5, 10))
        for a, b in zip(net.parameters(), whole.parameters(), strict=True):
            assert torch.equal(a, b), (first, second)


def test_a_wrong_optimizer_or_state_is_named():
    params = list(net_and_unused_parameter().parameters())
    with pytest.raises(ValueError, match="optimizer: unknown 'rmsprop'; accepted: adam, sgd"):
        TrialOptimizer("rmsprop", params, lr=1e-3)
    with pytest.raises(ValueError, match="nesterov: needs a momentum above 0"):
        TrialOptimizer("sgd", params, lr=1e-3, nesterov=True)
    saved = TrialOptimizer("adam", params[:2], lr=1e-3).state_dict()
    with pytest.raises(ValueError, match="optimizer state: 2 parameters saved, 5 in this model"):
        TrialOptimizer("adam", params, lr=1e-3).load_state_dict(saved)


def test_a_trial_does_not_import_torch_dynamo():
    """Why this optimiser exists: torch.optim's classes import torch._dynamo (~1 CPU-s per worker)."""
    ours = ("from workers.optim import TrialOptimizer\n"
            "for kind in ('adam', 'sgd'):\n"
            "    p = torch.nn.Parameter(torch.ones(3)); o = TrialOptimizer(kind, [p], lr=0.1, momentum=0.9)\n"
            "    p.sum().backward(); o.step(); o.load_state_dict(o.state_dict())\n")
    theirs = "torch.optim.Adam([torch.nn.Parameter(torch.ones(1))])\n"  # the control: the probe can tell
    probe = "print('torch._dynamo' in sys.modules)\n"
    # one interpreter (torch imported once): ours first, then the control in the same process
    out = subprocess.run([sys.executable, "-c", f"import sys, torch\n{ours}{probe}{theirs}{probe}"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "True"], out.stdout
