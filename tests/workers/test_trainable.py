"""A trial's memory limit (workers.trainable.memory_limit) in this process: an allocation past it
fails as the trial's own MemoryError naming the limit; other errors pass through untouched; the
limit is lifted afterwards. (tests/service/api/test_out_of_memory.py runs it in a real sweep.)"""
from __future__ import annotations

import gc
import resource

import pytest
import torch

from workers.trainable import memory_limit


def test_an_allocation_past_the_limit_fails_naming_it_and_the_limit_is_lifted_after():
    before = resource.getrlimit(resource.RLIMIT_DATA)
    with pytest.raises(MemoryError, match="went past its memory limit, 0.10 GB more"):
        with memory_limit(100_000_000):
            # 4 GiB: more than any freed heap the process may hold from earlier tests (a 360-member
            # pack's step frees hundreds of MB of 24 MB tensors, which malloc keeps and can hand out
            # without growing VmData, the quantity the limit counts)
            torch.empty(2 ** 30, dtype=torch.float32)
    assert resource.getrlimit(resource.RLIMIT_DATA) == before
    torch.empty(50_000_000, dtype=torch.float32)  # fine again


def test_a_silent_c_failure_counts_only_near_the_limit():
    # a C extension whose malloc failed may raise SystemError without a MemoryError: near the limit
    # it is the limit's doing; far below it, it is some other bug and is raised as it is
    gc.collect()  # (garbage collected inside the block would take the process away from its limit)
    with pytest.raises(MemoryError, match="went past its memory limit.*SystemError"):
        with memory_limit(32 * 2 ** 20):  # the process is within 64 MiB of this limit from the start
            raise SystemError("error return without exception set")
    with pytest.raises(SystemError):
        with memory_limit(1_000_000_000):
            raise SystemError("error return without exception set")


def test_other_errors_pass_through():
    with pytest.raises(ValueError, match="not memory"):
        with memory_limit(100_000_000):
            raise ValueError("not memory")
