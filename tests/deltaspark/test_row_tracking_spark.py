"""Row tracking against Delta Spark: both read the same row ids and row commit versions, and
neither loses the other's.

Delta Spark's ``_metadata.row_id`` / ``_metadata.row_commit_version`` are the reference: after
each deltaplane command on a table Delta Spark created, Delta Spark must still see every
untouched row with the id and version it had, and deltaplane must read what Delta Spark reads.
"""

from __future__ import annotations

import pyarrow as pa

from deltaplane.engine import DeltaTable
from deltaplane.engine.row_tracking import ROW_COMMIT_VERSION, ROW_ID
from tests.deltaspark.compare import arrow_rows, sorted_rows

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def spark_lineage(spark, path: str) -> dict[int, tuple[int, int]]:
    rows = spark.sql(f"SELECT id, _metadata.row_id, _metadata.row_commit_version FROM delta.`{path}`")
    out = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in rows}
    assert len(out) == len(rows) and len({v[0] for v in out.values()}) == len(rows), "ids not unique"
    return out


def deltaplane_lineage(path: str) -> dict[int, tuple[int, int]]:
    table = DeltaTable(path).to_arrow(["id"], row_tracking=True)
    return {r["id"]: (r[ROW_ID], r[ROW_COMMIT_VERSION]) for r in table.to_pylist()}


def same_rows(spark, path: str) -> None:
    """Both engines read the same rows, ids and versions."""
    spark_rows = spark.sql(f"SELECT *, _metadata.row_id, _metadata.row_commit_version FROM delta.`{path}`")
    ours = DeltaTable(path).to_arrow(row_tracking=True)
    ours = ours.rename_columns(["id", "v", "row_id", "row_commit_version"])
    assert sorted_rows(arrow_rows(ours)) == sorted_rows(spark_rows)


def test_deltaplane_commands_keep_the_ids_delta_spark_assigned(delta_spark, tmp_path):
    path = str(tmp_path / "t")
    delta_spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, v STRING) USING delta "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true')"
    )
    for k in range(3):  # versions 1-3
        values = ", ".join(f"({k * 10 + i}, 'x')" for i in range(4))
        delta_spark.sql(f"INSERT INTO delta.`{path}` VALUES {values}")
    delta_spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 22")  # a DV written by Delta Spark
    original = spark_lineage(delta_spark, path)
    assert deltaplane_lineage(path) == original
    same_rows(delta_spark, path)

    table = DeltaTable(path)
    table.optimize(purge=True)  # every file rewritten: all ids come from the materialized columns
    assert spark_lineage(delta_spark, path) == original
    same_rows(delta_spark, path)

    table.delete("id = 1")  # deletion vector
    del original[1]
    assert spark_lineage(delta_spark, path) == original
    same_rows(delta_spark, path)

    version = table.update({"v": "'u'"}, "id = 2", strategy="copy_on_write").version
    original[2] = (original[2][0], version)  # an updated row keeps its id, not its version
    assert spark_lineage(delta_spark, path) == original
    same_rows(delta_spark, path)

    source = pa.table({"id": [3, 10, 500], "v": ["m", "m", "m"]}, schema=SCHEMA)
    result = (
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update({"v": "s.v"}, "t.id = 3")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
    )
    original[3] = (original[3][0], result.version)
    del original[10]
    after = spark_lineage(delta_spark, path)
    new_id, new_version = after.pop(500)
    assert after == original
    assert new_version == result.version and new_id > max(r for r, _ in original.values())
    same_rows(delta_spark, path)

    # Delta Spark's own OPTIMIZE keeps what deltaplane materialized.
    original[500] = (new_id, new_version)
    delta_spark.sql(f"OPTIMIZE delta.`{path}`")
    assert spark_lineage(delta_spark, path) == original == deltaplane_lineage(path)


def test_delta_spark_keeps_writing_a_table_deltaplane_created(delta_spark, tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, properties={"delta.enableRowTracking": "true"})
    table.append(pa.table({"id": [1, 2, 3], "v": ["a"] * 3}, schema=SCHEMA))  # version 1
    delta_spark.sql(f"INSERT INTO delta.`{path}` VALUES (4, 'b'), (5, 'b')")  # version 2
    table.append(pa.table({"id": [6], "v": ["c"]}, schema=SCHEMA))  # version 3, same object
    delta_spark.sql(f"UPDATE delta.`{path}` SET v = 'u' WHERE id = 1")  # version 4
    table.update({"v": "'w'"}, "id = 4")  # version 5
    table.optimize.compact()  # version 6
    delta_spark.sql(f"INSERT INTO delta.`{path}` VALUES (7, 'd')")  # version 7
    got = spark_lineage(delta_spark, path)
    assert got == deltaplane_lineage(path)
    assert sorted(r for r, _ in got.values())[:6] == [0, 1, 2, 3, 4, 5]  # the first six ids stay
    assert [got[i] for i in (1, 2, 3, 4, 5, 6)] == [(0, 4), (1, 1), (2, 1), (3, 5), (4, 2), (5, 3)]
    assert got[7][1] == 7 and got[7][0] > 5
    same_rows(delta_spark, path)
