"""What one training step of a fused pack dispatches: about as many aten ops as one network's,
whatever the pack's size (service.benchmarks.engine; docs/fused.md). On a GPU each op is a launch,
so a count that grew with the members would leave the card idle."""
from __future__ import annotations

import pytest

from service.benchmarks.engine import fig2_pack, lone_sequential_ops, step_ops
from workers.data.synthetic import mnist_shaped

BOUND = 400  # ops per training step, the same for 18 members and for 360


@pytest.fixture(scope="module")
def data():
    return mnist_shaped(train=512, val=64, test=64)


@pytest.mark.parametrize("seeds", [1, pytest.param(20, marks=pytest.mark.slow)])  # (360 members: make test only)
def test_a_fig2_packs_step_dispatches_a_bounded_number_of_ops(data, seeds):
    cfgs = fig2_pack(seeds)
    assert len(cfgs) == 18 * seeds
    assert {c.dropout for c in cfgs} == {0.0, 0.5} and len({c.activation for c in cfgs}) == 3
    ops = step_ops(cfgs, data)
    print(f"{len(cfgs)} members: {sum(ops.values())} aten ops per training step "
          f"(a lone nn.Sequential with dropout and torch.optim.Adam: {lone_sequential_ops()})")
    assert sum(ops.values()) <= BOUND, ops.most_common(10)


def test_the_count_does_not_grow_with_the_members(data):
    small, large = step_ops(fig2_pack(1), data), step_ops(fig2_pack(3), data)
    assert sum(large.values()) == sum(small.values()), (large - small) + (small - large)


def test_the_lone_reference_counts_its_dropout():
    assert lone_sequential_ops(dropout=0.5) > lone_sequential_ops(dropout=0.0)


def test_one_warmup_step_reaches_the_steady_count_on_a_cpu(data):
    cfgs = fig2_pack(1)
    assert sum(step_ops(cfgs, data).values()) == sum(step_ops(cfgs, data, warmup=4).values())
