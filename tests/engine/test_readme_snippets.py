"""Every engine snippet of README.md runs as written, in order, on small tables in a temporary
folder. What a snippet leaves undefined (``df``, ``run_id``, a users batch) is defined here, and
its example locations (``/data/...``, ``s3://lake/...``) are folders of the test: S3 itself is
tested in tests/engine/test_s3.py."""

from __future__ import annotations

import datetime as dt
import os
import shutil

import pyarrow as pa
import pytest

from tests.readme import blocks, python_blocks


def _trips(first: int, count: int, day: str) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table(
        {
            "trip_id": pa.array(ids, pa.int64()),
            "fare": pa.array([10.0 + i % 50 for i in ids]),
            "pickup_date": pa.array([day] * count),
            "city": pa.array([("Oslo", "Rome", "Lima")[i % 3] for i in ids]),
            "pickup_zone": pa.array([f"z{i % 7}" for i in ids]),
        }
    )


_UTC_MICROS = pa.timestamp("us", "UTC")


def _users(ids: list[int], *, deleted: bool = False) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "user_id": pa.array([f"u-{i}" for i in ids]),
            "score": pa.array([float(i) for i in ids]),
            "tier": pa.array(["gold" for _ in ids]),
            "country": pa.array([("NO", "UK")[i % 2] for i in ids]),
            "updated_at": pa.array(
                [dt.datetime(2026, 11, 21, tzinfo=dt.UTC)] * len(ids), pa.timestamp("us", "UTC")
            ),
            "deleted": pa.array([deleted] * len(ids)),
            "day": pa.array([dt.date(2026, 11, 2)] * len(ids)),
        }
    )


def _namespace(tmp_path) -> dict:
    df = pa.concat_tables([_trips(0, 50, "2026-01-02"), _trips(50, 50, "2026-01-03")])
    return {
        "df": df,
        "day_df": _trips(0, 20, "2026-01-02"),
        "run_id": "manual__2026-11-22T00:00:00+00:00",
        "pa_schema": df.schema,
        "table_or_record_batch_reader": pa.RecordBatchReader.from_batches(df.schema, df.to_batches()),
        "batch": df.slice(0, 10),
        "wider_table": _trips(200, 5, "2026-01-04").append_column("tip", pa.array([1.5] * 5)),
        "new_rows": df,
        "day_rows": _trips(300, 5, "2026-01-02"),
        "rows": _trips(400, 5, "2026-01-03"),
        "uri": str(tmp_path / "data" / "staged"),
        "batch_schema": df.schema,
        "part_1": df.slice(0, 30),
        "part_2": df.slice(30, 30),
        "data": df.slice(60, 10),
        "opts": {},
        "__tmp__": tmp_path,
    }


def _trips_since_january(ns: dict) -> None:
    """``/data/trips`` with five versions committed on 2026-01-01 and 02 (the log's file times),
    for the reading snippet's time travel."""
    from deltaplane.engine import write_table

    path = ns["__tmp__"] / "data" / "trips"
    write_table(str(path), ns["df"].slice(0, 20), partition_by=["pickup_date"])
    for first in range(20, 100, 20):
        write_table(str(path), ns["df"].slice(first, 20), mode="append")
    for version, commit in enumerate(sorted((path / "_delta_log").glob("*.json"))):
        when = dt.datetime(2026, 1, 1, 22, tzinfo=dt.UTC) + dt.timedelta(hours=3 * version)
        os.utime(commit, (when.timestamp(), when.timestamp()))


def _daily_table(ns: dict) -> None:
    """A table partitioned by ``day`` at ``uri`` for the step-by-step write snippet."""
    from deltaplane.engine import write_table

    rows = ns["df"].slice(0, 60).append_column("day", pa.array(["2026-11-22"] * 60))
    write_table(ns["uri"], rows.slice(0, 10), partition_by=["day"])
    ns.update(
        batch_schema=rows.schema, part_1=rows.slice(10, 20), part_2=rows.slice(30, 20), data=rows.slice(50)
    )


def _no_trips(ns: dict) -> None:
    shutil.rmtree(ns["__tmp__"] / "data" / "trips", ignore_errors=True)


# Blocks that need other names than the trips tables: set just before the block runs.
BEFORE = {
    'DeltaTable("/data/trips")  # latest version': _trips_since_january,
    'write_table("/data/trips", df, partition_by': _no_trips,
    'DeltaTable.create(\n    "/data/trips"': _no_trips,
    "spec = plan_write(\n    uri,": _daily_table,
    '"/data/users"': lambda ns: ns.update(
        schema=_users([1]).schema, batch=_users([1, 2, 3, 123], deleted=False), dt=None
    ),
}


def _localize(source: str, tmp_path) -> str:
    return source.replace('"/data/', f'"{tmp_path}/data/').replace('"s3://lake/', f'"{tmp_path}/s3lake/')


def test_every_engine_snippet_runs_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # snippets that write "batch.json" write it here
    snippets = python_blocks(spark=False)
    assert len(snippets) >= 10
    namespace = _namespace(tmp_path)
    for block in snippets:
        for marker, setup in BEFORE.items():
            if marker in block.source:
                setup(namespace)
        try:
            exec(compile(_localize(block.source, tmp_path), str(block), "exec"), namespace)
        except Exception as e:
            pytest.fail(f"{block} failed: {type(e).__name__}: {e}")


def test_every_block_is_run_somewhere():
    """A new block must be one the README tests know: engine and Spark Python (run), DAG files
    (tests/operators/test_readme.py), a tables file or a shell/text block checked in
    test_readme_commands."""
    kinds = {(b.language or "text") for b in blocks()}
    assert kinds <= {"python", "sh", "yaml", "text"}, kinds
