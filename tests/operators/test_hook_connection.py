"""``DeltaHook.test_connection()`` opens the store a connection describes (the Airflow UI's "Test"
button): a real SeaweedFS that checks credentials, the shared one, and a refused port. The
answer says why not, and never contains the secret."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from deltaplane.operators.hooks.delta import DeltaHook
from tests.s3_auth import authenticated_seaweedfs

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def auth_s3(tmp_path_factory):
    with authenticated_seaweedfs(tmp_path_factory.mktemp("auth-s3"), f"hook-secret-{uuid.uuid4().hex}") as s:
        yield s


def test_connection(monkeypatch, conn_id: str, **conn) -> tuple[bool, str, float]:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "deltaplane", **conn}))
    started = time.monotonic()
    ok, message = DeltaHook(conn_id).test_connection()
    return ok, message, time.monotonic() - started


test_connection.__test__ = False  # a helper, not a test


def test_a_refused_endpoint_fails_naming_it(monkeypatch):
    secret = f"refused-secret-{uuid.uuid4().hex}"
    for extra in ({}, {"bucket": "lake"}, {"test_uri": "s3://lake/trips"}):
        ok, message, took = test_connection(
            monkeypatch, "refused", host="http://127.0.0.1:1", login="key", password=secret, extra=extra
        )
        assert ok is False, message
        assert "http://127.0.0.1:1" in message, message
        assert secret not in message
        assert took < 30, took


def test_right_and_wrong_credentials_on_an_authenticating_seaweedfs(monkeypatch, auth_s3):
    wrong = f"wrong-secret-{uuid.uuid4().hex}"
    base = {"host": auth_s3.endpoint, "login": auth_s3.access_key}
    answers = []
    for extra in ({}, {"bucket": auth_s3.bucket}, {"test_uri": f"s3://{auth_s3.bucket}/some/table"}):
        ok, message, _ = test_connection(monkeypatch, "auth_ok", password=auth_s3.secret, extra=extra, **base)
        assert ok is True, message
        answers.append(message)
        ok, message, took = test_connection(monkeypatch, "auth_bad", password=wrong, extra=extra, **base)
        assert ok is False, message
        assert auth_s3.endpoint in message and "SignatureDoesNotMatch" in message, message
        assert took < 30, took
        answers.append(message)
        ok, message, _ = test_connection(
            monkeypatch, "auth_nokey", host=auth_s3.endpoint, login="nobody", password=wrong, extra=extra
        )
        assert ok is False and "InvalidAccessKeyId" in message, message
        answers.append(message)
    assert auth_s3.bucket in answers[3] and "some/table" in answers[6], answers
    for message in answers:
        assert auth_s3.secret not in message and wrong not in message, message


def test_a_missing_bucket_is_named(monkeypatch, s3_server):
    def bucket_test(conn_id: str, bucket: str):
        return test_connection(
            monkeypatch,
            conn_id,
            host=s3_server.endpoint,
            login="test",
            password="test-secret-value",
            extra={"bucket": bucket},
        )

    ok, message, _ = bucket_test("shared", s3_server.bucket)
    assert ok is True, message
    ok, message, _ = bucket_test("shared_missing", "no-such-bucket-here")
    assert ok is False and "no-such-bucket-here" in message, message
    assert "test-secret-value" not in message


def test_a_local_connection_lists_its_test_uri(monkeypatch, tmp_path):
    ok, message, _ = test_connection(monkeypatch, "local", extra={"test_uri": str(tmp_path)})
    assert ok is True, message
    missing = tmp_path / "missing"
    ok, message, _ = test_connection(monkeypatch, "local_missing", extra={"test_uri": str(missing)})
    assert ok is False and str(missing) in message, message
