"""Does a pack's shared-input first layer gain from one wide GEMM? ``python benchmarks/wide_gemm.py``.

Where a pack's members read the same rows (evaluation always; training when their seeds, so their
data orders, agree), the first layer of all P members can be one (B × D) @ (D × P·H) matmul in
place of the P (B × D) @ (D × H) matmuls that ``StackedNet`` runs as one ``baddbmm`` over a
stride-0 batch. Timed in one run, on ``--threads`` threads, for the paper's first layer (D 784,
H 128) at the training batch (128) and the evaluation batch (workers.train.EVAL_BATCH):

- ``batched``: what the pack runs, ``baddbmm(bias, x.expand(P, B, D), W)`` with W (P, D, H);
- ``wide``: one ``addmm`` on W laid out (D, P·H) beforehand (the best case: no copy per step),
  its output viewed back as (P, B, H) without a copy;
- ``wide_relaid``: the same with W copied into that layout every call (the parameters as the pack
  holds them, per member).

Each is timed forward only, and forward and backward (the weight and bias gradients; the input
needs none), then the second layer reads the result, as the next ``baddbmm`` would (a wide
output is strided per member). Before timing, the ways are checked to agree.

Then the batch size of evaluation: a whole pack (workers.fused.evaluate_pack, the paper's 8 × 128
classifier, 4 members each of gelu, relu, elu) evaluates 10,000 synthetic images in batches of
each of ``--eval-batches``, without autograd. Prints the median times, GFLOP/s (of both layers)
and speed-ups over ``batched``, and the evaluation's seconds per batch size, as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import workers.fused
from workers.fused import StackedNet, evaluate_pack
from workers.models import build_model
from workers.train import EVAL_BATCH

if __package__ in (None, ""):  # run as a script (python benchmarks/wide_gemm.py): the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import median_seconds  # noqa: E402
from service.benchmarks.peaks import torch_threads  # noqa: E402

FAN_IN, UNITS = 784, 128  # the GELU paper's MNIST classifier: 784 inputs, 128 units per layer


def _layers(members: int, batch: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, FAN_IN, generator=generator)
    weight = torch.randn(members, FAN_IN, UNITS, generator=generator).mul_(FAN_IN ** -0.5).requires_grad_()
    bias = torch.randn(members, 1, UNITS, generator=generator).requires_grad_()
    second = torch.randn(members, UNITS, UNITS, generator=generator).mul_(UNITS ** -0.5)
    laid = weight.detach().permute(1, 0, 2).reshape(FAN_IN, members * UNITS).requires_grad_()
    laid_bias = bias.detach().reshape(1, members * UNITS).requires_grad_()

    def batched():
        return torch.baddbmm(bias, x.expand(members, batch, FAN_IN), weight)

    def wide():
        return torch.addmm(laid_bias, x, laid).view(batch, members, UNITS).transpose(0, 1)

    def wide_relaid():
        flat = weight.permute(1, 0, 2).reshape(FAN_IN, members * UNITS)
        return torch.addmm(bias.reshape(1, members * UNITS), x, flat).view(batch, members, UNITS).transpose(0, 1)

    return {"batched": batched, "wide": wide, "wide_relaid": wide_relaid, "second": second,
            "params": (weight, bias, laid, laid_bias)}


def measure(members: int, batch: int, rounds: int = 30) -> dict:
    """The three ways' median seconds for one batch, forward and forward + backward, with GFLOP/s."""
    layers = _layers(members, batch)
    second, params = layers.pop("second"), layers.pop("params")
    reference = layers["batched"]().detach()
    for name in ("wide", "wide_relaid"):  # the ways compute one thing, or nothing here is worth timing
        torch.testing.assert_close(layers[name]().detach(), reference, rtol=1e-5, atol=1e-5)
    # both layers' forward; backward, the first layer's weight gradient and the second's input gradient: as much again
    flop = 2 * batch * members * (FAN_IN * UNITS + UNITS * UNITS)
    found = {}
    for name, layer in layers.items():
        def forward(layer=layer):
            with torch.no_grad():
                torch.bmm(layer(), second)

        def forward_backward(layer=layer):
            torch.bmm(layer(), second).sum().backward()
            for param in params:
                param.grad = None

        seconds = {"forward": median_seconds(forward, rounds), "forward_backward": median_seconds(forward_backward, rounds)}
        found[name] = {**{f"{k}_ms": round(v * 1e3, 3) for k, v in seconds.items()},
                       "gflops_forward": round(flop / seconds["forward"] / 1e9, 1),
                       "gflops_forward_backward": round(2 * flop / seconds["forward_backward"] / 1e9, 1)}
    for name in ("wide", "wide_relaid"):
        for kind in ("forward", "forward_backward"):
            found[name][f"speedup_{kind}"] = round(found["batched"][f"{kind}_ms"] / found[name][f"{kind}_ms"], 2)
    return found


def evaluation_seconds(batches: list[int], members: int = 12, examples: int = 10_000, rounds: int = 3) -> dict[int, float]:
    """Median seconds for a pack of ``members`` to evaluate ``examples`` synthetic images in each batch size."""
    activations = [("gelu", "relu", "elu")[j % 3] for j in range(members)]
    references = []
    for seed, activation in enumerate(activations):
        torch.manual_seed(seed)
        references.append(build_model({"kind": "mlp", "depth": 8, "width": UNITS}, (FAN_IN,), 10, activation, 0.0))
    order = sorted(range(members), key=lambda j: activations[j])  # (a pack is sorted by activation)
    net = StackedNet([references[j] for j in order], [activations[j] for j in order], [0.0] * members)
    generator = torch.Generator().manual_seed(0)
    x, y = torch.rand(examples, FAN_IN, generator=generator), torch.randint(0, 10, (examples,), generator=generator)
    found, default = {}, workers.fused.EVAL_BATCH
    try:
        for batch in batches:
            workers.fused.EVAL_BATCH = batch
            found[batch] = round(median_seconds(lambda: evaluate_pack(net, list(range(members)), x, y, "classify"), rounds), 3)
    finally:
        workers.fused.EVAL_BATCH = default
    return found


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=12)
    parser.add_argument("--batches", default=f"128,{EVAL_BATCH}", help="comma list of batch sizes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--eval-batches", default=f"500,{EVAL_BATCH},5000,10000", help="comma list (empty: skip)")
    parser.add_argument("--eval-examples", type=int, default=10_000, help="synthetic images the pack evaluates")
    args = parser.parse_args(argv)
    with torch_threads(args.threads):
        result = {"members": args.members, "threads": args.threads, "fan_in": FAN_IN, "units": UNITS,
                  "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "batches": {batch: measure(args.members, int(batch), args.rounds) for batch in args.batches.split(",")},
                  "evaluation_s_by_batch": evaluation_seconds([int(b) for b in args.eval_batches.split(",") if b],
                                                              args.members, args.eval_examples)}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
