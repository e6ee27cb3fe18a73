"""What the demo's fused pack spends on a step's dropout: its noise made as it was and as it is,
and a training step with the dropout applied after the activation and inside it.
``python benchmarks/pack_step.py`` (``--dataset digits`` for a quick look).

The pack is the demo's (``actsweep run mnist_classification --quick``): 12 members, gelu_tanh, relu
and elu × lr 1e-3, 1e-4 × dropout 0, 0.5, one seed, on one thread, as a trial worker runs it.

- ``noise``: the full noise (every row, ones for the rows without dropout), made with a broadcast
  ``torch.where`` into a new tensor of ones as it was, and with ``masks.kept_noise`` (a comparison
  and a multiply) as ``StackedNet.dropout_noise`` makes it now; checked to give the same bits.
- ``step_ms``: a whole training step (median of ``--steps``, the two ways alternating in rounds of
  10, so that both see the same machine). ``after``: each layer's activation, then a multiply by
  that full noise (StackedNet.forward before the dropout moved into _GroupedActivation); ``inside``:
  the forward as it is, the dropout rows' noise applied inside the grouped activation. The two
  are checked to give the same loss bits.
- ``evaluate_s``: the test set's evaluation (median of 3), which has no dropout.

Prints JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from functools import partial
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import median_seconds  # noqa: E402
from service.benchmarks.peaks import torch_threads  # noqa: E402
from workers import masks  # noqa: E402


def demo_pack(dataset: str):
    """The demo's pack of 12 at seed 0 and its data on the CPU: (pack, the six arrays placed)."""
    from search_spaces.catalog import load_spec
    from service.driver.data import load_splits
    from service.settings import Settings
    from workers.fused import StackedPack
    from workers.trial import TrialConfig

    small = {"dataset": dataset, "val_size": 200, "train_subset": None}  # (the digits: 1,797 images in all)
    spec = load_spec("mnist_classification", quick=True, overrides=small if dataset != "mnist" else None)
    splits = load_splits(spec, Settings())
    fields = {f.name for f in dataclasses.fields(TrialConfig)}
    base = {k: v for k, v in spec.trial_base().items() if k in fields}
    cfgs = [TrialConfig(**{**base, "activation": a, "lr": lr, "dropout": d, "seed": 0})
            for a in spec.activation for lr in spec.lr for d in spec.dropout]
    pack = StackedPack(cfgs, splits, torch.device("cpu"))
    return pack, pack.place(splits.arrays())


def _noise_before(net, batch: int, step: int) -> torch.Tensor:
    """StackedNet.dropout_noise as it was: a bool mask, a broadcast select, a new tensor of ones."""
    from workers.fused import _joined_counters

    sites = tuple((masks.site(layer, masks.DROPOUT), width) for layer, width in enumerate(net.widths))
    keys = net.seed_keys.index_select(0, net.drop_rows)
    keep = masks.kept(masks.step_keys(keys, step), _joined_counters(batch, sites, torch.device("cpu")), net.thresholds)
    noise = torch.where(keep, net.scales, 0.0)
    return torch.ones((len(net.row_dropout), *noise.shape[1:])).index_copy_(0, net.drop_rows, noise)


def noise(pack, batch: int, rounds: int) -> dict:
    net = pack.net
    now = torch.cat(net.dropout_noise(batch, "cpu", step=3), dim=-1)
    if not torch.equal(now, _noise_before(net, batch, 3)):
        raise AssertionError("the two ways of making dropout noise differ")
    before = median_seconds(lambda: _noise_before(net, batch, 3), rounds)
    kept = median_seconds(lambda: net.dropout_noise(batch, "cpu", step=3), rounds)
    return {"before_ms": round(before * 1e3, 3), "now_ms": round(kept * 1e3, 3), "speedup": round(before / kept, 2)}


def forward_with_dropout_after(net, x, members, collect=None, step=0):
    """StackedNet.forward as it was: each layer's activation, then a multiply by the full noise
    (ones for the rows without dropout). tests/workers/test_fused.py holds the forward as it is to
    its bits."""
    noises = net.dropout_noise(x.shape[-2], x.device, step)
    soi = net.soi_uniforms(x.shape[-2], x.device, step) if net.training else None
    depth = 0
    for i, (weight, bias) in enumerate(zip(net.weights, net.biases)):
        if x.dim() == 2:
            x = x.expand(len(weight), *x.shape)
        x = torch.baddbmm(bias, x, weight)
        if net.activated[i]:
            x = net._activate(x, members, depth, soi[depth] if soi else None)
            if noises is not None:
                x = x * noises[depth]
            depth += 1
    return x


def step_and_evaluate(pack, arrays, steps: int) -> dict:
    """Median ms of a training step with the dropout after the activation and inside it
    (alternating rounds of 10 steps), and the median s of the test set's evaluation."""
    from workers.fused import evaluate_pack
    from workers.precision import forward_precision
    from workers.train import train_step

    train_x, train_y, _, _, test_x, test_y = arrays
    precision = partial(forward_precision, "fp32", torch.device("cpu"), cache=False)
    generator = torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(len(train_y), generator=generator)[:pack.first.batch_size] for _ in pack.cfgs])
    x, y = pack.batch(train_x, train_y, idx, [])
    net = pack.net
    with torch.no_grad():
        if not torch.equal(net(x, pack.members, step=3), forward_with_dropout_after(net, x, pack.members, step=3)):
            raise AssertionError("the dropout after and inside the activation differ")
    counter = iter(range(10 ** 9))
    times: dict[str, list[float]] = {"after": [], "inside": []}
    for _ in range(max(1, steps // 10)):
        for way in ("after", "inside"):
            if way == "after":
                net.forward = partial(forward_with_dropout_after, net)  # (this instance only)
            else:
                del net.forward  # back to StackedNet's own
            times[way].append(median_seconds(lambda: train_step(pack, x, y, precision, 1.0, next(counter)), 10,
                                             warmup=1))
    assert "forward" not in vars(net)  # (the pack's own again)
    evaluate = median_seconds(lambda: evaluate_pack(net, pack.members, test_x, test_y, "classify"), 3, warmup=1)
    step = {way: round(statistics.median(found) * 1e3, 2) for way, found in times.items()}
    return {"step_ms": step, "step_speedup": round(step["after"] / step["inside"], 2), "evaluate_s": round(evaluate, 3)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", help="mnist (the demo's), or digits for a quick look")
    parser.add_argument("--steps", type=int, default=100, help="training steps timed each way")
    args = parser.parse_args(argv)
    with torch_threads(1):
        pack, arrays = demo_pack(args.dataset)
        result = {"dataset": args.dataset, "members": len(pack.cfgs),
                  "noise": noise(pack, pack.first.batch_size, max(args.steps, 5)),
                  **step_and_evaluate(pack, arrays, args.steps)}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
