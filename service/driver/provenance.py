"""Where a sweep's numbers came from: the code version, the locked environment and the hardware,
recorded with its parent run."""
from __future__ import annotations

import importlib.util
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

from service.driver.observations import visible_gpus

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
    """One line: CPU model and cores, memory, GPUs, and the torch build, of the machine running the
    driver (read without importing torch: its installed version, and the GPUs nvidia-smi or NVML
    names, those CUDA_VISIBLE_DEVICES leaves it)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = float("nan")
    gpus = [name for name, _ in visible_gpus()]
    return (f"{_cpu_model()}, {os.cpu_count()} cores, {memory:.0f} GiB; "
            f"GPU: {', '.join(gpus) if gpus else 'none'}; torch {torch_version()}, {platform.python_implementation()} "
            f"{platform.python_version()}")


def torch_version() -> str:
    """torch's version as ``torch.__version__`` gives it (its build: ``2.6.0+cu124``), read from its
    version.py without importing torch; else the installed distribution's version."""
    try:
        found = importlib.util.find_spec("torch")  # (a top-level package: found, not imported)
        text = Path(found.submodule_search_locations[0], "version.py").read_text()
        version = re.search(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)", text, re.MULTILINE)
        if version:
            return version.group(1)
    except (AttributeError, ImportError, IndexError, OSError, TypeError, ValueError):
        pass
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"
