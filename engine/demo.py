"""The embedded-defaults demo behind ``make run``: build a small table, read it back, describe it.

Until the engine's write path exists, the demo table is assembled from its parts: Parquet files
written with pyarrow and commits made of :mod:`deltaplane.engine.actions`, put with put-if-absent through
the object store. It has three versions (create, append, a file removed), partitions, and
per-file statistics, so describe, history, time travel, pruning and skipping all have something
to show.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shutil
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaplane.engine.actions import Add, CommitInfo, Metadata, Protocol, Remove, action_to_json_line
from deltaplane.engine.describe import describe_snapshot
from deltaplane.engine.log.files import commit_key
from deltaplane.engine.schema import from_arrow_schema
from deltaplane.engine.storage import open_store
from deltaplane.engine.table import DeltaTable

SCHEMA = pa.schema(
    [
        ("trip_id", pa.int64()),
        ("pickup_date", pa.date32()),
        ("city", pa.string()),
        ("fare", pa.float64()),
        ("pickup_ts", pa.timestamp("us", tz="UTC")),
    ]
)
CITIES = ["Amsterdam", "Berlin", "Lisbon", "Oslo"]


def _rows(start: int, count: int, day: dt.date) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "trip_id": ids,
            "pickup_date": [day] * count,
            "city": [CITIES[i % len(CITIES)] for i in ids],
            "fare": [round(5 + (i * 7.3) % 60, 2) for i in ids],
            "pickup_ts": [
                dt.datetime(day.year, day.month, day.day, 6, tzinfo=dt.UTC) + dt.timedelta(minutes=i % 900)
                for i in ids
            ],
        },
        schema=SCHEMA,
    )


def _stats(table: pa.Table) -> str:
    mins, maxs, nulls = {}, {}, {}
    for name in ("trip_id", "city", "fare", "pickup_ts"):
        column = table.column(name)
        bounds = pc.min_max(column).as_py()
        lo, hi = bounds["min"], bounds["max"]
        if isinstance(lo, dt.datetime):
            lo = lo.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            hi = hi.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        mins[name], maxs[name], nulls[name] = lo, hi, column.null_count
    return json.dumps(
        {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    )


def _write_file(store, table: pa.Table) -> Add:
    day = table.column("pickup_date")[0].as_py().isoformat()
    key = f"pickup_date={day}/part-{uuid.uuid4()}.zstd.parquet"
    buf = io.BytesIO()
    pq.write_table(table.drop_columns(["pickup_date"]), buf, compression="zstd")
    store.put(key, buf.getvalue(), mode="create")
    return Add(
        path=key,
        partition_values={"pickup_date": day},
        size=len(buf.getvalue()),
        modification_time=int(dt.datetime.now(dt.UTC).timestamp() * 1000),
        data_change=True,
        stats=_stats(table),
    )


def _commit(store, version: int, actions: list, operation: str) -> None:
    info = CommitInfo(
        {
            "timestamp": int(dt.datetime.now(dt.UTC).timestamp() * 1000),
            "operation": operation,
            "operationParameters": {},
            "engineInfo": "deltaplane-demo",
            "txnId": str(uuid.uuid4()),
        }
    )
    body = "\n".join(action_to_json_line(a) for a in [info, *actions]) + "\n"
    store.put(commit_key(version), body.encode(), mode="create")


def build_demo_table(path: str) -> None:
    if os.path.exists(path):
        shutil.rmtree(path)
    store = open_store(path)
    days = [dt.date(2026, 1, d) for d in (1, 2, 3)]
    adds = [
        _write_file(store, _rows(1000 * i + j * 250, 250, day))
        for i, day in enumerate(days)
        for j in range(2)
    ]
    metadata = Metadata(
        id=str(uuid.uuid4()),
        name="trips",
        schema_string=from_arrow_schema(SCHEMA).to_json_string(),
        partition_columns=["pickup_date"],
        configuration={},
        created_time=int(dt.datetime.now(dt.UTC).timestamp() * 1000),
    )
    _commit(store, 0, [Protocol(1, 2), metadata, *adds], "CREATE TABLE AS SELECT")
    more = [_write_file(store, _rows(3000 + j * 250, 250, dt.date(2026, 1, 4))) for j in range(2)]
    _commit(store, 1, more, "WRITE")
    gone = adds[0]
    _commit(
        store,
        2,
        [
            Remove(
                path=gone.path,
                data_change=True,
                deletion_timestamp=int(dt.datetime.now(dt.UTC).timestamp() * 1000),
                extended_file_metadata=True,
                partition_values=gone.partition_values,
                size=gone.size,
            )
        ],
        "DELETE",
    )


def run_demo(path: str, *, as_json: bool = False) -> int:
    build_demo_table(path)
    table = DeltaTable(path)
    predicate = "pickup_date = '2026-01-02' AND fare > 40"
    scan = table.scan(filter=predicate)
    rows = scan.to_table()
    summary = {
        "table": describe_snapshot(table.snapshot),
        "history": [{k: e.get(k) for k in ("version", "operation")} for e in table.history()],
        "version_0_rows": DeltaTable(path, version=0).to_arrow().num_rows,
        "filter": predicate,
        "files_in_table": scan.metrics.files_in_snapshot,
        "files_read_for_filter": scan.metrics.files_read,
        "rows_matching_filter": rows.num_rows,
    }
    if as_json:
        print(json.dumps(summary, default=str))
        return 0
    t = summary["table"]
    print(f"demo table at {os.path.abspath(path)}")
    parts = ", ".join(t["partition_columns"])
    print(f"  version {t['version']}: {t['num_files']} files, {t['num_rows']} rows, partitioned by {parts}")
    print(
        "  history: " + ", ".join(f"v{e['version']} {e['operation']}" for e in reversed(summary["history"]))
    )
    print(f"  time travel: version 0 had {summary['version_0_rows']} rows")
    print(
        f"  filter {predicate!r}: read {summary['files_read_for_filter']} of "
        f"{summary['files_in_table']} files, {summary['rows_matching_filter']} rows match"
    )
    print(f"  try: deltaplane describe {path}")
    print(f"       deltaplane read {path} --filter \"city = 'Oslo'\" --limit 5")
    return 0
