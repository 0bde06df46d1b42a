"""The change data feed across schema changes, against Delta Spark 4.4's ``table_changes``: Delta
Spark makes each table (a rename, a drop, an added column, a widened type, column mapping turned on
then a rename, the feed turned off and on, a rename undone, NOT NULL dropped, a comment and a move,
column mapping dropped), then both read the same ranges. Where
Delta Spark refuses, deltaplane must refuse with the same error class (a typed error naming the
version); where it answers, deltaplane must return the same columns and rows."""

from __future__ import annotations

import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.consume import ChangeNotConsumableError, consume_appends
from deltaplane.engine.errors import ChangeDataNotRecordedError, ChangeDataSchemaError
from tests.deltaspark.client import DeltaSparkError
from tests.deltaspark.compare import arrow_rows, sorted_rows

CDF = "'delta.enableChangeDataFeed'='true'"
MAPPED = f"'delta.columnMapping.mode'='name', {CDF}"
TURN_MAPPING_ON = (
    "ALTER TABLE {t} SET TBLPROPERTIES ('delta.columnMapping.mode'='name', "
    "'delta.minReaderVersion'='2', 'delta.minWriterVersion'='5')"
)
# name: (table properties, statements after the first insert (v1); a last insert follows)
CASES = {
    "rename": (MAPPED, ["ALTER TABLE {t} RENAME COLUMN b TO c"]),
    "drop": (MAPPED, ["ALTER TABLE {t} DROP COLUMN b"]),
    "add_column": (CDF, ["ALTER TABLE {t} ADD COLUMNS (d INT)"]),
    "widen": (f"{CDF}, 'delta.enableTypeWidening'='true'", ["ALTER TABLE {t} ALTER COLUMN a TYPE BIGINT"]),
    "mapping_on_then_rename": (CDF, [TURN_MAPPING_ON, "ALTER TABLE {t} RENAME COLUMN b TO c"]),
    "feed_off_and_on": (
        CDF,
        [
            "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableChangeDataFeed'='false')",
            "INSERT INTO {t} VALUES (7, 'q', 7)",
            "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableChangeDataFeed'='true')",
        ],
    ),
    "rename_undone": (
        MAPPED,
        ["ALTER TABLE {t} RENAME COLUMN b TO c", "ALTER TABLE {t} RENAME COLUMN c TO b"],
    ),
    "drop_not_null": (CDF, ["ALTER TABLE {t} ALTER COLUMN n DROP NOT NULL"]),
    "comment_and_move": (
        MAPPED,
        ["ALTER TABLE {t} ALTER COLUMN b COMMENT 'the b'", "ALTER TABLE {t} ALTER COLUMN b FIRST"],
    ),
    "mapping_dropped": (MAPPED, ["ALTER TABLE {t} DROP FEATURE columnMapping"]),
}


@pytest.fixture(scope="module")
def tables(delta_spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("cdf_schema")
    made = {}
    for name, (properties, statements) in CASES.items():
        path = str(root / name)
        t = f"delta.`{path}`"
        delta_spark.sql(
            f"CREATE TABLE {t} (a INT, b STRING, n INT NOT NULL) USING delta TBLPROPERTIES ({properties})"
        )
        delta_spark.sql(f"INSERT INTO {t} VALUES (1, 'x', 1)")  # v1
        for statement in statements:
            delta_spark.sql(statement.format(t=t))
        delta_spark.sql(f"INSERT INTO {t} (a, n) VALUES (2, 2)")
        made[name] = (path, DeltaTable(path).version())  # (DROP FEATURE makes several commits)
    return made


def spark_changes(spark, path: str, start: int, end: int):
    try:
        rows = spark.sql(f"SELECT * FROM table_changes_by_path('{path}', {start}, {end})")
    except DeltaSparkError as error:
        for error_class in (
            "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE",
            "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA",
            "DELTA_MISSING_CHANGE_DATA",
        ):
            if error_class in error.message:
                return error_class
        raise
    return sorted_rows([{k: v for k, v in r.items() if k != "_commit_timestamp"} for r in rows])


def our_changes(path: str, start: int, end: int):
    try:
        table = DeltaTable(path).changes(start, end)
    except ChangeDataSchemaError as error:
        assert error.start == start and error.end == end
        assert error.ranges[0][0] == start and error.ranges[-1][1] == end
        assert all(a[1] + 1 == b[0] for a, b in zip(error.ranges, error.ranges[1:], strict=False))
        for first, last in error.ranges:  # the pieces it offers can each be read
            DeltaTable(path).changes(first, last, read_schema="end")
        return error.error_class
    except ChangeDataNotRecordedError as error:
        assert start <= error.version <= end
        return error.error_class
    return sorted_rows(arrow_rows(table.drop_columns(["_commit_timestamp"])))


@pytest.mark.parametrize("case", list(CASES))
def test_change_feed_ranges_across_schema_changes_match_delta_spark(delta_spark, tables, case):
    path, last = tables[case]
    # the whole history, from the first data version, from the change on, and before the change
    for start, end in ((0, last), (1, last), (2, last), (0, 1)):
        expected = spark_changes(delta_spark, path, start, end)
        assert our_changes(path, start, end) == expected, f"{case} {start}..{end}"


@pytest.mark.parametrize("on_change", ["fail", "changes"])
def test_a_consumer_stops_before_a_rename_or_drop_and_names_the_version(tables, tmp_path, on_change):
    for case in ("rename", "drop", "widen"):
        source, _ = tables[case]
        target = str(tmp_path / f"{case}_target")
        first = consume_appends(source, target, on_change=on_change)
        assert first.watermark == 1 and first.source_versions == [1]  # what came before lands
        for _ in range(2):  # a retry (a new run) fails the same way, writing nothing
            with pytest.raises(ChangeNotConsumableError, match=r"version 2 .*after_version=2") as error:
                consume_appends(source, target, on_change=on_change)
            assert error.value.version == 2
        assert DeltaTable(target).version() == first.version
        fresh = consume_appends(source, str(tmp_path / f"{case}_new"), after_version=2, on_change=on_change)
        assert fresh.source_versions == [3]  # the advice works: a new target from the change on
        again = consume_appends(
            source, str(tmp_path / f"{case}_from_1"), after_version=1, on_change=on_change
        )
        assert again.source_versions == [3]  # a new target has no rows under the old schema
    source, last = tables["add_column"]  # an added column is followed, not refused
    assert consume_appends(source, str(tmp_path / "added"), on_change=on_change).watermark == last
