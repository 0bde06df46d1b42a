"""A TCP proxy on 127.0.0.1 that gives a local server the round trip of a remote one.

Real object stores answer in 10-50 ms; SeaweedFS on loopback answers in 0.1 ms, which hides
every request a reader makes one after another. The kernel here has no ``netem`` qdisc
(``CONFIG_NET_SCH_NETEM`` is not set), so the delay is added in user space: every chunk of bytes
is passed on half a round trip after it arrived, in each direction, in order, and the first
request on a connection waits one round trip more, as a TCP handshake would make it. Bandwidth
is not limited. The proxy also counts connections and HTTP requests (by method, S3's listings
apart from GETs), so a benchmark or a test can say how many round trips a read took.

    python -m deltaplane.devstack.latency_proxy --upstream 127.0.0.1:8333 --rtt-ms 20

prints ``listening <port> stats <port>`` once it accepts; ``GET /`` on the stats port returns the
counters as JSON and ``POST /reset`` returns them and zeroes them. It runs until terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter

from deltaplane.devstack.processes import stop

_CHUNK = 1 << 16
_DRAIN_SECONDS = 120
# A request line at the start of a chunk or of a line (request bodies are not scanned apart:
# a body holding such a line would count, which data files and logs do not).
_REQUEST_LINE = re.compile(rb"(?:^|\n)([A-Z]+) ([^ \r\n]+) HTTP/1\.[01]\r\n")


class Counters:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.connections = 0
        self.methods: Counter[str] = Counter()
        self.sent = 0  # bytes client -> server
        self.received = 0  # bytes server -> client

    def as_dict(self) -> dict[str, int]:
        """``connections``, ``requests``, ``<method>_requests`` (``get_requests``...), bytes."""
        return {
            "connections": self.connections,
            "requests": sum(self.methods.values()),
            **{f"{method.lower()}_requests": n for method, n in sorted(self.methods.items())},
            "bytes_sent": self.sent,
            "bytes_received": self.received,
        }


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    delay: float,
    first_due: float,
    count,
) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it arrived (and none
    before ``first_due``), keeping the order."""
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    delivering = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(_CHUNK)
            due = max(time.monotonic() + delay, first_due)
            if not data:
                queue.put_nowait((due, None))
                break
            count(data)
            queue.put_nowait((due, data))
        await delivering
    except (ConnectionError, OSError):
        pass
    finally:
        if not delivering.done():
            delivering.cancel()


class LatencyProxy:
    def __init__(self, upstream: tuple[str, int], rtt_ms: float, log: bool = False) -> None:
        self.upstream = upstream
        self.log = log
        self.half = rtt_ms / 2000
        self.counters = Counters()

    def _count_request(self, data: bytes) -> None:
        self.counters.sent += len(data)
        for match in _REQUEST_LINE.finditer(data):
            method = match.group(1).decode()
            if method == "GET" and b"list-type=" in match.group(2):
                method = "LIST"  # S3's ListObjectsV2 (a GET on the bucket), counted apart
            self.counters.methods[method] += 1
            if self.log:
                print(match.group(0).strip().decode(errors="replace"), file=sys.stderr, flush=True)

    def _count_response(self, data: bytes) -> None:
        self.counters.received += len(data)

    async def handle(self, client_reader, client_writer) -> None:
        self.counters.connections += 1
        accepted = time.monotonic()
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            return
        pumps = [
            # A handshake costs one round trip before the client can send anything.
            asyncio.ensure_future(
                _pump(client_reader, server_writer, self.half, accepted + 3 * self.half, self._count_request)
            ),
            asyncio.ensure_future(_pump(server_reader, client_writer, self.half, 0.0, self._count_response)),
        ]
        try:
            # Once one direction ends (its peer closed, or a connection failed), the other has a
            # while to hand over what is in flight; then both sides are closed, never left open.
            _, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            if pending:
                await asyncio.wait(pending, timeout=_DRAIN_SECONDS)
        finally:
            for pump in pumps:
                pump.cancel()
            for writer in (server_writer, client_writer):
                writer.close()
                with contextlib.suppress(OSError, ConnectionError):
                    await writer.wait_closed()

    async def stats(self, reader, writer) -> None:
        """``GET /``: the counters as JSON; ``POST /reset``: the same, then zero them."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        method, _, rest = head.partition(b" ")
        path = rest.split(b" ", 1)[0]
        body = json.dumps(self.counters.as_dict()).encode()
        if method == b"POST" and path == b"/reset":
            self.counters.reset()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(OSError, ConnectionError):
            await writer.drain()
        writer.close()


class ProxyProcess:
    """The proxy in its own process, in front of ``127.0.0.1:upstream_port`` (its work must not
    share the interpreter of what it measures): ``port`` to connect to, ``counters()`` to read
    (and reset) what went through, ``close()`` to stop it by its PID."""

    def __init__(self, upstream_port: int, rtt_ms: float, *, log=None):
        """``log``: a file that receives each request line (for a look at what a reader asks)."""
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deltaplane.devstack.latency_proxy",
                "--upstream",
                f"127.0.0.1:{upstream_port}",
                "--rtt-ms",
                str(rtt_ms),
                *(["--log"] if log is not None else []),
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        words = self.process.stdout.readline().split()
        if len(words) != 4:
            self.close()
            raise RuntimeError("the latency proxy did not start")
        self.port, self._stats_port = int(words[1]), int(words[3])

    def counters(self, *, reset: bool = False) -> dict[str, int]:
        """What went through since the last reset (``reset``: and zero it after reading)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self._stats_port}/{'reset' if reset else ''}",
            method="POST" if reset else "GET",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def close(self) -> None:
        stop(self.process, timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def _main(args: argparse.Namespace) -> None:
    host, port = args.upstream.rsplit(":", 1)
    proxy = LatencyProxy((host, int(port)), args.rtt_ms, args.log)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.port)
    stats = await asyncio.start_server(proxy.stats, "127.0.0.1", 0)
    listening = server.sockets[0].getsockname()[1]
    print(f"listening {listening} stats {stats.sockets[0].getsockname()[1]}", flush=True)
    async with server, stats:
        await asyncio.gather(server.serve_forever(), stats.serve_forever())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of the server (on loopback)")
    parser.add_argument("--rtt-ms", type=float, required=True, help="round trip to add, in ms")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    parser.add_argument("--log", action="store_true", help="print each request line to stderr")
    args = parser.parse_args(argv)
    if not args.upstream.startswith(("127.", "localhost:")):
        parser.error("the upstream must be on loopback")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
