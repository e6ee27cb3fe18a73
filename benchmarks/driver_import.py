"""What a sweep's driver costs to import, at an older commit and at this checkout, alternating:
``import service.driver.__main__`` in a new process, its wall and CPU time and its peak memory, and
whether torch and matplotlib came with it.

    python benchmarks/driver_import.py --before 142ce75 --rounds 3 --out docs/benchmarks/driver_import.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
PROBE = ("import resource, sys, time; t = time.perf_counter(); import service.driver.__main__; "
         "wall = time.perf_counter() - t; u = resource.getrusage(resource.RUSAGE_SELF); "
         "print(wall, u.ru_utime + u.ru_stime, u.ru_maxrss, 'torch' in sys.modules, 'matplotlib' in sys.modules)")


def measure(code: Path) -> dict:
    """One new process importing the driver from ``code``."""
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, "PYTHONPATH": str(code)}, cwd="/",
                         capture_output=True, text=True, check=True).stdout.split()
    return {"wall_s": float(out[0]), "cpu_s": float(out[1]), "peak_mib": int(out[2]) / 1024,
            "torch": out[3] == "True", "matplotlib": out[4] == "True"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the older commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="driver-import-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(work / "before"), args.before],
                   check=True)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        for _ in range(args.rounds):
            for side, code in (("before", work / "before"), ("after", REPO)):
                runs[side].append(measure(code))
                print(side, runs[side][-1], flush=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(work / "before")], check=False)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    result = {"command": f"`python benchmarks/driver_import.py --before {args.before} --rounds {args.rounds}`",
              "hardware": f"{psutil.cpu_count()} cores of {cpu}", "date": dt.date.today().isoformat(),
              "commit": commit, "before": args.before,
              "sides": {side: {**{k: statistics.median(r[k] for r in found) for k in ("wall_s", "cpu_s", "peak_mib")},
                               "torch": any(r["torch"] for r in found), "matplotlib": any(r["matplotlib"] for r in found),
                               "runs": found} for side, found in runs.items()}}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
