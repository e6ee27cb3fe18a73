"""How much slower this machine is than the one the suite's time bounds were set on, so that the
bounds scale with it.

A test's bound (pyproject.toml's 120 s, or its own @pytest.mark.timeout) is there to stop a hung
test, at about twice its time in a full suite on the reference machine below. On a slower machine
the same tests take longer, and not evenly: CI on another machine ran the suite in 1,825 s against
793-841 s here, with training-bound tests 2.6-3× slower and process-bound ones no slower; and on
some hours this machine starts processes 3× slower than on others while its loops and kernels keep
their pace (the suite 3× slower, tests failing at their bounds). So the session measures the three
kinds of work once, before any test starts, and multiplies every bound by the largest ratio, times
the share of the reference's cores it lacks (never below 1, never above MAX_SCALE).
``ACTSWEEP_TEST_BOUND_SCALE`` sets the factor instead (1 keeps the bounds as written).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

SCALE_VARIABLE = "ACTSWEEP_TEST_BOUND_SCALE"

# Each the best of three on a 2-core Intel Xeon with AMX and AVX-512 (the machine of docs/testing.md's
# figures), `python -m tests.machine_speed` with nothing else running: python 0.073-0.089 s and torch
# 0.036-0.066 s over one day; the slower figures are kept, so that this machine scales by 1. The start
# (the better of two) is derived, as no hour of that day was a normal one: 6.1 s in an hour when collecting the
# suite took 20.8 s, against 7.07 s at 0e4b142 (docs/testing.md): 6.1 × 7.07 / 20.8 = 2.1 s.
REFERENCE_S = {
    "python": 0.085,  # a pure-Python loop of 2 million multiply-adds (the interpreter: process starts, Ray, MLflow)
    "torch": 0.062,  # 20 training steps of a 784-256-256-10 GELU MLP at batch 128, on one thread (the trials)
    "start": 2.1,  # a new Python process importing torch (what each CLI run, server and Ray worker pays)
}
REFERENCE_CORES = 2  # make test's three test processes, and the Rays they start, share them
MAX_SCALE = 5.0  # a hung test still ends within CI's 90 minutes


def _best_of(runs: int, work) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def python_seconds() -> float:
    """The interpreter's speed: a pure-Python loop (best of three)."""
    def loop():
        total = 0
        for i in range(2_000_000):
            total += i * i
    return _best_of(3, loop)


def torch_seconds() -> float:
    """The kernels' speed: 20 training steps of a small MLP on one thread (best of three)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        generator = torch.Generator().manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                                    torch.nn.GELU(), torch.nn.Linear(256, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(128, 784, generator=generator), torch.randint(0, 10, (128,), generator=generator)

        def steps(n: int = 20):
            for _ in range(n):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
        steps(5)  # (warm-up: the first steps allocate)
        return _best_of(3, steps)
    finally:
        torch.set_num_threads(threads)


def start_seconds() -> float:
    """A process's start: a new Python process importing torch (once, and the better of two where the
    first is slow). It reads and maps hundreds of MiB, which a loop or a kernel in a warm process never does."""
    def start():
        subprocess.run([sys.executable, "-c", "import torch"], check=True, timeout=300)
    first = _best_of(1, start)
    return first if first < 1.5 * REFERENCE_S["start"] else min(first, _best_of(1, start))


def measure() -> dict[str, float]:
    """This machine's seconds for each kind of work in REFERENCE_S, and the cores this process may use."""
    return {"python": python_seconds(), "torch": torch_seconds(), "start": start_seconds(),
            "cores": len(os.sched_getaffinity(0))}


def bound_scale(measured: dict[str, float], reference: dict[str, float] = REFERENCE_S) -> float:
    """The factor for every time bound: the largest slowdown against the reference, stretched where
    there are fewer cores than the reference's, within [1, MAX_SCALE]."""
    slowest = max(measured[kind] / reference[kind] for kind in reference)
    fewer_cores = max(1.0, REFERENCE_CORES / measured.get("cores", REFERENCE_CORES))
    return round(min(MAX_SCALE, max(1.0, slowest * fewer_cores)), 2)


def session_bound_scale() -> tuple[float, str]:
    """The factor for this session, and a line that says where it came from."""
    given = os.environ.get(SCALE_VARIABLE)
    if given:
        try:
            scale = float(given)
        except ValueError:
            raise ValueError(f"{SCALE_VARIABLE} must be a number (a factor for every test's time bound), not {given!r}")
        if not scale > 0:
            raise ValueError(f"{SCALE_VARIABLE} must be above 0, not {given!r}")
        return scale, f"time bounds ×{scale:g} ({SCALE_VARIABLE})"
    measured = measure()
    scale = bound_scale(measured)
    ratios = ", ".join(f"{kind} {measured[kind]:.3f} s ({measured[kind] / REFERENCE_S[kind]:.2f}× the reference)"
                       for kind in REFERENCE_S)
    return scale, f"time bounds ×{scale:g}: this machine's {ratios}, on {measured['cores']} core{'s' if measured['cores'] != 1 else ''}"


def scaled(seconds: float) -> float:
    """A test's own deadline (a wait for a state, a server) stretched like its bound."""
    return seconds * float(os.environ.get(SCALE_VARIABLE) or 1)


if __name__ == "__main__":
    print(measure())
