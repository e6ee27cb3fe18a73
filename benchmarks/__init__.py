"""Investigations a developer reruns, each a script: ``python benchmarks/<name>.py --help``.

Each answered one question, and docs/ keeps its answer with the command, commit and hardware of
the run (docs/speed-cpu.md, docs/speed-gpu.md, docs/fused.md, docs/rest.md). They import the
product; the product never imports them. What users run, ``actsweep bench``, is in
service/benchmarks/.
"""
from __future__ import annotations

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

