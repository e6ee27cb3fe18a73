"""The locked environment: which requirements.lock a Python environment was built from.

.ci/venv.sh and the Dockerfile install exactly requirements.lock and copy it into the environment
(``sys.prefix``), so a sweep records the digest of what it ran on, and a record rebuilt under
another lock says so (service.reporting.record)."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

LOCK_FILE = "requirements.lock"
NO_LOCK = "not recorded"  # what a record says of a sweep that recorded no lock (made before the lock)


def lock_digest(path: Path) -> str:
    """``sha256:<first 16 hex digits>`` of the lock file at ``path``; ``""`` where there is none."""
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return ""


def environment_lock() -> str:
    """The digest of the lock this Python environment was built from; ``""`` for an environment
    built otherwise (pip install by hand)."""
    return lock_digest(Path(sys.prefix) / LOCK_FILE)
