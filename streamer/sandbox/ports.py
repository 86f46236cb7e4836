"""TCP ports of the servers the sandbox and the tests start: a free one to listen on, and
whether something answers on one yet."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a connection to `host:port` is accepted within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
