"""A device's matmul peak, measured in the same run as the figures that are shares of it, and the
torch threads a bench measures on (given back to its caller after it)."""
from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

import torch

Result = TypeVar("Result")


@contextmanager
def torch_threads(count: int | None = None) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` inside the block (None: left as they are), and given
    back after it, however the block changed them."""
    threads = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def keeps_torch_threads(function: Callable[..., Result]) -> Callable[..., Result]:
    """A bench's entry point that leaves its caller's thread count as it found it. A bench measures on
    every core; a process that ran one (a test process) would keep training on that many threads, and
    on a busy machine they cost more CPU for the same work: a record's trial beside two busy processes
    took 24.5 CPU-s on two threads, 15.5 on one, on 2 Xeon cores."""
    @functools.wraps(function)
    def keeping(*args, **kwargs) -> Result:
        with torch_threads():
            return function(*args, **kwargs)
    return keeping


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
