"""Free TCP ports on loopback, for servers started beside others on one machine."""
from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
