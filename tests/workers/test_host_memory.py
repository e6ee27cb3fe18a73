"""workers.host_memory: with freed memory kept, a large tensor freed stays in the process's heap for
the next one (glibc's mallinfo2: free bytes held), where by default it goes back to the system and
the next one faults every page in again. In fresh processes: mallopt changes the whole process.
(Its effect on time, a 12-member pack's evaluation 25% faster, is in docs/speed-cpu.md.)"""
from __future__ import annotations

import subprocess
import sys
import textwrap

FREED = """
    import ctypes, sys
    import torch
    from workers.host_memory import keep_freed_memory

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                         "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Mallinfo2
    kept = keep_freed_memory() if sys.argv[1] == "keep" else None
    tensor = torch.ones(6 * 2 ** 20)  # 24 MiB: an evaluation batch's activations of a large pack
    del tensor
    print(kept, libc.mallinfo2().fordblks)
"""


def _free_bytes_held(mode: str) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(FREED), mode], capture_output=True, text=True,
                          timeout=120, check=True)
    kept, free = done.stdout.split()
    return kept, int(free)


def test_a_freed_large_tensor_stays_in_the_heap_for_the_next_one():
    kept, held = _free_bytes_held("keep")
    _, by_default = _free_bytes_held("default")
    assert kept == "True"  # (glibc: the C library of the machines this runs on)
    assert held >= 24 * 2 ** 20  # kept, to be reused
    assert by_default < 24 * 2 ** 20  # given back: the next one is mapped and faulted in anew
