"""Hosts on one machine: each a network, mount and UTS namespace of its own, joined by a bridge,
for testing what crosses a network (issue 29).

A host is held by one process, ``unshare --net --mount --uts --fork --kill-child`` running a
shell that names the host (its own hostname, which Java resolves at start), mounts a fresh tmpfs
on ``/tmp`` (the host's own: nothing written there is seen by another host or by this machine),
binds the host's own directory on ``/srv`` and the cluster's hosts file on ``/etc/hosts`` (so
that ``spark-master`` or ``seaweedfs`` name the host, as in ``docker-compose.yml``), brings up
``lo`` and then sleeps for the cluster's lifetime. Programs are started on a host with
``nsenter`` into that process's namespaces; ``nsenter`` execs them, so the PID this code holds is
the program's own, and it is stopped by that PID.

The hosts' links meet on a bridge in a namespace of its own (the *switch*, also held by a
process), so this machine's own namespace gets no interface, no address and no route: the only
way between hosts is the bridge, and a host's link can be cut (``ip link set ... down`` on the
switch's side) and restored. Every namespace disappears when its last process exits.

Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's ``ip``; ``available()`` says why
not, for callers to fail with.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from deltaplane.devstack.processes import stop, stop_groups

SUBNET = "10.231.7"  # a /24 that exists only on the switch: no route leads to it from this machine
PREFIX = 24


class HostsError(RuntimeError):
    """A namespace, link or address could not be made."""


def available() -> str | None:
    """Why hosts cannot be made here (no ``ip``/``unshare``/``nsenter``, not root, or the kernel
    refusing namespaces), or None when they can."""
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian's iproute2 and util-linux)"
    if os.geteuid() != 0:
        return "network and mount namespaces need root here"
    probe = subprocess.run(
        ["unshare", "--net", "--mount", "--", "ip", "link", "set", "lo", "up"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"the kernel refused namespaces: {probe.stderr.strip()[-500:]}"
    return None


def _run(argv: list[str], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise HostsError(f"{what}: {' '.join(argv)}: {done.stderr.strip()[-1000:]}")
    return done.stdout


def _holder(script: str, lifetime: float, log: Path) -> tuple[subprocess.Popen, int]:
    """A process in new network and mount namespaces that runs ``script`` and then sleeps for
    ``lifetime`` seconds; the holder (``unshare``) and the PID inside the namespaces."""
    command = [
        "unshare",
        "--net",
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "--fork",
        "--kill-child",
        "--",
        "sh",
        "-c",
        f'set -e\n{script}\necho "ready $$"\nexec sleep {int(lifetime)}',
    ]
    with open(log, "ab") as err:
        holder = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
        )
    line = holder.stdout.readline().decode().split()
    holder.stdout.close()
    if len(line) != 2 or line[0] != "ready":
        stop(holder)
        raise HostsError(f"a namespace did not come up: {log.read_text()[-1000:]}")
    return holder, int(line[1])


@dataclass
class Host:
    """One host: its name, address on the switch, and the process holding its namespaces."""

    name: str
    address: str
    holder: subprocess.Popen
    pid: int  # inside the namespaces: what nsenter enters
    link: str  # its link's name on the switch's side
    directory: Path  # mounted on /srv inside the host

    def argv(self, command: list[str]) -> list[str]:
        """``command`` run on this host (in its network and mount namespaces)."""
        return ["nsenter", f"--target={self.pid}", "--net", "--mount", "--uts", "--", *command]

    def popen(self, command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``command`` on this host, its output to ``log``, in a session of its own."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                self.argv(command),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def run(
        self,
        command: list[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run ``command`` on this host to completion; its output captured as text."""
        done = subprocess.run(
            self.argv(command),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise HostsError(f"{self.name}: {' '.join(command)}: {done.stderr.strip()[-2000:]}")
        return done


@dataclass
class Network:
    """Hosts on one switch. ``add`` makes a host; ``cut``/``restore`` its link; ``close`` stops
    every holder (the programs started on hosts are their starters' to stop)."""

    root: Path
    lifetime: float
    hosts: dict[str, Host] = field(default_factory=dict)
    switch: tuple[subprocess.Popen, int] | None = None
    tag: str = field(default_factory=lambda: secrets.token_hex(2))

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "hosts").mkdir(exist_ok=True)
        self.switch = _holder(
            "ip link set lo up\nip link add br0 type bridge\nip link set br0 up",
            self.lifetime,
            self.root / "switch.log",
        )

    @property
    def hosts_file(self) -> Path:
        return self.root / "etc-hosts"

    def plan(self, names: list[str]) -> dict[str, str]:
        """Addresses for ``names`` (in order), written to the hosts file every host mounts:
        call once, before the first ``add``."""
        self._addresses = {name: f"{SUBNET}.{10 + i}" for i, name in enumerate(names)}
        lines = ["127.0.0.1 localhost", *(f"{address} {name}" for name, address in self._addresses.items())]
        self.hosts_file.write_text("\n".join(lines) + "\n")
        return dict(self._addresses)

    def add(self, name: str) -> Host:
        """Host ``name`` (planned), linked to the switch and up."""
        address = self._addresses[name]
        directory = self.root / "hosts" / name
        directory.mkdir(parents=True, exist_ok=True)
        script = "\n".join(
            [
                "mount -t tmpfs -o mode=1777 tmpfs /tmp",
                f"mount --bind '{directory}' /srv",
                f"mount --bind '{self.hosts_file}' /etc/hosts",
                f"hostname '{name}'",
                "ip link set lo up",
            ]
        )
        holder, pid = _holder(script, self.lifetime, self.root / f"{name}.namespace.log")
        index = len(self.hosts)
        inside, outside = f"dp{self.tag}h{index}", f"dp{self.tag}s{index}"
        switch_pid = self.switch[1]
        try:
            _run(["ip", "link", "add", inside, "type", "veth", "peer", "name", outside], "a link")
            _run(["ip", "link", "set", inside, "netns", str(pid)], "a link into its host")
            _run(["ip", "link", "set", outside, "netns", str(switch_pid)], "a link into the switch")
        except HostsError:
            with contextlib.suppress(HostsError):
                _run(["ip", "link", "del", inside], "a link removed")
            stop(holder)
            raise
        host = Host(name, address, holder, pid, outside, directory)
        self.hosts[name] = host
        for command in (
            ["ip", "link", "set", inside, "name", "eth0"],
            ["ip", "addr", "add", f"{address}/{PREFIX}", "dev", "eth0"],
            ["ip", "link", "set", "eth0", "up"],
        ):
            host.run(command)
        self._switch(["ip", "link", "set", outside, "master", "br0", "up"])
        return host

    def _switch(self, command: list[str]) -> None:
        _run(["nsenter", f"--target={self.switch[1]}", "--net", "--", *command], "on the switch")

    def cut(self, name: str) -> None:
        """Host ``name`` loses its link: nothing reaches it, nothing leaves it."""
        self._switch(["ip", "link", "set", self.hosts[name].link, "down"])

    def restore(self, name: str) -> None:
        self._switch(["ip", "link", "set", self.hosts[name].link, "up"])

    def close(self) -> None:
        """Stop every host's holder and the switch's (``stop_holders``)."""
        holders = [h.holder for h in self.hosts.values()] + ([self.switch[0]] if self.switch else [])
        inner = [h.pid for h in self.hosts.values()] + ([self.switch[1]] if self.switch else [])
        stop_holders([(h.pid, pid) for h, pid in zip(holders, inner, strict=True) if h.poll() is None])
        for holder in holders:
            with contextlib.suppress(subprocess.TimeoutExpired):
                holder.wait(timeout=5)


def stop_holders(holders: list[tuple[int, int]], grace: float = 5) -> None:
    """Stop namespace holders given as (holder PID, PID inside): the sleeping shell inside
    first (``unshare --fork`` ignores SIGTERM while it waits for it), then each holder."""
    for _, inner in holders:
        with contextlib.suppress(ProcessLookupError):
            os.kill(inner, signal.SIGTERM)
    stop_groups([("holder", holder) for holder, _ in holders], grace=grace)
