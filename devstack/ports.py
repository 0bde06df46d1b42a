"""Free TCP ports on 127.0.0.1 for the servers the stack (and the tests) start, chosen below the
kernel's ephemeral range.

A port found by binding port 0 is an ephemeral port. Between the moment it is let go and the
moment the server binds it (seconds for an Airflow component, a minute for a whole stack), the
kernel may hand that same port to any outgoing connection of any process, and the server then
fails to start. Ports below the ephemeral range are never handed out that way; a port is still
checked free by binding it, and ``avoid`` keeps the ports of one start apart from each other.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable
from pathlib import Path

LOWEST = 10_000  # above the well-known and most registered services' ports
SEAWEEDFS_GRPC_OFFSET = 10_000  # SeaweedFS puts each service's gRPC at its port + 10000
_DEFAULT_RANGE = (32_768, 60_999)  # Linux's default net.ipv4.ip_local_port_range


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _DEFAULT_RANGE


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(avoid: Iterable[int] = (), *, offsets: Iterable[int] = (0,)) -> int:
    """A port ``p`` such that ``p + offset`` is free on 127.0.0.1 and below the ephemeral range
    for every one of ``offsets``, and none of them is in ``avoid``."""
    avoid, offsets = set(avoid), sorted(set(offsets) | {0})
    top = ephemeral_range()[0] - offsets[-1]
    if top <= LOWEST:
        raise RuntimeError(f"no room for ports {offsets} below the ephemeral range {ephemeral_range()}")
    for _ in range(1000):
        port = random.randrange(LOWEST, top)
        wanted = [port + offset for offset in offsets]
        if not avoid.intersection(wanted) and all(_bindable(p) for p in wanted):
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {top} on 127.0.0.1")


def free_ports(
    names: Iterable[str], avoid: Iterable[int] = (), *, offsets: Iterable[int] = (0,)
) -> dict[str, int]:
    """A distinct free port per name (with ``offsets`` as in :func:`free_port`, all distinct)."""
    taken, out = set(avoid), {}
    offsets = sorted(set(offsets) | {0})
    for name in names:
        out[name] = free_port(taken, offsets=offsets)
        taken.update(out[name] + offset for offset in offsets)
    return out
