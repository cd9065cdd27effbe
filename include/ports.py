"""Local TCP ports for the processes the project starts on this machine (broker, Spark daemons, Airflow).

Below every layer of ``include/``: the transient Spark cluster and the local
tooling both pick ports here, so neither reaches into the other for it.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether a listener could bind ``port`` on 127.0.0.1 now (a port in TIME_WAIT counts as free)."""
    with socket.socket() as s:
        # As a server's own listener does (SO_REUSEADDR): a port a stopped process left in TIME_WAIT is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
