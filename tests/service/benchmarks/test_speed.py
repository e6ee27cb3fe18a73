"""`actsweep bench` end to end on a tiny workload: all three variants run (a real local Ray and
MLflow store for (b) and (c)), and what it prints and writes follows from the rounds it timed."""
from __future__ import annotations

import json
import re

import pytest
import ray
import torch

from service.benchmarks.speed import main as bench

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)


@pytest.mark.long("the bench's three variants each timed twice, two of them as sweeps through Ray Tune and MLflow")
@pytest.mark.timeout(300)  # 110 s in a full suite
def test_the_benchmark_times_every_variant_and_keeps_each_ones_fastest_round(tmp_path, capsys, one_torch_thread):
    ray.shutdown()  # the bench starts its own local Ray
    out = tmp_path / "results.json"
    report = bench(["--trials-per-activation", "1", "--epochs", "2", "--train-examples", "256", "--repeats", "2",
                    "--out", str(out)])
    assert torch.get_num_threads() == 1  # (given back: see one_torch_thread)
    assert json.loads(out.read_text()) == report
    assert report["workload"]["trials"] == 3 and report["repeats"] == 2
    for name in ("plain", "per_trial", "fused"):
        found = report["results"][name]
        assert len(found["rounds"]) == 2 and found["seconds"] == min(found["rounds"]) > 0
        assert 0 < found["fraction_of_peak"] < 1
        assert found["steady_trial_epochs_per_s"] > 0  # from the epochs after each trial's first
    for name in ("per_trial", "fused"):  # through Tune: starting Ray and the trials is a fixed start of seconds
        assert report["results"][name]["fixed_start_s"] > 0
    # the timings as measured, read from the line each round printed when it ended (0.1 s)
    printed = capsys.readouterr().out
    measured = {name: [] for name in ("plain", "per_trial", "fused")}
    for name, seconds in re.findall(r"^(plain|per_trial|fused) +([\d.]+) s .*\[round \d/2\]$", printed, re.M):
        measured[name].append(float(seconds))
    assert all(len(rounds) == 2 for rounds in measured.values()), printed
    for name, rounds in measured.items():  # the report keeps every round, and its fastest as the time
        assert report["results"][name]["rounds"] == pytest.approx(rounds, abs=0.051)
    for over in ("fused", "per_trial"):  # a ratio is the plain script's fastest round over the variant's
        assert report["ratios"][f"{over}/plain"] == pytest.approx(min(measured["plain"]) / min(measured[over]),
                                                                  rel=0.05, abs=0.02)
    assert "ratios, end to end unless marked (fastest rounds): fused/plain" in printed
    if not report["machine"]["native_bf16"]:  # (this AVX2 EPYC): no share of an emulated bf16 matmul, and why
        assert "% of bf16" not in printed and "no share of a bf16 peak: this CPU has no native bf16" in printed
        assert all("steady_fraction_of_bf16_peak" not in found for found in report["results"].values())


def test_the_benchmark_refuses_one_epoch_naming_the_option(capsys):
    try:
        bench(["--epochs", "1"])
    except SystemExit as stop:
        assert stop.code == 2
    else:
        raise AssertionError("--epochs 1 was accepted")
    assert "--epochs: at least 2" in capsys.readouterr().err
