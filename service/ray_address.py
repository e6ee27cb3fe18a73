"""A Ray address, checked before anything heavy is imported: a cluster where nothing listens
is named in seconds, and a head that answers slowly is waited for (ACTSWEEP_RAY_JOIN_TIMEOUT_S)."""
from __future__ import annotations

import socket
import time


class RayUnreachable(RuntimeError):
    """Nothing answers at the Ray address a command was told to join."""


REFUSED_GRACE_S = 2.0  # a host that refuses the port has nothing listening there: retried this long, not the join timeout


def wait_for_ray(address: str, wait_s: float) -> None:
    """Return once something accepts a connection at the Ray address (``host:port`` or
    ``ray://host:port``; ``auto`` is Ray's to find); else RayUnreachable naming the address. A host
    that does not answer is tried for ``wait_s`` seconds (a head still booting, a slow network); one
    that refuses the connection, where nothing listens, for REFUSED_GRACE_S only."""
    if address in ("auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise RayUnreachable(f"ACTSWEEP_RAY_ADDRESS: {address!r} is not host:port (or ray://host:port)")
    started = time.monotonic()
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(2.0, max(wait_s, 0.1))):
                return
        except OSError as exc:
            waited = time.monotonic() - started
            refused = isinstance(exc, ConnectionRefusedError)
            if waited >= (min(wait_s, REFUSED_GRACE_S) if refused else wait_s):
                why = ("connection refused: nothing listens there" if refused
                       else f"{exc.strerror or exc}; waited {wait_s:g} s, ACTSWEEP_RAY_JOIN_TIMEOUT_S")
                raise RayUnreachable(f"no Ray cluster answers at {address} ({why}): start it, or unset "
                                     f"ACTSWEEP_RAY_ADDRESS for a local Ray") from None
            time.sleep(0.5)
