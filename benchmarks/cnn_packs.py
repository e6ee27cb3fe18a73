"""Do convolutional nets gain from training as a pack? ``python benchmarks/cnn_packs.py``.

cifar10_shallow's net (workers.models.ShallowCIFARNet: 9 convs with batch norm, dropout, Gaussian
input noise) on synthetic 3 × 16 × 16 images, P members, one training step each (forward,
backward, Adam) on one shared batch, timed two ways in one run:

- ``alone``: the members one after another, each its own module and ``torch.optim.Adam`` (foreach);
- ``vmap``: the members' parameters and buffers stacked (``torch.func.stack_module_state``), the
  step as ``vmap(grad_and_value(functional_call))`` with ``randomness="different"`` (each member
  its own dropout and noise draws), one Adam over the stacked tensors. Batch norm: each member's
  running statistics are stacked buffers, updated in place inside the vmap (member by member).

Prints each way's median step time over ``--rounds`` (after warm-up) and the ratio, as JSON.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from workers.models import build_model

if __package__ in (None, ""):  # run as a script (python benchmarks/cnn_packs.py): the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import median_seconds  # noqa: E402

MODEL = {"kind": "cifar_shallow", "width": 96, "input_noise": 0.15, "init": "torch_default"}  # cifar10_shallow's


def _members(p: int, width: int) -> list[torch.nn.Module]:
    members = []
    for seed in range(p):
        torch.manual_seed(seed)
        members.append(build_model({**MODEL, "width": width}, (3, 16, 16), 10, "relu", 0.5).train())
    return members


def alone_step(members, x, y):
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-3, foreach=True) for m in members]

    def step():
        for member, optimizer in zip(members, optimizers):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(member(x), y).backward()
            optimizer.step()
    return step


def vmap_step(members, x, y):
    params, buffers = stack_module_state(members)
    params = {name: value.detach().requires_grad_(False) for name, value in params.items()}
    base = copy.deepcopy(members[0]).to("meta")

    def loss(p, b, x, y):
        return F.cross_entropy(functional_call(base, (p, b), (x,)), y)

    step_all = vmap(grad_and_value(loss), in_dims=(0, 0, None, None), randomness="different")
    leaves = [torch.nn.Parameter(value) for value in params.values()]
    optimizer = torch.optim.Adam(leaves, lr=1e-3, foreach=True)

    def step():
        grads, _ = step_all(dict(zip(params, leaves)), buffers, x, y)
        for leaf, name in zip(leaves, params):
            leaf.grad = grads[name]
        optimizer.step()
    return step


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--width", type=int, default=MODEL["width"], help="the net's first width (cifar10_shallow's: 96)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    x, y = torch.randn(args.batch, 3, 16, 16), torch.randint(0, 10, (args.batch,))
    rows = []
    for p in args.members:
        alone = median_seconds(alone_step(_members(p, args.width), x, y), args.rounds)
        fused = median_seconds(vmap_step(_members(p, args.width), x, y), args.rounds)
        rows.append({"members": p, "alone_step_s": round(alone, 4), "vmap_step_s": round(fused, 4),
                     "vmap_speedup": round(alone / fused, 2)})
    result = {"net": f"cifar10_shallow (ShallowCIFARNet, width {args.width})", "images": "synthetic 3x16x16",
              "batch": args.batch, "threads": torch.get_num_threads(), "rows": rows}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
