"""glibc's malloc told to keep what a training step frees, so the next step reuses it.

A pack's step allocates and frees the same tensors every step: on the demo's pack of 12 members,
evaluation's activations of 12 × 2,000 × 128 floats (12 MB) and the training step's dropout noise
(6 MB), among others. glibc serves blocks above its mmap threshold (128 KiB, raised to at
most 32 MiB as it sees large frees) with fresh ``mmap``s, and gives the top of its heap back to
the kernel once more than twice that is free. Either way the next step's tensor is new memory, and
the kernel zero-fills it page by page on first touch: 1,536 page faults for 6 MB. In the
profile of a demo pack those faults were the bulk of ``fill_``, ``copy_`` and ``clamp_min``.

With the thresholds raised, freed blocks stay in the heap and are reused. The process's peak
memory is the same (what it holds at its largest); it is returned at exit rather than at each
free. Measured with ``python benchmarks/pack_epoch_malloc.py`` (docs/speed-cpu.md, docs/plan.md).

Where the environment sets glibc's own ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_``,
those win: this changes nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

M_TRIM_THRESHOLD = -1  # mallopt's parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 256 * 2 ** 20  # blocks up to this come from the heap (glibc's default stops at 32 MiB)
TRIM_THRESHOLD_BYTES = 1024 * 2 ** 20  # free memory at the heap's top kept up to this
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def on_glibc() -> bool:
    """Whether this Python runs on glibc (whose ``mallopt`` this module calls)."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds in this process (``mallopt``). Returns whether they
    were set: False off glibc (macOS, musl), or where the environment sets either itself."""
    if not on_glibc():
        return False
    if any(name in os.environ for name in ENVIRONMENT):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
