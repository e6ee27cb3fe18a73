"""The pack-step benchmark checks that its two ways of making dropout noise agree, and its two
ways of applying it in a step, before it times them, and leaves the pack its own forward after."""
import json

import pytest
import torch

from benchmarks import pack_step
from benchmarks.pack_step import main


def test_the_pack_step_benchmark_times_both_noises_alone_and_in_steps(capsys):
    threads = torch.get_num_threads()
    result = main(["--dataset", "digits", "--steps", "20"])
    assert torch.get_num_threads() == threads  # (its one thread is not left to the tests after it)
    assert result["members"] == 12  # the demo's pack: 3 activations × 2 lrs × 2 dropout rates
    noise = result["noise"]
    assert noise["speedup"] == round(noise["before_ms"] / noise["now_ms"], 2)
    step = result["step_ms"]
    assert step["after"] > 0 and step["inside"] > 0 and result["evaluate_s"] > 0
    assert result["step_speedup"] == round(step["after"] / step["inside"], 2)
    assert json.loads(capsys.readouterr().out)["noise"] == noise


def test_noise_made_another_way_that_differs_is_not_timed(monkeypatch):
    original = pack_step._noise_before
    monkeypatch.setattr(pack_step, "_noise_before", lambda net, batch, step: original(net, batch, step + 1))
    with pytest.raises(AssertionError, match="differ"):
        main(["--dataset", "digits", "--steps", "3"])


def test_a_step_whose_dropout_differs_is_not_timed(monkeypatch):
    original = pack_step.forward_with_dropout_after
    monkeypatch.setattr(pack_step, "forward_with_dropout_after",
                        lambda net, x, members, collect=None, step=0: original(net, x, members, step=step + 1))
    with pytest.raises(AssertionError, match="differ"):
        main(["--dataset", "digits", "--steps", "3"])
