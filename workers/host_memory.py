"""Freed host memory kept for the next allocation (glibc's malloc), in a process that trains.

A training step allocates and frees the same large tensors again and again: activations,
dropout noise, gradients; an evaluation batch of a 12-member pack holds 12 MB a layer. glibc
serves each block over its mmap threshold (128 KiB at first) with a fresh mapping and returns it
to the system when freed, so the next one page-faults every page in again: a 6 MB fill took
3.7 ms in a step, against 0.3 ms in memory touched before (docs/speed-cpu.md). Raising the
threshold to glibc's largest (32 MiB) and the trim threshold above it keeps those blocks in the
process's heap, to be reused; its memory stays at its peak, as a trial's does anyway.
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
MMAP_THRESHOLD_MAX = 32 * 2 ** 20  # glibc's upper bound on 64-bit systems
TRIM_THRESHOLD = 1 * 2 ** 30  # free memory kept at the heap's top before it is given back


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed blocks up to 32 MiB for reuse; False where the C library is
    not glibc (nothing changed)."""
    path = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(path)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
