"""workers.allocator: a step's freed tensors are reused, not faulted in again from the kernel."""
import json
import os
import subprocess
import sys

import pytest

from workers import allocator

glibc_only = pytest.mark.skipif(not allocator.on_glibc(), reason="mallopt is glibc's")

# A step's life in miniature: tensors of 64, 32 and 21 MB made, written and freed, twelve times;
# the page faults of the last six (while the heap grows to hold a step, the first ones fault either way).
PROBE = """
import json, resource, sys, torch
from workers.allocator import keep_freed_memory
raised = keep_freed_memory() if sys.argv[1] == "keep" else False
def step():
    a = torch.empty(16 * 2**20).fill_(1.0)
    b = torch.empty(8 * 2**20).fill_(2.0)
    del a
    c = torch.empty(16 * 2**20 // 3).fill_(3.0)
for _ in range(6):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(6):
    step()
print(json.dumps({"raised": raised, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _faults(mode: str, **env) -> dict:
    environment = {k: v for k, v in os.environ.items() if k not in allocator.ENVIRONMENT} | env
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120,
                          env=environment, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@glibc_only
def test_freed_tensors_are_reused_rather_than_faulted_in_again():
    default, kept = _faults("default"), _faults("keep")
    assert kept["raised"] and not default["raised"]
    # 64 MB is 16,384 pages: glibc's default maps and unmaps it afresh each step (its dynamic
    # threshold stops at 32 MiB); raised thresholds keep the heap that holds a step
    assert default["faults"] > 6 * 16_384 * 0.9, default
    assert kept["faults"] < 1_000, kept


@glibc_only
def test_glibcs_own_variables_win():
    assert _faults("keep", MALLOC_TRIM_THRESHOLD_="131072")["raised"] is False
