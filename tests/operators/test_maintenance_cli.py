"""``deltaplane maintenance plan``: one line per table and kind of work from a tables file written
the way a user writes it (defaults in ``maintenance.defaults``, overrides per table), a table not
yet created, a table that cannot be read, an invalid policy; run as a subprocess, as users run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa

from deltaplane.engine import DeltaTable


def plan(cwd, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("DELTAPLANE_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "deltaplane.engine.cli", "maintenance", "plan", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def streaming(path, commits: int) -> None:
    DeltaTable.create(str(path), pa.schema([("id", pa.int64())]))
    t = DeltaTable(str(path))
    for i in range(commits):
        t.append(pa.table({"id": [i]}))


def test_plan_prints_every_table_and_kind_with_its_reason(tmp_path):
    streaming(tmp_path / "lake" / "events", 8)
    streaming(tmp_path / "lake" / "quiet", 2)
    (tmp_path / "lake" / "broken" / "_delta_log").mkdir(parents=True)
    (tmp_path / "lake" / "broken" / "_delta_log" / f"{0:020d}.json").write_text("not json\n")
    config = tmp_path / "tables.yaml"
    config.write_text(
        textwrap.dedent(
            """
            maintenance:
              max_concurrent_jobs: 1
              defaults:
                small_file_size: 1MB
                min_small_files: 5
                max_versions_since_checkpoint: 1000
            tables:
              events:
                uri: lake/events
              quiet:
                uri: lake/quiet
                maintenance:
                  kinds: [compaction]
              later:
                uri: lake/not_yet
              broken:
                uri: lake/broken
            """
        )
    )
    done = plan(tmp_path, str(config))
    assert done.returncode == 2, done.stderr  # the broken table
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["events", "compaction", "run"]
    assert "8 small files (< 1.0 MiB) in 1 partition(s) with >= 5" in lines[0]
    quiet = [line for line in lines if line.startswith("quiet")]
    assert any("2 small files (< 1.0 MiB) in the table; threshold 5" in line for line in quiet)
    assert any(line.split()[1] == "checkpoint" and "disabled by the table's policy" in line for line in quiet)
    assert sum(line.startswith("later") and "no table yet" in line for line in lines) == 7  # every kind
    assert any(line.startswith("broken") and "cannot read the table" in line for line in lines)
    assert "Traceback" not in done.stderr

    as_json = json.loads(plan(tmp_path, str(config), "--json").stdout)
    first = as_json["decisions"][0]
    assert (first["table"], first["kind"], first["run"]) == ("events", "compaction", True)
    assert list(as_json["unreadable"]) == ["broken"]


def test_an_invalid_policy_names_the_file_and_the_key(tmp_path):
    config = tmp_path / "tables.yaml"
    config.write_text(
        textwrap.dedent(
            """
            maintenance:
              defaults:
                kinds: [compaction, defrag]
            tables:
              t:
                uri: lake/t
                maintenance:
                  max_deleted_rows_ratio: 2
            """
        )
    )
    done = plan(tmp_path, str(config))
    assert done.returncode == 2
    assert f"{config}: maintenance.defaults.kinds.1:" in done.stderr
    assert "Traceback" not in done.stderr
    config.write_text("tables:\n  t:\n    uri: lake/t\n    maintenance:\n      max_deleted_rows_ratio: 2\n")
    done = plan(tmp_path, str(config))
    assert done.returncode == 2 and "table 't': maintenance.max_deleted_rows_ratio" in done.stderr
    config.write_text("tables:\n  t:\n    uri: lake/t\n    maintenance:\n      min_tier_files: 1\n")
    done = plan(tmp_path, str(config))
    assert done.returncode == 2 and "table 't': maintenance.min_tier_files" in done.stderr


def test_size_tiers_come_from_the_file_over_the_engines_default(tmp_path):
    from deltaplane.operators.factory.config import load_config, maintenance_policy

    config = tmp_path / "tables.yaml"
    config.write_text(
        textwrap.dedent(
            """
            maintenance:
              defaults: {min_tier_files: 3}
            tables:
              a: {uri: lake/a}
              b: {uri: lake/b, maintenance: {min_tier_files: 8}}
            """
        )
    )
    loaded = load_config(config)
    policies = {name: maintenance_policy(t, loaded.maintenance) for name, t in loaded.tables.items()}
    assert (policies["a"].min_tier_files, policies["b"].min_tier_files) == (3, 8)
    config.write_text("tables:\n  a: {uri: lake/a}\n")
    loaded = load_config(config)
    assert maintenance_policy(loaded.tables["a"], loaded.maintenance).min_tier_files == 4
