"""deltaplane maintains the tables Delta Spark 4.4 writes: on a copy of every corpus table
(tests/fixtures/delta_spark_44), deltaplane appends, deletes, updates, compacts, checkpoints and
vacuums; Delta Spark then reads exactly what deltaplane reads, keeps writing and optimizing, and
deltaplane reads Delta Spark's result too. Rows are compared between the two implementations and
with the rows the test itself put in."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from tests.deltaspark.compare import arrow_rows, sorted_rows

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "delta_spark_44"

# Per table: rows deltaplane appends (only the columns a writer supplies), a delete predicate,
# an update and a predicate true of exactly the updated row afterwards, the statement Delta Spark
# inserts with, and the column that identifies rows.
CASES = {
    "row_tracking": dict(
        append=pa.table({"id": pa.array([7, 8], pa.int64()), "v": ["g", "h"]}),
        delete="id = 1", update=({"v": "'U'"}, "id = 4"), updated="id = 4 AND v = 'U'",
        spark_insert="INSERT INTO {t} VALUES (9, 'i')", key="id",
    ),
    "liquid_clustering": dict(
        append=pa.table(
            {"a": pa.array([6, 0], pa.int32()), "b": pa.array([60, 0], pa.int32()), "s": ["q", "r"]}
        ),
        delete="a = 1", update=({"s": "'U'"}, "a = 5"), updated="a = 5 AND s = 'U'",
        spark_insert="INSERT INTO {t} VALUES (7, 70, 'spark')", key="a",
    ),
    "identity_always": dict(
        append=pa.table({"x": ["d", "e"]}),
        delete="x = 'a'", update=({"x": "'B'"}, "x = 'b'"), updated="x = 'B'",
        spark_insert="INSERT INTO {t} (x) VALUES ('spark')", key="x",
    ),
    "identity_by_default": dict(
        append=pa.table({"x": ["d", "e"]}),
        delete="x = 'a'", update=({"x": "'B'"}, "x = 'b'"), updated="x = 'B'",
        spark_insert="INSERT INTO {t} (x) VALUES ('spark')", key="x",
    ),
    "generated_columns": dict(
        append=pa.table({
            "ts": pa.array([1_700_000_000_000_000], pa.timestamp("us", tz="UTC")),
            "v": pa.array([4], pa.int32()),
        }),
        # the generated columns follow the updated base column
        delete="v = 1", update=({"v": "v + 10"}, "v = 2"), updated="v = 12 AND w = 25",
        spark_insert="INSERT INTO {t} (ts, v) VALUES (TIMESTAMP'2027-01-01 12:00:00', 5)", key="v",
    ),
    "column_defaults": dict(
        append=pa.table({"id": pa.array([5, 6], pa.int32())}),
        delete="id = 1", update=({"s": "'U'"}, "id = 2"), updated="id = 2 AND s = 'U' AND n = 0",
        spark_insert="INSERT INTO {t} (id) VALUES (7)", key="id",
    ),
    "all_features": dict(
        append=pa.table({"k": pa.array([7, 8], pa.int32())}),
        delete="k = 2", update=({"tag": "'U'"}, "k = 5"), updated="k = 5 AND tag = 'U' AND k2 = 10",
        spark_insert="INSERT INTO {t} (k) VALUES (10)", key="k",
    ),
}


def _both_read_the_same(delta_spark, path: str) -> list[dict]:
    ours = sorted_rows(arrow_rows(DeltaTable(path).to_arrow()))
    theirs = sorted_rows(delta_spark.rows(path))
    assert ours == theirs
    return ours


@pytest.mark.parametrize("name", sorted(CASES))
def test_deltaplane_maintains_a_delta_spark_table(delta_spark, tmp_path, name):
    case = CASES[name]
    path = str(tmp_path / name)
    shutil.copytree(CORPUS / name, path)
    table = DeltaTable(path)
    before = _both_read_the_same(delta_spark, path)
    key = case["key"]

    table.append(case["append"])
    table.delete(case["delete"])
    table.update(*case["update"])
    table.optimize()
    table.create_checkpoint()
    table.vacuum(retention_hours=0, enforce_retention_duration=False)  # same object, reused throughout

    rows = _both_read_the_same(delta_spark, path)
    keys = sorted(str(r[key]) for r in rows)
    appended = {str(v) for v in case["append"].column(key).to_pylist()}
    assert appended <= set(keys), "an appended row is missing"
    assert len(keys) == len(set(keys)), f"duplicate rows: {keys}"
    assert len(rows) < len(before) + case["append"].num_rows, "the delete removed nothing"
    t = f"delta.`{path}`"
    assert delta_spark.sql(f"SELECT count(*) AS n FROM {t} WHERE {case['delete']}") == [{"n": 0}]
    assert delta_spark.sql(f"SELECT count(*) AS n FROM {t} WHERE {case['updated']}") == [{"n": 1}]

    # Delta Spark keeps writing and optimizing the table deltaplane maintained ...
    delta_spark.sql(case["spark_insert"].format(t=f"delta.`{path}`"))
    delta_spark.sql(f"OPTIMIZE delta.`{path}`")
    after = _both_read_the_same(delta_spark, path)
    assert len(after) == len(rows) + 1
    history = delta_spark.sql(f"DESCRIBE HISTORY delta.`{path}`")
    assert history[0]["operation"] in ("OPTIMIZE", "WRITE")
    assert delta_spark.sql(f"DESCRIBE DETAIL delta.`{path}`")[0]["numFiles"] >= 1
    # ... and deltaplane reads Delta Spark's commits with the object it already had (a table
    # object reads the version it holds until refreshed, as delta-rs's does)
    assert sorted_rows(arrow_rows(table.refresh().to_arrow())) == after
