"""Where a sweep's numbers came from: the code version, the locked environment and the hardware,
recorded with its parent run."""
from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import torch

REPOSITORY = Path(__file__).resolve().parents[1]


def code_version() -> str:
    """The git commit of the checkout (``+dirty`` with uncommitted changes), else the package version."""
    try:
        commit = subprocess.run(["git", "-C", str(REPOSITORY), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPOSITORY), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return f"git {commit}{'+dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        try:
            return f"actsweep {metadata.version('actsweep')}"
        except metadata.PackageNotFoundError:
            return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware() -> str:
    """One line: CPU model and cores, memory, GPUs, and the torch build, of the machine running the driver."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = float("nan")
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return (f"{_cpu_model()}, {os.cpu_count()} cores, {memory:.0f} GiB; "
            f"GPU: {', '.join(gpus) if gpus else 'none'}; torch {torch.__version__}, {platform.python_implementation()} "
            f"{platform.python_version()}")
