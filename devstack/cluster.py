"""``make cluster``: the platform on several hosts of this machine (issue 29), each a network and
mount namespace of its own (``devstack/hosts.py``), only S3 shared between them, as in
production.

Hosts, named as ``docker-compose.yml`` names its services where it has them:

- ``seaweedfs``: the SeaweedFS master, the filer and its S3 gateway (port 8333);
- ``volume-1``, ``volume-2``: a SeaweedFS volume server each, its data under the host's ``/srv``;
- ``spark-master``: the Spark standalone master (7077, web UI 8081);
- ``spark-worker-1``, ``spark-worker-2``: a Spark worker each (1 core, ``--worker-memory``);
- ``client``: where drivers and clients run (``Cluster.client``).

Every service binds its host's address, never ``0.0.0.0`` or loopback (Spark's through
``SPARK_LOCAL_IP``), and reaches the others by name through the hosts file every host mounts.
Each host has its own ``/tmp`` (a tmpfs) and ``/srv`` (``<root>/hosts/<name>``), so a file one
host writes locally is not there on another. The PIDs of the namespaces' holders and of every
service go to ``<root>/cluster.json``; ``down`` stops exactly those. A watchdog (a process of its
own session) runs ``down`` after ``--max-minutes`` even if the process that started the cluster
was killed, and the holders' shells end by themselves then too.

    python -m deltaplane.devstack.cluster up [--root demo/cluster] [--max-minutes 120]
    python -m deltaplane.devstack.cluster down [--root demo/cluster]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from deltaplane.devstack import seaweedfs, spark_standalone
from deltaplane.devstack.hosts import Host, HostsError, Network, available, stop_holders
from deltaplane.devstack.processes import stop, stop_groups

HOSTS = ["seaweedfs", "volume-1", "volume-2", "spark-master", "spark-worker-1", "spark-worker-2", "client"]
S3_PORT, MASTER_PORT, FILER_PORT, VOLUME_PORT = 8333, 9333, 8888, 8080
SPARK_PORT, SPARK_UI, WORKER_UI = 7077, 8081, 8082
BUCKET = "lake"
KEY, SECRET, REGION = "cluster", "cluster-secret", "us-east-1"
S3_ENDPOINT = f"http://seaweedfs:{S3_PORT}"
SPARK_MASTER = f"spark://spark-master:{SPARK_PORT}"


class ClusterError(RuntimeError):
    """The cluster could not be started, or a service did not come up."""


def _spark_class() -> str:
    from deltaplane.spark_jobs.submit import spark_home

    return str(spark_home() / "bin" / "spark-class")


def environment(host: Host) -> dict[str, str]:
    """What every program on ``host`` runs with: the lake's S3 credentials and endpoint, the
    host's own address for Spark to bind, this virtualenv's Python for PySpark's workers."""
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": S3_ENDPOINT,
        "SPARK_LOCAL_IP": host.address,
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_LOG_DIR": "/srv/spark-logs",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "TMPDIR": "/tmp",
    }


def services(addresses: dict[str, str], worker_memory: str) -> list[tuple[str, str, list[str]]]:
    """(service, host, command) in the order they start; ``addresses``: each host's."""
    spark, master = _spark_class(), f"seaweedfs:{MASTER_PORT}"
    out = [
        (
            "seaweedfs-master",
            "seaweedfs",
            seaweedfs.master_command("seaweedfs", addresses["seaweedfs"], MASTER_PORT, "/srv/master"),
        )
    ]
    for volume in ("volume-1", "volume-2"):
        out.append(
            (
                volume,
                volume,
                seaweedfs.volume_command(volume, addresses[volume], VOLUME_PORT, "/srv/volume", master),
            )
        )
    out.append(
        (
            "seaweedfs-filer",
            "seaweedfs",
            seaweedfs.filer_command(
                "seaweedfs", addresses["seaweedfs"], FILER_PORT, "/srv/filer", master, S3_PORT
            ),
        )
    )
    out.append(
        (
            "spark-master",
            "spark-master",
            spark_standalone.master_command(spark, SPARK_PORT, SPARK_UI, host="spark-master"),
        )
    )
    for worker in ("spark-worker-1", "spark-worker-2"):
        command = spark_standalone.worker_command(
            spark,
            SPARK_PORT,
            WORKER_UI,
            "/srv/work",
            cores=1,
            memory=worker_memory,
            host=worker,
            master_host="spark-master",
        )
        out.append((worker, worker, command))
    return out


_CHECK_HTTP = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=3).read()"
_CHECK_S3 = """
import boto3, botocore
config = botocore.config.Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1})
s3 = boto3.client("s3", config=config)
if "lake" not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
    s3.create_bucket(Bucket="lake")
s3.put_object(Bucket="lake", Key="_cluster/ready", Body=b"ready")
assert s3.get_object(Bucket="lake", Key="_cluster/ready")["Body"].read() == b"ready"
"""
_CHECK_SPARK = """
import json, sys, urllib.request
status = json.load(urllib.request.urlopen("http://spark-master:8081/json/", timeout=3))
assert status["aliveworkers"] >= int(sys.argv[1]), status["aliveworkers"]
"""
_CHECK_VOLUMES = """
import json, urllib.request
status = json.load(urllib.request.urlopen("http://seaweedfs:9333/dir/status", timeout=3))
nodes = [n for dc in status["Topology"]["DataCenters"] for r in dc["Racks"] for n in r["DataNodes"]]
assert len(nodes) >= 2, nodes
"""


class Cluster:
    """The hosts and their services; a context manager that stops what it started."""

    def __init__(self, root: Path, *, max_minutes: float = 120, worker_memory: str = "1g"):
        reason = available()
        if reason is not None:
            raise ClusterError(f"no hosts on this machine: {reason}")
        self.root = root.resolve()
        self.logs = self.root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.max_minutes = max_minutes
        self.worker_memory = worker_memory
        self.network = Network(self.root, lifetime=max_minutes * 60)
        self.addresses = self.network.plan(HOSTS)
        self.processes: dict[str, tuple[str, subprocess.Popen]] = {}
        self.watchdog: subprocess.Popen | None = None

    @property
    def client(self) -> Host:
        return self.network.hosts["client"]

    def host(self, name: str) -> Host:
        return self.network.hosts[name]

    def start(self) -> Cluster:
        # Stops everything after ``max_minutes`` even if this process is killed: the hosts' shells
        # end then, but the services would keep their namespaces alive.
        self.watchdog = subprocess.Popen(
            [sys.executable, "-m", "deltaplane.devstack.cluster", "watchdog", "--root", str(self.root),
             "--after", str(self.max_minutes * 60)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            for name in HOSTS:
                host = self.network.add(name)
                for directory in ("master", "volume", "filer", "work", "spark-logs"):
                    (host.directory / directory).mkdir(exist_ok=True)
            self._record()
            plan = services(self.addresses, self.worker_memory)
            for service, host, command in plan:
                self.start_service(service, host, command)
                if service == "seaweedfs-master":
                    self._wait(
                        "the SeaweedFS master",
                        [_CHECK_HTTP, f"http://seaweedfs:{MASTER_PORT}/cluster/status"],
                    )
                if service == "volume-2":
                    self._wait("two SeaweedFS volume servers", [_CHECK_VOLUMES])
            self._wait("the S3 gateway", [_CHECK_S3], timeout=120)
            self._wait("two Spark workers", [_CHECK_SPARK, "2"], timeout=120)
        except BaseException:
            self.stop()
            raise
        return self

    def start_service(self, service: str, host: str, command: list[str]) -> None:
        on = self.host(host)
        process = on.popen(command, self.logs / f"{service}.log", env=environment(on))
        self.processes[service] = (host, process)
        self._record()

    def _record(self) -> None:
        record = {
            "root": str(self.root),
            "hosts": {
                n: {"address": h.address, "holder": h.holder.pid, "pid": h.pid}
                for n, h in self.network.hosts.items()
            },
            "switch": {"holder": self.network.switch[0].pid, "pid": self.network.switch[1]},
            "services": {name: {"host": host, "pid": p.pid} for name, (host, p) in self.processes.items()},
            "watchdog": self.watchdog.pid if self.watchdog is not None else None,
        }
        (self.root / "cluster.json").write_text(json.dumps(record, indent=1))

    def python(self, host: str, code: str, *args: str, timeout: float = 120, check: bool = True):
        """``code`` run by this virtualenv's Python on ``host``."""
        on = self.host(host)
        return on.run([sys.executable, "-c", code, *args], env=environment(on), timeout=timeout, check=check)

    def _wait(self, what: str, check: list[str], timeout: float = 90) -> None:
        deadline = time.time() + timeout
        while True:
            done = self.python("client", check[0], *check[1:], timeout=30, check=False)
            if done.returncode == 0:
                return
            exited = [name for name, (_, p) in self.processes.items() if p.poll() is not None]
            if exited or time.time() > deadline:
                logs = "\n".join(
                    f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.logs.glob("*.log"))
                )
                raise ClusterError(
                    f"{what} did not come up (exited: {exited or 'none'}); last check: "
                    f"{done.stderr.strip()[-800:]}\n{logs}"
                )
            time.sleep(1)

    def stop(self, grace: float = 5) -> list[str]:
        """Every service, then the hosts, by PID; SIGKILL after ``grace`` seconds (a volume
        server takes 20 s to stop on SIGTERM: ``down`` waits for it, a test's cluster, whose
        data goes with it, need not)."""
        services = [(name, p.pid) for name, (_, p) in reversed(list(self.processes.items()))]
        stopped = stop_groups(services, grace=grace)
        for _, process in self.processes.values():
            with contextlib.suppress(Exception):
                process.wait(timeout=1)
        self.processes.clear()
        self.network.close()
        if self.watchdog is not None:
            stop(self.watchdog, timeout=5)
            self.watchdog = None
        (self.root / "cluster.json").unlink(missing_ok=True)
        return stopped

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def down(root: Path) -> list[str]:
    """Stop what ``up`` recorded under ``root``: the services, then the hosts' and the switch's
    holders (the shells inside first), all by PID."""
    path = root.resolve() / "cluster.json"
    if not path.exists():
        return []
    record = json.loads(path.read_text())
    watchdog = record.get("watchdog")
    if watchdog and watchdog != os.getpid():
        stop_groups([("watchdog", watchdog)], grace=5)
    stopped = stop_groups([(name, s["pid"]) for name, s in reversed(list(record["services"].items()))])
    stop_holders([(h["holder"], h["pid"]) for h in [*record["hosts"].values(), record["switch"]]])
    path.unlink(missing_ok=True)
    return stopped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "watchdog"))
    parser.add_argument("--after", type=float, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, default=Path("demo/cluster"))
    parser.add_argument("--max-minutes", type=float, default=120)
    parser.add_argument("--worker-memory", default="1g")
    args = parser.parse_args(argv)
    if args.command == "watchdog":
        time.sleep(args.after)
        down(args.root)
        return 0
    if args.command == "down":
        stopped = down(args.root)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    if (args.root / "cluster.json").exists():
        print(f"a cluster is recorded under {args.root}: `down` it first", file=sys.stderr)
        return 1
    try:
        cluster = Cluster(args.root, max_minutes=args.max_minutes, worker_memory=args.worker_memory).start()
    except (ClusterError, HostsError) as e:
        print(f"cluster: {e}", file=sys.stderr)
        return 1
    for name, host in cluster.network.hosts.items():
        print(f"  {name:<15} {host.address}")
    print(
        f"cluster up under {cluster.root}: S3 {S3_ENDPOINT}, Spark {SPARK_MASTER} "
        f"(stops itself after {args.max_minutes:g} minutes; `make cluster-down` stops it now)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
