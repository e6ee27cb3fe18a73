"""A device's matmul peak, measured in the same run as the figures that are shares of it."""
from __future__ import annotations

import time

import torch


def sync(device: str) -> None:
    """Wait for the device's queued work (a GPU's), so that a timer reads it."""
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_peak(threads: int, dtype: torch.dtype = torch.float32, device: str = "cpu", size: int = 2048,
                repeats: int = 10) -> float:
    """GFLOP/s of a large square matmul in ``dtype`` on ``threads`` threads (or the GPU): the best of ``repeats``."""
    torch.set_num_threads(threads)
    size = max(size, 8192) if device == "cuda" else size
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    best = float("inf")
    for _ in range(repeats + 2):
        sync(device)
        started = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size ** 3 / best / 1e9
