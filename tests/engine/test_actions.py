"""Actions: camelCase at the boundary, unknown fields and actions survive."""

from __future__ import annotations

import json

import pytest

from deltaplane.engine.actions import (
    ACTION_TYPES,
    Add,
    CommitInfo,
    DeletionVectorDescriptor,
    Metadata,
    Protocol,
    Remove,
    Txn,
    action_to_json_line,
    known_actions,
)


def parse_action(line: dict):
    """The one action of ``line``, as the log readers build it: its known key, then that type's
    ``from_json``."""
    [(key, body)] = known_actions(line)
    return ACTION_TYPES[key].from_json(body)


def test_add_round_trip_keeps_unknown_fields():
    line = {
        "add": {
            "path": "p=1/f.parquet",
            "partitionValues": {"p": "1"},
            "size": 10,
            "modificationTime": 5,
            "dataChange": True,
            "stats": '{"numRecords":1}',
            "futureField": {"x": [1, 2]},
            "deletionVector": {
                "storageType": "u",
                "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                "offset": 1,
                "sizeInBytes": 36,
                "cardinality": 2,
                "maxRowIndex": 9,
            },
        }
    }
    action = parse_action(line)
    assert isinstance(action, Add)
    assert action.partition_values == {"p": "1"} and action.data_change is True
    assert action.extra == {"futureField": {"x": [1, 2]}}
    assert action.deletion_vector.extra == {"maxRowIndex": 9}
    assert json.loads(action_to_json_line(action)) == line


def test_unknown_action_types_are_ignored_and_each_known_action_counts():
    assert known_actions({"someFutureAction": {"a": 1}}) == []
    assert known_actions({"add": {"path": "a"}, "future": 1, "commitInfo": None}) == [("add", {"path": "a"})]
    # several known actions on one line (the protocol forbids it; some writers do it): each counts,
    # in the order of the line
    assert known_actions({"remove": {"path": "r"}, "add": {"path": "a"}}) == [
        ("remove", {"path": "r"}),
        ("add", {"path": "a"}),
    ]
    with pytest.raises(ValueError, match="JSON object"):
        known_actions(["not", "an", "object"])


def test_metadata_defaults_for_null_fields():
    md = parse_action({"metaData": {"id": "x", "partitionColumns": None, "configuration": None}})
    assert isinstance(md, Metadata)
    assert md.partition_columns == [] and md.configuration == {} and md.schema_string is None
    assert md.format.provider == "parquet"


def test_other_actions():
    assert parse_action(
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"],
            }
        }
    ) == Protocol(3, 7, ["deletionVectors"], ["deletionVectors"])
    assert parse_action({"txn": {"appId": "a", "version": 3}}) == Txn("a", 3)
    remove = parse_action({"remove": {"path": "f", "dataChange": False}})
    assert isinstance(remove, Remove) and remove.deletion_timestamp is None
    info = parse_action({"commitInfo": {"timestamp": 1, "inCommitTimestamp": 2, "anything": [1]}})
    assert isinstance(info, CommitInfo) and info.in_commit_timestamp == 2
    assert info.to_json()["anything"] == [1]


def test_dv_unique_id():
    dv = DeletionVectorDescriptor("u", "abc", 10, 1, offset=4)
    assert dv.unique_id == "uabc@4"
    assert DeletionVectorDescriptor("i", "xyz", 10, 1).unique_id == "ixyz"
