"""History and health over commits other writers made: a commitInfo whose fields are not what
the protocol suggests must not break ``history()`` or ``health()``."""

from __future__ import annotations

import json

import pyarrow as pa

from deltaplane.engine import DeltaTable, write_table


def test_a_non_numeric_in_commit_timestamp_falls_back_to_the_file_time(table_dir):
    uri = str(table_dir)
    write_table(uri, pa.table({"id": pa.array([1, 2], pa.int64())}))
    commit = {"commitInfo": {"operation": "OPTIMIZE", "inCommitTimestamp": "yesterday", "timestamp": "x"}}
    (table_dir / "_delta_log" / f"{1:020d}.json").write_text(json.dumps(commit) + "\n")
    table = DeltaTable(uri)
    newest = table.history(1)[0]
    assert newest["operation"] == "OPTIMIZE" and isinstance(newest["timestamp"], int)
    assert newest["timestamp"] > 0
    health = table.health()
    assert health.last_optimize is not None and health.last_optimize.version == 1
