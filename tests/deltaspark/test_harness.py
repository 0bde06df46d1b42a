"""The reference harness itself: Delta Spark starts, reports its errors typed, and reads and
writes the same table as deltaplane (the smallest round trip; the rest is in the other tests)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from tests.deltaspark.client import INTERPRETED_SPARK, DeltaSparkError
from tests.deltaspark.compare import arrow_rows, sorted_rows


def test_round_trip(delta_spark, tmp_path):
    path = str(tmp_path / "t")
    DeltaTable.create(path, data=pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", None]}))
    assert sorted_rows(delta_spark.rows(path)) == [
        {"id": 1, "s": "a"}, {"id": 2, "s": "b"}, {"id": 3, "s": None}
    ]
    delta_spark.sql(f"INSERT INTO delta.`{path}` VALUES (4, 'd')")
    table = DeltaTable(path)
    assert table.version == 1
    assert sorted_rows(arrow_rows(table.to_arrow())) == sorted_rows(delta_spark.rows(path))


def test_errors_are_typed_and_the_session_survives(delta_spark, tmp_path):
    with pytest.raises(DeltaSparkError) as caught:
        delta_spark.sql(f"SELECT * FROM delta.`{tmp_path / 'missing'}`")
    assert "AnalysisException" in caught.value.error_class or "not a Delta table" in str(caught.value)
    assert delta_spark.sql("SELECT 1 AS one") == [{"one": 1}]


def test_the_suites_reference_jvm_collects_on_one_thread(delta_spark):
    """The fixture's JVM runs with the serial collector (less CPU on a shared machine); the
    option travels through the server's session to the JVM's command line."""
    from tests import proctree

    below = proctree.descendants(delta_spark.pid).values()
    jvms = [p for p in below if p.cmdline and p.cmdline[0].endswith("java")]
    assert len(jvms) == 1, jvms
    assert "-XX:+UseSerialGC" in jvms[0].cmdline


def test_the_suites_reference_evaluates_without_generating_code(delta_spark):
    """The fixture's settings reach Delta Spark's session (its reads stay as the reference's)."""
    for key, value in INTERPRETED_SPARK.items():
        assert delta_spark.sql(f"SET {key}") == [{"key": key, "value": value}]
