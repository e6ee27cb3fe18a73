"""Benchmarks that print their figures: speed (plain PyTorch vs per-trial vs fused packs; actsweep
bench) and the REST service under load (python -m service.benchmarks.load)."""

import statistics
import time
from typing import Callable


def median_seconds(call: Callable[[], object], rounds: int, warmup: int = 2) -> float:
    """The median wall time of ``rounds`` calls of ``call``, after ``warmup`` untimed ones (the
    allocator and the kernels' choices settle)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
