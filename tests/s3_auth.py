"""A SeaweedFS that checks credentials (the shared ``s3_server`` fixture accepts any key and
secret): ``weed mini -s3.config`` with one identity, on loopback, stopped by its PID."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import run_seaweedfs


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

    def connection(self) -> dict:
        """An Airflow connection of type ``deltaplane`` to this server, its secret the password."""
        return {
            "conn_type": "deltaplane",
            "host": self.endpoint,
            "login": self.access_key,
            "password": self.secret,
            "extra": {"region": "us-east-1"},
        }

    def uri(self, name: str | None = None) -> str:
        return f"s3://{self.bucket}/{name or uuid.uuid4().hex}"

    def objects(self, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        client = self.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                yield item["Key"], client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read()


@contextlib.contextmanager
def authenticated_seaweedfs(directory: Path, secret: str, access_key: str = "deltaplane-key"):
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "s3.json"
    identity = {"name": "tests", "credentials": [{"accessKey": access_key, "secretKey": secret}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    config.write_text(json.dumps({"identities": [identity]}))
    config.chmod(0o600)
    (directory / "data").mkdir(exist_ok=True)

    def server_at(port: int) -> AuthS3:
        return AuthS3(f"http://127.0.0.1:{port}", "deltaplane-auth", access_key, secret)

    with run_seaweedfs(
        directory / "data", lambda port: server_at(port).client(), f"-s3.config={config}"
    ) as port:
        server = server_at(port)
        server.client().create_bucket(Bucket=server.bucket)
        yield server
