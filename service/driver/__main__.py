"""``python -m service.driver SWEEP_ID [--environment FILE]``: a sweep's driver, as its Ray job runs it.

In a warm home the job's process asks the home's driver server for a driver with its imports done
(service.driver.warm) and waits for it; where none answers, it drives the sweep itself
(service.driver.drive). ``--environment``: a JSON file of the variables the driver runs with, for
a job submitted without a runtime environment of its own (service.control.jobs).
"""
from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    """Run the driver of ``argv``'s sweep: forked by the home's driver server, or in this process."""
    if "--environment" in argv:
        at = argv.index("--environment")
        with open(argv[at + 1]) as variables:
            os.environ.update(json.load(variables))
        argv = argv[:at] + argv[at + 2:]
    from service.driver.warm import run_warm

    code = run_warm(argv)
    if code is not None:
        return code
    from service.driver.drive import drive

    return drive(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
else:  # (imported as a module: the driver itself, as `import service.driver.__main__` loads it)
    from service.driver.drive import drive  # noqa: F401
