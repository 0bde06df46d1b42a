"""Object store over S3 (and S3-compatible servers) through boto3.

Commits rely on ``PutObject`` with ``If-None-Match: *`` (put-if-absent). Its failure modes are
handled so that a commit is never lost, never doubled, and our data is never deleted while an
outcome is unknown:

* 412 Precondition Failed: the key exists. It may be our own write whose response was lost and
  retried (by botocore or by us), so the object is read back: the same bytes mean success,
  other bytes mean another writer won (``ObjectExistsError``).
* 409 Conflict: a concurrent conditional write to the same key is in flight; retry the same put.
* 5xx, timeouts, dropped connections: the write may or may not have happened; read the key to
  find out, and retry only if it is absent. If that cannot be settled,
  ``CommitOutcomeUnknownError``.

Some S3-compatible stores ignore ``If-None-Match``. A probe (two conditional puts of one key,
done once per bucket and process before the first create) detects this, and such a store is
refused for commits unless ``storage_options["allow_unsafe_single_writer"] = "true"`` says the
caller guarantees a single writer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

import pyarrow as pa

from deltaplane.engine.errors import (
    BucketNotFoundError,
    CommitOutcomeUnknownError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from deltaplane.engine.storage.base import ObjectMeta, PutMode, WholeObjects

_PROBED: dict[tuple[str | None, str], bool] = {}
_PROBE_LOCK = threading.Lock()
# Up to this size an object opened for random access is read whole in one request: a round trip
# (10-50 ms on a real object store) costs more than the bytes a reader would have skipped.
WHOLE_READ_BYTES = 8 << 20
_PUT_ATTEMPTS = 8
_READ_BACK_ATTEMPTS = 6  # reads that settle a commit's outcome, with backoff (about 3 s in all)
_CREDENTIAL_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)


def _option(options: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


def _unsent(error: Exception | None) -> bool:
    """An attempt that failed before its request could reach the server."""
    from botocore.exceptions import (
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ParamValidationError,
        PartialCredentialsError,
    )

    return isinstance(
        error,
        EndpointConnectionError
        | ConnectTimeoutError
        | NoCredentialsError
        | PartialCredentialsError
        | ParamValidationError,
    )


class S3Store(WholeObjects):
    """Store rooted at ``s3://bucket/prefix``; ``storage_options`` carry endpoint and credentials."""

    remote = True  # every request is a round trip: read many objects at once

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None):
        parts = urlsplit(uri)
        if not parts.netloc:
            raise StorageError(f"S3 URI {uri!r} has no bucket")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self.options = dict(storage_options or {})
        self._root = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self._client = None
        self._arrow_fs = None
        self._lock = threading.Lock()
        # botocore's own attempts of the current PutObject in this thread (its retries are
        # invisible otherwise): an error, or None for an attempt the server answered.
        self._put_attempts = threading.local()

    # --- plumbing ------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return self._root

    @property
    def endpoint(self) -> str | None:
        # As the AWS SDKs do: the environment names an endpoint when the options do not.
        return (
            _option(self.options, "endpoint_url", "aws_endpoint_url", "endpoint")
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )

    @property
    def client(self):
        """The boto3 client (created on first use; tests hook botocore events on it)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    import boto3
                    from botocore.config import Config

                    config = Config(
                        retries={
                            "max_attempts": int(_option(self.options, "max_attempts") or 4),
                            "mode": "standard",
                        },
                        s3={"addressing_style": "path"},
                        connect_timeout=float(_option(self.options, "connect_timeout") or 10),
                        read_timeout=float(_option(self.options, "read_timeout") or 60),
                    )
                    self._client = boto3.client(
                        "s3",
                        endpoint_url=self.endpoint,
                        aws_access_key_id=_option(self.options, "aws_access_key_id", "access_key_id"),
                        aws_secret_access_key=_option(
                            self.options, "aws_secret_access_key", "secret_access_key"
                        ),
                        aws_session_token=_option(self.options, "aws_session_token", "session_token"),
                        region_name=_option(self.options, "aws_region", "region") or "us-east-1",
                        config=config,
                    )
                    self._client.meta.events.register("needs-retry.s3.PutObject", self._record_put_attempt)
        return self._client

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _relative(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def uri(self, key: str) -> str:
        return f"{self._root}/{key}"

    @staticmethod
    def _status(error) -> tuple[int, str]:
        response = getattr(error, "response", None) or {}
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return int(status or 0), str(response.get("Error", {}).get("Code", ""))

    def _missing(self, error) -> bool:
        status, code = self._status(error)
        return status == 404 or code in ("NoSuchKey", "404", "NotFound")

    # --- errors ------------------------------------------------------------------------------

    def _error(self, error: Exception, action: str, key: str | None = None) -> StorageError:
        """botocore's exceptions as engine errors that say what to fix, naming the location."""
        from botocore.exceptions import (
            ClientError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        where = self.uri(key) if key is not None else self.root
        if isinstance(error, ClientError):
            status, code = self._status(error)
            message = str((getattr(error, "response", None) or {}).get("Error", {}).get("Message") or "")
            if code == "NoSuchBucket":
                return BucketNotFoundError(
                    f"cannot {action} {where}: the bucket {self.bucket!r} does not exist"
                )
            if self._missing(error):
                return ObjectNotFoundError(f"no such object: {where}")
            if status == 403 or code in _CREDENTIAL_CODES:
                return StorageError(
                    f"cannot {action} {where}: access denied ({code or status}); check the credentials "
                    "and the bucket policy"
                )
            detail = f"{code} (HTTP {status})" + (f": {message}" if message else "")
            return StorageError(f"cannot {action} {where}: {detail}")
        if isinstance(error, NoCredentialsError | PartialCredentialsError):
            return StorageError(
                f"cannot {action} {where}: no AWS credentials found; pass aws_access_key_id and "
                "aws_secret_access_key in storage_options, or configure the environment"
            )
        if isinstance(error, EndpointConnectionError | ConnectTimeoutError):
            endpoint = self.endpoint or "AWS S3"
            return StorageError(f"cannot {action} {where}: cannot reach the S3 endpoint {endpoint}")
        return StorageError(f"cannot {action} {where}: {error}")

    # --- reading -------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"].read()
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "read", key) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        if length <= 0:
            return b""
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self._full(key), Range=f"bytes={start}-{start + length - 1}"
            )
            return response["Body"].read()
        except ClientError as e:
            if self._status(e)[0] == 416:
                return b""
            raise self._error(e, "read", key) from None
        except BotoCoreError as e:
            raise self._error(e, "read", key) from None

    def head(self, key: str) -> ObjectMeta:
        from botocore.exceptions import BotoCoreError, ClientError

        if not self._full(key):
            raise ObjectNotFoundError(f"no such object: {self.root} (a bucket is not an object)")
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=self._full(key))
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "stat", key) from None
        return ObjectMeta(
            key, int(response["ContentLength"]), int(response["LastModified"].timestamp() * 1000)
        )

    def list(
        self, prefix: str, *, start_after: str | None = None, recursive: bool = False
    ) -> Iterator[ObjectMeta]:
        from botocore.exceptions import BotoCoreError, ClientError

        kwargs = {"Bucket": self.bucket, "Prefix": self._full(prefix)}
        if not recursive:
            kwargs["Delimiter"] = "/"
        if start_after is not None:
            kwargs["StartAfter"] = self._full(start_after)
        paginator = self.client.get_paginator("list_objects_v2")
        found = []
        try:
            for page in paginator.paginate(**kwargs):
                for item in page.get("Contents", []):
                    found.append(
                        ObjectMeta(
                            self._relative(item["Key"]),
                            int(item["Size"]),
                            int(item["LastModified"].timestamp() * 1000),
                        )
                    )
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "list", prefix) from None
        found.sort(key=lambda m: m.key)
        return iter(found)

    def open_input(self, key: str, *, size: int | None = None) -> pa.NativeFile:
        """An object of known ``size`` up to ``WHOLE_READ_BYTES`` in one GET (where Arrow's S3
        client would ask for its size, its footer and its columns in turn); others with random
        access through Arrow's own S3 client when it can reach the endpoint."""
        if size is not None and size <= WHOLE_READ_BYTES:
            return pa.BufferReader(self.get(key))
        fs = self._arrow_filesystem()
        if fs is not None:
            try:
                return fs.open_input_file(f"{self.bucket}/{self._full(key)}")
            except FileNotFoundError:
                raise ObjectNotFoundError(f"no such object: {self.uri(key)}") from None
            except OSError:
                pass  # fall back to a whole-object read below, which says what is wrong
        return pa.BufferReader(self.get(key))

    def arrow_files(self):
        fs = self._arrow_filesystem()
        return None if fs is None else (fs, "s3://", "")  # Arrow names an object bucket/key

    def _arrow_filesystem(self):
        if self._arrow_fs is None:
            try:
                from pyarrow import fs

                endpoint = self.endpoint
                kwargs = {"region": _option(self.options, "aws_region", "region") or "us-east-1"}
                if endpoint:
                    parts = urlsplit(endpoint)
                    kwargs["endpoint_override"] = parts.netloc or endpoint
                    kwargs["scheme"] = parts.scheme or "https"
                access = _option(self.options, "aws_access_key_id", "access_key_id")
                if access:
                    kwargs["access_key"] = access
                    kwargs["secret_key"] = _option(self.options, "aws_secret_access_key", "secret_access_key")
                    token = _option(self.options, "aws_session_token", "session_token")
                    if token:
                        kwargs["session_token"] = token
                self._arrow_fs = fs.S3FileSystem(**kwargs)
            except Exception:  # Arrow built without S3, or unusable options: use boto3 reads
                self._arrow_fs = False
        return self._arrow_fs or None

    # --- writing -------------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        if mode == "overwrite":
            try:
                self.client.put_object(Bucket=self.bucket, Key=self._full(key), Body=data)
            except (ClientError, BotoCoreError) as e:
                raise self._error(e, "write", key) from None
            return
        if mode != "create":
            raise ValueError(f"unknown put mode {mode!r}")
        self._check_conditional_put()
        self._put_if_absent(key, data)

    def _record_put_attempt(self, caught_exception=None, **kwargs) -> None:
        attempts = getattr(self._put_attempts, "log", None)
        if attempts is not None:
            attempts.append(caught_exception)

    def _put_if_absent(self, key: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        delay = 0.05
        maybe_sent = False  # some attempt may have reached the server: the key may hold our data
        for _ in range(_PUT_ATTEMPTS):
            self._put_attempts.log = []
            try:
                self.client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
                return
            except ClientError as e:
                status, code = self._status(e)
                if status == 412 or code == "PreconditionFailed":
                    # Taken: by another writer, or by an earlier attempt of ours whose response
                    # was lost (botocore retries too). Only the bytes can tell.
                    if self._settle(key, data):
                        return
                    continue  # gone again (deleted in between): try once more
                if status == 409 or code == "ConditionalRequestConflict":
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                if status < 500 and not maybe_sent:
                    raise self._error(e, "write", key) from None
            except BotoCoreError as e:
                attempts = self._put_attempts.log or [e]
                if not maybe_sent and all(_unsent(a) for a in attempts):
                    raise self._error(e, "write", key) from None  # nothing left this machine
                # timeout or dropped connection: the outcome is unknown
            # Unknown outcome: settle it by reading, never by assuming.
            maybe_sent = True
            if self._settle(key, data):
                return
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise CommitOutcomeUnknownError(
            f"could not settle whether {self.uri(key)} was written after {_PUT_ATTEMPTS} attempts; "
            "its data files are kept, and reading the table shows whether the commit exists"
        )

    def _settle(self, key: str, data: bytes) -> bool:
        """Whether ``key`` holds ``data`` (True) or nothing (False); ``ObjectExistsError`` if it
        holds other bytes. Reads are retried; when none succeeds the outcome of our own put is
        unknown, which is ``CommitOutcomeUnknownError``, never "not written": a caller that took
        it for a failure would write the same data again."""
        delay = 0.1
        last: Exception | None = None
        for attempt in range(_READ_BACK_ATTEMPTS):
            try:
                current = self.get(key)
            except ObjectNotFoundError:
                return False
            except StorageError as e:
                last = e
                if attempt + 1 < _READ_BACK_ATTEMPTS:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                continue
            if current == data:
                return True
            raise ObjectExistsError(f"object already exists: {self.uri(key)}")
        raise CommitOutcomeUnknownError(
            f"the write of {self.uri(key)} may have succeeded, but reading it back failed "
            f"{_READ_BACK_ATTEMPTS} times ({last}); its data files are kept, and reading the table "
            "shows whether the commit exists. Do not simply retry a non-idempotent write."
        )

    def _check_conditional_put(self) -> None:
        cache_key = (self.endpoint, self.bucket)
        with _PROBE_LOCK:
            supported = _PROBED.get(cache_key)
            if supported is None:
                supported = _PROBED[cache_key] = self._probe()
        if not supported and (_option(self.options, "allow_unsafe_single_writer") or "").lower() != "true":
            raise StorageError(
                f"the object store behind {self.root} ignores conditional PUT (If-None-Match), so "
                "concurrent writers could overwrite each other's commits; use a store that supports "
                "it, or set storage_options['allow_unsafe_single_writer']='true' if only one writer "
                "will ever commit to this table"
            )

    def _probe(self) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        name = f"_delta_log/.deltaplane-probe-{uuid.uuid4().hex}"
        key = self._full(name)
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=b"1", IfNoneMatch="*")
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=b"2", IfNoneMatch="*")
            except ClientError as e:
                if self._status(e)[0] == 412 or self._status(e)[1] == "PreconditionFailed":
                    return True
                raise
            return False
        except (ClientError, BotoCoreError) as e:
            raise self._error(e, "write", name) from None
        finally:
            with contextlib.suppress(ClientError, BotoCoreError):
                self.client.delete_object(Bucket=self.bucket, Key=key)

    def delete(self, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._full(key))
        except ClientError as e:
            if not self._missing(e):
                raise self._error(e, "delete", key) from None
        except BotoCoreError as e:
            raise self._error(e, "delete", key) from None
