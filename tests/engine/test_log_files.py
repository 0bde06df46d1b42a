"""Strict log file names and the _last_checkpoint hint."""

from __future__ import annotations

import json

import pytest

from deltaplane.engine.log.files import LogFileKind, parse_log_file_name
from deltaplane.engine.log.last_checkpoint import checksum, read_last_checkpoint, render_last_checkpoint
from deltaplane.engine.storage import MemoryStore
from tests.conftest import conformance_golden


@pytest.mark.parametrize(
    ("name", "kind", "version", "extra"),
    [
        ("00000000000000000007.json", LogFileKind.COMMIT, 7, {}),
        ("00000000000000000010.checkpoint.parquet", LogFileKind.CHECKPOINT, 10, {}),
        (
            "00000000000000000010.checkpoint.0000000002.0000000003.parquet",
            LogFileKind.MULTIPART_CHECKPOINT,
            10,
            {"part": 2, "num_parts": 3},
        ),
        (
            "00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.json",
            LogFileKind.V2_CHECKPOINT,
            2,
            {"uuid": "6374b053-df23-479b-b2cf-c9c550132b49", "fmt": "json"},
        ),
        (
            "00000000000000000002.checkpoint.6374B053-DF23-479B-B2CF-C9C550132B49.parquet",
            LogFileKind.V2_CHECKPOINT,
            2,
            {"fmt": "parquet"},
        ),
        (
            "00000000000000000003.00000000000000000009.compacted.json",
            LogFileKind.COMPACTION,
            3,
            {"end_version": 9},
        ),
        ("00000000000000000004.crc", LogFileKind.CHECKSUM, 4, {}),
    ],
)
def test_valid_names(name, kind, version, extra):
    f = parse_log_file_name(f"_delta_log/{name}")
    assert f is not None and f.kind is kind and f.version == version
    for key, value in extra.items():
        assert getattr(f, key) == value


@pytest.mark.parametrize(
    "name",
    [
        "0000000000000000007.json",  # 19 digits
        "00000000000000000007.json.tmp",
        ".00000000000000000007.json.crc",  # Hadoop side file
        "00000000000000000007.JSON",
        "00000000000000000010.checkpoint.0000000004.0000000003.parquet",  # part > parts
        "00000000000000000010.checkpoint.0000000001.0000000001.parquet",  # a "multi-part" of one
        "00000000000000000003.00000000000000000003.compacted.json",  # empty range
        "00000000000000000003.00000000000000000009.compact.json",  # Spark docs' misspelling
        "00000000000000000002.checkpoint.not-a-uuid.json",
        "_last_checkpoint",
    ],
)
def test_non_log_names_are_ignored(name):
    assert parse_log_file_name(f"_delta_log/{name}") is None


def test_checksum_matches_spec_vector():
    doc = json.loads(
        '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", '
        '[1, 2], {"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
    )
    assert checksum(doc) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_checksum_matches_every_spark_written_hint():
    hints = list(conformance_golden().glob("*/delta/_delta_log/_last_checkpoint"))
    assert hints, "no _last_checkpoint in the conformance corpus"
    checked = 0
    for path in hints:
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue  # the deliberately corrupt one
        if "checksum" in doc:
            assert checksum(doc) == doc["checksum"], path
            checked += 1
    assert checked >= 5


def test_hint_round_trip_and_unusable_hints():
    store = MemoryStore()
    assert read_last_checkpoint(store) is None  # missing
    store.put("_delta_log/_last_checkpoint", render_last_checkpoint({"size": 3, "version": 10}))
    hint = read_last_checkpoint(store)
    assert hint is not None and (hint.version, hint.size) == (10, 3)
    assert json.loads(store.get("_delta_log/_last_checkpoint"))["version"] == 10

    for bad in [
        b'{"version": 10, "si',
        b"garbage",
        b"[]",
        b'{"size": 1}',
        b'{"version": -1}',
        b'{"version": 10, "size": 3, "checksum": "0000"}',
    ]:
        store.put("_delta_log/_last_checkpoint", bad)
        assert read_last_checkpoint(store) is None, bad
