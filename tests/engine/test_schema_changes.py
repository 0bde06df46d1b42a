"""Which schema changes a reader can read across (engine/schema_changes.py), on hand-written
schemas: the rules are Delta Spark's (checked end to end in tests/deltaspark/test_cdf_schema_changes.py)."""

from __future__ import annotations

import json

import pytest

from deltaplane.engine.actions import Metadata
from deltaplane.engine.schema_changes import read_incompatibility


def field(name, type_="integer", nullable=True, physical=None):
    metadata = {"delta.columnMapping.physicalName": physical} if physical else {}
    return {"name": name, "type": type_, "nullable": nullable, "metadata": metadata}


def meta(*fields, mode="none", partitions=()):
    schema = json.dumps({"type": "struct", "fields": list(fields)})
    return Metadata(
        id="t",
        schema_string=schema,
        partition_columns=list(partitions),
        configuration={"delta.columnMapping.mode": mode},
    )


def struct(*fields):
    return {"type": "struct", "fields": list(fields)}


MAPPED = dict(mode="name")


@pytest.mark.parametrize(
    ("older", "newer", "problem"),
    [
        (meta(field("a")), meta(field("a"), field("b")), None),  # added column
        (meta(field("a", nullable=False)), meta(field("a")), None),  # NOT NULL dropped
        (meta(field("a")), meta(field("a", nullable=False)), "'a' was made NOT NULL"),
        (meta(field("a")), meta(field("a", "long")), "type of 'a' changed from integer to long"),
        (meta(field("a")), meta(field("A")), "'a' is now spelled 'A'"),
        (
            meta(field("s", struct(field("x", physical="p1")), physical="p0"), **MAPPED),
            meta(field("s", struct(field("y", physical="p1")), physical="p0"), **MAPPED),
            "column 's.x' was renamed to 's.y'",
        ),
        (
            meta(
                field(
                    "l",
                    {"type": "array", "elementType": struct(field("x", physical="p1")), "containsNull": True},
                    physical="p0",
                ),
                **MAPPED,
            ),
            meta(
                field(
                    "l",
                    {
                        "type": "array",
                        "elementType": struct(field("y `.", physical="p1")),
                        "containsNull": True,
                    },
                    physical="p0",
                ),
                **MAPPED,
            ),
            "renamed",
        ),
        (
            meta(
                field(
                    "m",
                    {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True},
                )
            ),
            meta(
                field(
                    "m",
                    {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": False},
                )
            ),
            "values of 'm' were made NOT NULL",
        ),
        (
            meta(field("a", physical="p"), field("b", physical="q"), **MAPPED),
            meta(field("a", physical="p"), **MAPPED),
            "'b' was dropped",
        ),
        # dropped, then a new column with the old name: a different physical name
        (
            meta(field("b", physical="q"), **MAPPED),
            meta(field("b", physical="r"), **MAPPED),
            "'b' was dropped",
        ),
        (
            meta(field("a"), field("b")),
            meta(field("a"), field("c", physical="b"), **MAPPED),
            "'b' was renamed to 'c'",
        ),
        (meta(field("a"), field("b")), meta(field("a"), field("b"), **MAPPED), None),  # mapping turned on
        (meta(field("a", physical="a"), **MAPPED), meta(field("a")), "column mapping was turned off"),
        (
            meta(field("a", physical="p"), field("d", physical="q"), partitions=["d"], **MAPPED),
            meta(field("a", physical="p"), field("d", physical="q"), **MAPPED),
            "partition columns changed",
        ),
    ],
)
def test_read_incompatibility(older, newer, problem):
    found = read_incompatibility(older, newer)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found
