"""The wide-GEMM benchmark checks its ways agree before it times them, and prints what it measured."""
import json

import pytest
import torch

import workers.fused
from benchmarks import wide_gemm
from benchmarks.wide_gemm import evaluation_seconds, main


def test_the_wide_gemm_benchmark_times_every_way_and_the_evaluation_batches(capsys):
    threads = torch.get_num_threads()
    result = main(["--members", "2", "--batches", "16", "--rounds", "1", "--eval-batches", "8,32",
                   "--eval-examples", "256"])
    assert torch.get_num_threads() == threads  # (the benchmark's one thread is not left to the tests after it)
    row = result["batches"]["16"]
    assert set(row) == {"batched", "wide", "wide_relaid"}
    for name in ("wide", "wide_relaid"):  # each speed-up is the ratio of the times it printed
        assert row[name]["speedup_forward"] == round(row["batched"]["forward_ms"] / row[name]["forward_ms"], 2)
    assert set(result["evaluation_s_by_batch"]) == {8, 32} and workers.fused.EVAL_BATCH == 2_000  # restored
    assert json.loads(capsys.readouterr().out)["batches"]["16"] == row


def test_a_wide_layer_that_computes_something_else_is_not_timed(monkeypatch):
    original = wide_gemm._layers

    def broken(*args):  # a layout slip: the members' columns interleaved wrongly
        layers = original(*args)
        correct = layers["wide"]
        layers["wide"] = lambda: correct().flip(0)
        return layers
    monkeypatch.setattr(wide_gemm, "_layers", broken)
    with pytest.raises(AssertionError):
        wide_gemm.measure(members=3, batch=8, rounds=1)


def test_evaluation_by_batch_is_a_time_per_size():
    found = evaluation_seconds([16, 64], members=3, examples=128, rounds=1)
    assert list(found) == [16, 64] and all(seconds > 0 for seconds in found.values())
