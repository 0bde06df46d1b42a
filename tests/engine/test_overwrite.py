"""Overwrites: the whole table, a predicate (replaceWhere) and dynamic partitions."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import ConstraintViolationError
from tests.engine.test_write import SCHEMA, assert_delta_rs_agrees, rows
from tests.helpers import assert_same_rows


@pytest.fixture
def table(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["region"])
    t.append(rows(0, 40, regions=("eu", "us", "ap")))
    return t


def test_full_overwrite(table):
    before = table.snapshot.num_files
    result = table.overwrite(rows(100, 5))
    assert result.operation_metrics["numRemovedFiles"] == str(before)
    assert_same_rows(table.to_arrow(), rows(100, 5))
    assert DeltaTable(table.uri, version=1).to_arrow().num_rows == 40
    assert table.history()[0]["operationParameters"]["mode"] == "Overwrite"
    assert_delta_rs_agrees(table.uri)


def test_overwrite_by_partition_predicate(table):
    new_eu = rows(100, 3, regions=("eu",))
    result = table.overwrite(new_eu, predicate="region = 'eu'")
    assert result.operation_metrics["numRemovedFiles"] == "1"
    out = table.to_arrow()
    old = rows(0, 40, regions=("eu", "us", "ap"))
    assert_same_rows(out, pa.concat_tables([old.filter(pc.not_equal(old["region"], "eu")), new_eu]))
    assert_delta_rs_agrees(table.uri)


def test_overwrite_by_data_predicate_rewrites_partial_files(table):
    old = rows(0, 40, regions=("eu", "us", "ap"))
    new = rows(1000, 4, regions=("us",)).set_column(0, "id", pa.array([5, 6, 7, 8], pa.int64()))
    result = table.overwrite(new, predicate="id BETWEEN 5 AND 9")
    keep = old.filter(pc.invert(pc.and_(pc.greater_equal(old["id"], 5), pc.less_equal(old["id"], 9))))
    assert_same_rows(table.to_arrow(), pa.concat_tables([keep, new]))
    assert int(result.operation_metrics["numCopiedRows"]) == 40 - 5  # the rest of the touched files
    assert_delta_rs_agrees(table.uri)


def test_overwrite_data_must_match_the_predicate(table):
    with pytest.raises(ConstraintViolationError, match="do not match"):
        table.overwrite(rows(100, 3, regions=("us",)), predicate="region = 'eu'")
    assert table.version == 1


def test_dynamic_partition_overwrite(table):
    new = rows(200, 4, regions=("us", "mx"))
    result = table.overwrite(new, dynamic_partitions=True)
    old = rows(0, 40, regions=("eu", "us", "ap"))
    expected = pa.concat_tables([old.filter(pc.not_equal(old["region"], "us")), new])
    assert_same_rows(table.to_arrow(), expected)
    assert result.operation_metrics["numRemovedFiles"] == "1"
    assert table.history()[0]["operationParameters"]["partitionOverwriteMode"] == "DYNAMIC"
    assert_delta_rs_agrees(table.uri)


def test_schema_overwrite_replaces_the_schema(table):
    new = pa.table({"region": ["eu"], "other": [1.5]})
    table.overwrite(new, schema_mode="overwrite")
    assert table.schema.names == ["region", "other"]
    assert table.to_arrow().to_pylist() == [{"region": "eu", "other": 1.5}]
    assert DeltaTable(table.uri, version=1).schema == SCHEMA
    assert_delta_rs_agrees(table.uri)
