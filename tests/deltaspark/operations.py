"""Table operations described once and rendered twice, as Delta Spark SQL (or DataFrame writes)
and as calls on deltaplane's ``DeltaTable``, and a runner that applies one sequence of them to two
copies of a table (Delta Spark writes one, deltaplane the other) and compares, after every step:

- outcome: both sides succeed, or both refuse the operation;
- commits: as many new versions on each side, with the same ``operation`` names (a version map
  pairs them up, so later steps compare version N of one copy with its partner on the other);
- rows at the step's new version, read four ways (each copy by its own writer and by the other
  implementation), and every earlier readable version re-read the same four ways at the end;
- the change data feed of the step's commits while it is enabled, four ways, with
  ``_commit_version`` mapped through the version map (``_commit_timestamp`` is not compared).

Nothing here decides an expected value by running deltaplane: the reference is Delta Spark's
own copy, read by Delta Spark.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from deltaplane.engine import DeltaTable
from tests.deltaspark.client import DeltaSparkError
from tests.deltaspark.compare import arrow_rows, sorted_rows

SPARK, ENGINE = "spark", "engine"
TRACE = os.environ.get("DELTAPLANE_DIFF_TRACE") == "1"
SIDES = (SPARK, ENGINE)


@dataclass(frozen=True)
class Column:
    name: str
    ddl: str
    arrow: pa.DataType


BASE_COLUMNS = (
    Column("id", "BIGINT", pa.int64()),
    Column("part", "STRING", pa.string()),
    Column("v", "INT", pa.int32()),
    Column("d", "DECIMAL(10,2)", pa.decimal128(10, 2)),
    Column("ts", "TIMESTAMP", pa.timestamp("us", tz="UTC")),
)
PARTS = ("a", "b", None)
TIMESTAMPS = (
    None,
    dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    dt.datetime(2024, 1, 2, 12, 34, 56, 123456, tzinfo=dt.UTC),
    dt.datetime(2024, 1, 3, 23, 59, 59, tzinfo=dt.UTC),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
)


@dataclass(frozen=True)
class RowSpec:
    """One row's values but its id (the runner numbers rows, so ids stay unique)."""

    part: int  # index into PARTS
    v: int | None
    cents: int | None  # d = cents / 100
    ts: int  # index into TIMESTAMPS

    def values(self, row_id: int, columns: tuple[Column, ...]) -> dict[str, Any]:
        row = {
            "id": row_id,
            "part": PARTS[self.part % len(PARTS)],
            "v": self.v,
            "d": None if self.cents is None else decimal.Decimal(self.cents).scaleb(-2),
            "ts": TIMESTAMPS[self.ts % len(TIMESTAMPS)],
        }
        for column in columns[len(BASE_COLUMNS) :]:  # evolved columns: a value from the id
            if column.ddl == "STRING":
                row[column.name] = None if row_id % 4 == 0 else f"{column.name}-{row_id % 5}"
            else:
                row[column.name] = None if row_id % 3 == 0 else row_id % 7
        return row


def sql_literal(value: Any, column: Column) -> str:
    if value is None:
        return f"CAST(NULL AS {column.ddl})"
    if column.ddl == "STRING":
        return "'" + str(value).replace("'", "''") + "'"
    if column.ddl == "TIMESTAMP":
        return f"TIMESTAMP '{value.astimezone(dt.UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    if column.ddl.startswith("DECIMAL"):
        return f"CAST('{value}' AS {column.ddl})"
    return f"CAST({int(value)} AS {column.ddl})"


def select_sql(rows: list[dict[str, Any]], columns: tuple[Column, ...]) -> str:
    """A SELECT producing ``rows`` with exactly the columns' types."""
    names = ", ".join(f"`{c.name}`" for c in columns)
    if not rows:
        nulls = ", ".join(f"{sql_literal(None, c)} AS `{c.name}`" for c in columns)
        return f"SELECT {nulls} WHERE 1 = 0"
    values = ", ".join("(" + ", ".join(sql_literal(row[c.name], c) for c in columns) + ")" for row in rows)
    return f"SELECT /*+ COALESCE(1) */ * FROM VALUES {values} AS s({names})"  # one file, as deltaplane


def arrow_table(rows: list[dict[str, Any]], columns: tuple[Column, ...]) -> pa.Table:
    schema = pa.schema([pa.field(c.name, c.arrow) for c in columns])
    return pa.Table.from_pylist(rows, schema=schema)


# --- the operations -----------------------------------------------------------------------------

PREDICATES = (  # Spark SQL; both sides parse the same text. {k}: a small int, {id}: an existing id
    "v > {k}",
    "v IS NULL",
    "part = 'a'",
    "id < {id}",
    "d >= 5",
    "ts < TIMESTAMP '2024-01-02 12:00:00'",
    "part IS NULL OR v < {k}",
    "NOT (v BETWEEN 2 AND 5)",
    None,  # every row
)
ASSIGNMENTS = (
    {"v": "v + 1"},
    {"v": "NULL"},
    {"part": "'c'"},
    {"d": "d + 1"},
    {"ts": "TIMESTAMP '2024-02-01 00:00:00'"},
    {"v": "v * 2", "part": "'b'"},
)
PROPERTIES = (
    ("delta.enableChangeDataFeed", "true"),
    ("delta.enableChangeDataFeed", "false"),
    ("delta.enableDeletionVectors", "true"),
    ("delta.enableDeletionVectors", "false"),
    ("team.owner", "differential"),
    ("delta.enableTypeWidening", "true"),
)


@dataclass
class Rendered:
    """One operation made concrete against the current state: what each side runs, and how the
    runner's model of the table changes when both sides succeed."""

    spark: Callable[[Any, str], Any]
    engine: Callable[[str], Any]
    then: Callable[[], None] = lambda: None
    reread_latest: bool = False  # commits nothing, but changes how the latest version is read
    vacuum: bool = False
    optimize: bool = False  # commits only when there is something to compact (file layouts differ)


@dataclass(frozen=True)
class Create:
    deletion_vectors: bool
    change_data_feed: bool
    partitioned: bool
    name_mapping: bool

    def properties(self) -> dict[str, str]:
        props = {}
        if self.deletion_vectors:
            props["delta.enableDeletionVectors"] = "true"
        if self.change_data_feed:
            props["delta.enableChangeDataFeed"] = "true"
        if self.name_mapping:
            props["delta.columnMapping.mode"] = "name"
        return props

    def render(self, run: Differential) -> Rendered:
        columns = run.columns
        props = self.properties()
        ddl = ", ".join(f"`{c.name}` {c.ddl}" for c in columns)
        sql = f"CREATE TABLE delta.`{{path}}` ({ddl}) USING delta"
        if self.partitioned:
            sql += " PARTITIONED BY (part)"
        if props:
            sql += " TBLPROPERTIES (" + ", ".join(f"'{k}' = '{v}'" for k, v in props.items()) + ")"

        def then():
            run.partitioned = self.partitioned

        return Rendered(
            spark=lambda spark, path: spark.sql(sql.format(path=path)),
            engine=lambda path: DeltaTable.create(
                path,
                pa.schema([pa.field(c.name, c.arrow) for c in columns]),
                partition_by=["part"] if self.partitioned else None,
                properties=props or None,
            ),
            then=then,
        )


def _write(run: Differential, specs: tuple[RowSpec, ...], mode: str) -> Rendered:
    """A plain append or overwrite of new rows, by each side's own write call."""
    rows = run.new_rows(specs)
    columns = run.columns
    return Rendered(
        spark=lambda spark, path: spark.write(path, [], "", mode=mode, query=select_sql(rows, columns)),
        engine=lambda path: getattr(DeltaTable(path), mode)(arrow_table(rows, columns)),
    )


@dataclass(frozen=True)
class Append:
    rows: tuple[RowSpec, ...]

    def render(self, run: Differential) -> Rendered:
        return _write(run, self.rows, "append")


@dataclass(frozen=True)
class Overwrite:
    rows: tuple[RowSpec, ...]

    def render(self, run: Differential) -> Rendered:
        return _write(run, self.rows, "overwrite")


@dataclass(frozen=True)
class ReplaceWhere:
    """replaceWhere with rows that all match the predicate: ``part = '<p>'`` (partition column
    when the table is partitioned) or ``id >= <an existing id>`` (a data column)."""

    on_part: bool
    sql: bool  # INSERT ... REPLACE WHERE, else the DataFrame option
    k: int
    rows: tuple[RowSpec, ...]

    def render(self, run: Differential) -> Rendered:
        columns = run.columns
        if self.on_part:
            part = PARTS[self.k % 2]  # 'a' or 'b': never NULL (`part = NULL` matches nothing)
            rows = [dict(r, part=part) for r in run.new_rows(self.rows)]
            predicate = f"part = '{part}'"
        else:
            ids = run.current_ids()
            predicate = f"id >= {ids[self.k % len(ids)] if ids else run.next_id}"
            rows = run.new_rows(self.rows)  # fresh ids: above every existing one
        query = select_sql(rows, columns)
        if self.sql:

            def spark_side(spark, path):
                spark.sql(f"INSERT INTO delta.`{path}` REPLACE WHERE {predicate} {query}")
        else:

            def spark_side(spark, path):
                spark.write(path, [], "", mode="overwrite", options={"replaceWhere": predicate}, query=query)

        return Rendered(
            spark=spark_side,
            engine=lambda path: DeltaTable(path).overwrite(arrow_table(rows, columns), predicate=predicate),
        )


def _predicate(run: Differential, index: int, k: int) -> str | None:
    template = PREDICATES[index % len(PREDICATES)]
    if template is None:
        return None
    ids = run.current_ids()
    return template.format(k=k, id=(ids[k % len(ids)] if ids else 0))


@dataclass(frozen=True)
class Delete:
    predicate: int
    k: int

    def render(self, run: Differential) -> Rendered:
        predicate = _predicate(run, self.predicate, self.k)
        where = f" WHERE {predicate}" if predicate else ""
        return Rendered(
            spark=lambda spark, path: spark.sql(f"DELETE FROM delta.`{path}`{where}"),
            engine=lambda path: DeltaTable(path).delete(predicate),
        )


@dataclass(frozen=True)
class Update:
    assignments: int
    predicate: int
    k: int

    def render(self, run: Differential) -> Rendered:
        predicate = _predicate(run, self.predicate, self.k)
        updates = ASSIGNMENTS[self.assignments % len(ASSIGNMENTS)]
        where = f" WHERE {predicate}" if predicate else ""
        sets = ", ".join(f"{name} = {expr}" for name, expr in updates.items())
        return Rendered(
            spark=lambda spark, path: spark.sql(f"UPDATE delta.`{path}` SET {sets}{where}"),
            engine=lambda path: DeltaTable(path).update(dict(updates), predicate),
        )


MERGE_KINDS = ("upsert", "matched_delete", "not_matched_by_source_delete")


@dataclass(frozen=True)
class Merge:
    """``kind``: upsert (update all matched, insert all new), matched delete, or not-matched-by-
    source delete (with ``conditional``: only ``t.v > 2``; plus a matched update of ``v``). The
    source holds the existing ids at positions ``rem`` mod ``mod`` and, for upserts and deletes,
    ``rows`` with new ids."""

    kind: str
    mod: int
    rem: int
    conditional: bool
    rows: tuple[RowSpec, ...]

    def render(self, run: Differential) -> Rendered:
        columns = run.columns
        chosen = [i for n, i in enumerate(run.current_ids()) if n % self.mod == self.rem % self.mod]
        specs = self.rows or (RowSpec(0, 1, 100, 1),)
        source = [specs[n % len(specs)].values(i, columns) for n, i in enumerate(chosen)]
        if self.kind != "not_matched_by_source_delete":
            source += run.new_rows(self.rows)
        query = select_sql(source, columns)
        head = f"MERGE INTO delta.`{{path}}` AS t USING ({query}) AS s ON t.id = s.id"

        def engine_side(path):
            builder = DeltaTable(path).merge(
                arrow_table(source, columns), "t.id = s.id", source_alias="s", target_alias="t"
            )
            if self.kind == "upsert":
                builder = builder.when_matched_update_all().when_not_matched_insert_all()
            elif self.kind == "matched_delete":
                builder = builder.when_matched_delete("t.v > 2" if self.conditional else None)
            else:
                builder = builder.when_matched_update({"v": "s.v"}).when_not_matched_by_source_delete(
                    "t.v > 2" if self.conditional else None
                )
            return builder.execute()

        if self.kind == "upsert":
            clauses = " WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        elif self.kind == "matched_delete":
            clauses = f" WHEN MATCHED{' AND t.v > 2' if self.conditional else ''} THEN DELETE"
        else:
            clauses = (
                " WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED BY SOURCE"
                f"{' AND t.v > 2' if self.conditional else ''} THEN DELETE"
            )
        return Rendered(
            spark=lambda spark, path: spark.sql(head.format(path=path) + clauses),
            engine=engine_side,
        )


@dataclass(frozen=True)
class Optimize:
    zorder: bool

    def render(self, run: Differential) -> Rendered:
        if self.zorder:
            return Rendered(
                spark=lambda spark, path: spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY (v, id)"),
                engine=lambda path: DeltaTable(path).optimize(zorder_by=["v", "id"]),
                optimize=True,
            )
        return Rendered(
            spark=lambda spark, path: spark.sql(f"OPTIMIZE delta.`{path}`"),
            engine=lambda path: DeltaTable(path).optimize(),
            optimize=True,
        )


@dataclass(frozen=True)
class Vacuum:
    def render(self, run: Differential) -> Rendered:
        return Rendered(
            spark=lambda spark, path: spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS"),
            engine=lambda path: DeltaTable(path).vacuum(0, dry_run=False, enforce_retention=False),
            vacuum=True,
        )


@dataclass(frozen=True)
class Checkpoint:
    def render(self, run: Differential) -> Rendered:
        return Rendered(
            spark=lambda spark, path: spark.checkpoint(path),
            engine=lambda path: DeltaTable(path).checkpoint(),
            reread_latest=True,
        )


@dataclass(frozen=True)
class Restore:
    back: int  # how many steps back (0: the current version)

    def render(self, run: Differential) -> Rendered:
        target = run.version_steps_back(self.back)
        return Rendered(
            spark=lambda spark, path: spark.sql(
                f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {target[SPARK]}"
            ),
            engine=lambda path: DeltaTable(path).restore(target[ENGINE]),
            then=lambda: run.restored(target),
        )


@dataclass(frozen=True)
class EvolveAppend:
    """Append rows with one more column: ``schema_mode="merge"`` / the ``mergeSchema`` option."""

    integer: bool
    rows: tuple[RowSpec, ...]

    def render(self, run: Differential) -> Rendered:
        column = run.new_column(self.integer)
        columns = (*run.columns, column)
        rows = run.new_rows(self.rows, columns)

        def then():
            run.columns = columns

        return Rendered(
            spark=lambda spark, path: spark.write(
                path, [], "", mode="append", options={"mergeSchema": "true"}, query=select_sql(rows, columns)
            ),
            engine=lambda path: DeltaTable(path).append(arrow_table(rows, columns), schema_mode="merge"),
            then=then,
        )


@dataclass(frozen=True)
class AddColumn:
    integer: bool

    def render(self, run: Differential) -> Rendered:
        column = run.new_column(self.integer)

        def then():
            run.columns = (*run.columns, column)

        return Rendered(
            spark=lambda spark, path: spark.sql(
                f"ALTER TABLE delta.`{path}` ADD COLUMNS (`{column.name}` {column.ddl})"
            ),
            engine=lambda path: DeltaTable(path).alter.add_columns([pa.field(column.name, column.arrow)]),
            then=then,
        )


def _evolved(run: Differential, which: int, ddl: str | None = None) -> Column | None:
    """The ``which``-th column added by the sequence (of type ``ddl``), or None."""
    candidates = [c for c in run.columns[len(BASE_COLUMNS) :] if ddl is None or c.ddl == ddl]
    return candidates[which % len(candidates)] if candidates else None


def _alter_evolved(
    run: Differential, column: Column | None, clause: str, engine, after: Column | None
) -> Rendered:
    """``ALTER TABLE <path> <clause>`` by Delta Spark and ``engine(path)`` by deltaplane, on
    ``column`` (one the sequence added; None when there is none, and both refuse). Once both
    have run, the column is ``after`` (None: gone)."""

    def then():
        if after is not None:
            run.known[after.name] = after
        kept = [c for c in run.columns if c is not column or after is not None]
        run.columns = tuple(after if c is column else c for c in kept)

    return Rendered(
        spark=lambda spark, path: spark.sql(f"ALTER TABLE delta.`{path}` {clause}"),
        engine=engine,
        then=then if column else (lambda: None),
    )


@dataclass(frozen=True)
class RenameColumn:
    """``RENAME COLUMN`` of a column the sequence added (column mapping; both refuse without)."""

    which: int

    def render(self, run: Differential) -> Rendered:
        column = _evolved(run, self.which)
        old = column.name if column else "missing"
        new = Column(f"{old}r", column.ddl, column.arrow) if column else None
        return _alter_evolved(
            run,
            column,
            f"RENAME COLUMN `{old}` TO `{old}r`",
            engine=lambda path: DeltaTable(path).alter.rename_column(old, f"{old}r"),
            after=new,
        )


@dataclass(frozen=True)
class DropColumn:
    """``DROP COLUMN`` of a column the sequence added (column mapping; both refuse without)."""

    which: int

    def render(self, run: Differential) -> Rendered:
        column = _evolved(run, self.which)
        name = column.name if column else "missing"
        return _alter_evolved(
            run,
            column,
            f"DROP COLUMN `{name}`",
            engine=lambda path: DeltaTable(path).alter.drop_columns([name]),
            after=None,
        )


@dataclass(frozen=True)
class WidenColumn:
    """``ALTER COLUMN ... TYPE BIGINT`` of an INT column the sequence added (type widening; both
    refuse while ``delta.enableTypeWidening`` is off)."""

    which: int

    def render(self, run: Differential) -> Rendered:
        column = _evolved(run, self.which, "INT")
        name = column.name if column else "missing"
        return _alter_evolved(
            run,
            column,
            f"ALTER COLUMN `{name}` TYPE BIGINT",
            engine=lambda path: DeltaTable(path).alter.change_column_type(name, "bigint"),
            after=Column(name, "BIGINT", pa.int64()),
        )


@dataclass(frozen=True)
class SetProperty:
    which: int

    def render(self, run: Differential) -> Rendered:
        key, value = PROPERTIES[self.which % len(PROPERTIES)]
        return Rendered(
            spark=lambda spark, path: spark.sql(
                f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{key}' = '{value}')"
            ),
            engine=lambda path: DeltaTable(path).alter.set_table_properties({key: value}),
        )


DROPPABLE = ("deletionVectors", "typeWidening", "columnMapping", "changeDataFeed", "v2Checkpoint")


@dataclass(frozen=True)
class DropFeature:
    """``ALTER TABLE ... DROP FEATURE`` of one of ``DROPPABLE`` (both refuse a feature the table
    lacks or that cannot be dropped, such as changeDataFeed)."""

    which: int

    def render(self, run: Differential) -> Rendered:
        feature = DROPPABLE[self.which % len(DROPPABLE)]
        return Rendered(
            spark=lambda spark, path: spark.sql(f"ALTER TABLE delta.`{path}` DROP FEATURE {feature}"),
            engine=lambda path: DeltaTable(path).alter.drop_feature(feature),
        )


# --- the runner ---------------------------------------------------------------------------------


@dataclass
class Failed:
    """A read or an operation that raised: equal to any other failure (both sides refused)."""

    error: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Failed)

    def __hash__(self) -> int:
        return 0


@dataclass
class Step:
    op: Any
    versions: dict[str, list[int]]
    errors: dict[str, str | None]
    compactable: dict[str, bool] | None = None  # OPTIMIZE: did each copy have work to do


class Mismatch(AssertionError):
    pass


@dataclass
class Differential:
    spark: Any  # the DeltaSpark client
    root: Path
    columns: tuple[Column, ...] = BASE_COLUMNS
    partitioned: bool = False
    next_id: int = 1
    steps: list[Step] = field(default_factory=list)
    oldest_readable: dict[str, int] = field(default_factory=lambda: {SPARK: 0, ENGINE: 0})
    findings: list[str] = field(default_factory=list)
    known: dict[str, Column] = field(default_factory=lambda: {c.name: c for c in BASE_COLUMNS})

    def path(self, side: str) -> str:
        return str(self.root / side)

    # model helpers used by the operations ---------------------------------------------------

    def new_rows(self, specs, columns: tuple[Column, ...] | None = None) -> list[dict[str, Any]]:
        columns = columns or self.columns
        rows = []
        for spec in specs:
            rows.append(spec.values(self.next_id, columns))
            self.next_id += 1
        return rows

    def new_column(self, integer: bool) -> Column:
        name = f"x{len(self.known) - len(BASE_COLUMNS) + 1}"
        column = Column(name, "INT", pa.int32()) if integer else Column(name, "STRING", pa.string())
        self.known[name] = column
        return column

    def current_ids(self) -> list[int]:
        """The ids in the reference copy now (Delta Spark's table as Delta Spark reads it would do
        too, but this is only choosing parameters: deltaplane reading the Spark copy is quicker;
        the checks compare it with Spark's own read every step)."""
        try:
            table = DeltaTable(self.path(SPARK)).to_arrow(columns=["id"])
        except Exception:
            return []
        return sorted(i for i in table.column("id").to_pylist() if i is not None)

    def latest(self, side: str) -> int:
        try:
            return DeltaTable(self.path(side)).version
        except Exception:
            return -1

    def version_after(self, step_index: int) -> dict[str, int]:
        """Each copy's version at the end of step ``step_index``."""
        out = {}
        for side in SIDES:
            versions = [v for s in self.steps[: step_index + 1] for v in s.versions[side]]
            out[side] = max(versions) if versions else -1
        return out

    def version_steps_back(self, back: int) -> dict[str, int]:
        index = max(0, len(self.steps) - 1 - back)
        return self.version_after(index)

    def restored(self, target: dict[str, int]) -> None:
        self.columns = self.columns_at(target)

    def columns_at(self, versions: dict[str, int]) -> tuple[Column, ...]:
        """The model's columns at those versions, with the types they had then (a column widened
        since is narrower there)."""
        schema = DeltaTable(self.path(SPARK), version=versions[SPARK]).schema
        out = []
        for f in schema:
            column = self.known[f.name]
            if column.ddl in ("INT", "BIGINT"):
                column = (
                    Column(f.name, "BIGINT", pa.int64())
                    if f.type == pa.int64()
                    else Column(f.name, "INT", pa.int32())
                )
            out.append(column)
        return tuple(out)

    # running --------------------------------------------------------------------------------

    def apply(self, op) -> Step:
        started = time.monotonic()
        rendered = op.render(self)
        before = {side: self.latest(side) for side in SIDES}
        work = {side: self.something_to_compact(side) for side in SIDES} if rendered.optimize else None
        errors: dict[str, str | None] = {SPARK: None, ENGINE: None}
        try:
            rendered.spark(self.spark, self.path(SPARK))
        except DeltaSparkError as error:
            errors[SPARK] = f"{error.error_class}: {error.message[:300]}"
        try:
            rendered.engine(self.path(ENGINE))
        except Exception as error:  # any refusal; compared with Spark's below
            errors[ENGINE] = f"{type(error).__name__}: {str(error)[:300]}"
        versions = {side: list(range(before[side] + 1, self.latest(side) + 1)) for side in SIDES}
        step = Step(op, versions, errors, work)
        self.steps.append(step)
        if errors[SPARK] is None and errors[ENGINE] is None:
            if rendered.vacuum:
                self.oldest_readable = dict(before)
            rendered.then()
        self.check_step(step, reread_latest=rendered.reread_latest)
        if TRACE:
            print(
                f"[differential] step {len(self.steps) - 1} {time.monotonic() - started:.1f}s {op!r}"
                f" {step.versions} {step.errors}",
                file=sys.stderr,
            )
        return step

    def mismatch(self, text: str) -> None:
        self.findings.append(f"step {len(self.steps) - 1} {self.steps[-1].op!r}: {text}")

    def raise_findings(self) -> None:
        if self.findings:
            history = "\n".join(
                f"  {n}: {s.op!r} versions={s.versions} errors={s.errors}" for n, s in enumerate(self.steps)
            )
            raise Mismatch("\n".join(self.findings) + "\nsteps:\n" + history)

    def version_pairs(self) -> list[tuple[int, int]]:
        """(Spark copy's version, deltaplane copy's version) for every commit both made; when a step
        made a different number of commits, its last versions are paired."""
        pairs = []
        for step in self.steps:
            s, e = step.versions[SPARK], step.versions[ENGINE]
            if len(s) == len(e):
                pairs += list(zip(s, e, strict=True))
            elif s and e:
                pairs.append((s[-1], e[-1]))
        return pairs

    def check_step(self, step: Step, *, reread_latest: bool = False) -> None:
        if (step.errors[SPARK] is None) != (step.errors[ENGINE] is None):
            self.mismatch(
                f"outcome differs: Delta Spark {step.errors[SPARK] or 'succeeded'}; "
                f"deltaplane {step.errors[ENGINE] or 'succeeded'}"
            )
        s, e = step.versions[SPARK], step.versions[ENGINE]
        if len(s) != len(e) and step.compactable is not None:
            # Files are laid out differently (Delta Spark writes a file per task): OPTIMIZE
            # commits on the side that has small files to compact, and only there.
            for side in SIDES:
                if bool(step.versions[side]) != step.compactable[side]:
                    self.mismatch(
                        f"OPTIMIZE on the {side} copy committed {step.versions[side]} with "
                        f"{'' if step.compactable[side] else 'no '}small files to compact"
                    )
        elif len(s) != len(e) and not (isinstance(step.op, Vacuum) and not e and self.vacuum_commits(s)):
            # A VACUUM with nothing to delete commits nothing here (as delta-rs; Delta Spark still
            # records VACUUM START/END: a documented departure, docs/architecture.md), and the
            # copies' files differ (Delta Spark rewrites where deltaplane writes a deletion vector):
            # whether a file was left to delete is each copy's own.
            self.mismatch(f"Delta Spark committed {s}, deltaplane committed {e}")
        ops = {side: [self.operation(side, v) for v in step.versions[side]] for side in SIDES}
        if len(s) == len(e) and ops[SPARK] != ops[ENGINE]:
            self.mismatch(f"operations differ: Delta Spark {ops[SPARK]}, deltaplane {ops[ENGINE]}")
        if s and e:
            self.compare_rows(s[-1], e[-1])
            if len(s) == len(e):
                self.compare_changes(s, e)
        if reread_latest:
            self.compare_rows(self.latest(SPARK), self.latest(ENGINE))
        self.reread_all(spark_reads=False)  # every earlier version, deltaplane's reads (quick)
        self.raise_findings()

    def vacuum_commits(self, versions: list[int]) -> bool:
        """Whether Delta Spark's commits are one VACUUM START and one VACUUM END."""
        return [self.operation(SPARK, v) for v in versions] == ["VACUUM START", "VACUUM END"]

    def something_to_compact(self, side: str) -> bool:
        """Whether bin-packing has work in this copy: a partition with two files or more, or a
        file with deleted rows (all files here are far below any target size)."""
        try:
            files = DeltaTable(self.path(side)).get_add_actions(flatten=True).to_pylist()
        except Exception:
            return False
        partitions = Counter(tuple(v for k, v in f.items() if k.startswith("partition.")) for f in files)
        return any(n > 1 for n in partitions.values()) or any(f["num_deleted_records"] for f in files)

    def operation(self, side: str, version: int) -> str | None:
        for entry in DeltaTable(self.path(side), version=version).history(limit=1):
            return entry.get("operation")
        return None

    def read_spark(self, side: str, version: int) -> Any:
        try:
            return sorted_rows(self.spark.rows(self.path(side), version=version))
        except DeltaSparkError as error:
            return Failed(f"{error.error_class}: {error.message[:300]}")

    def read_engine(self, side: str, version: int) -> Any:
        try:
            return sorted_rows(arrow_rows(DeltaTable(self.path(side), version=version).to_arrow()))
        except Exception as error:
            return Failed(f"{type(error).__name__}: {str(error)[:300]}")

    def read_spark_both(self, s: int, e: int) -> tuple[Any, Any]:
        """Delta Spark reads both copies in one statement (a UNION ALL of the model's columns;
        one statement instead of two matters at a second each), or one by one if that fails."""
        names = ", ".join(f"`{c.name}`" for c in self.columns)
        query = " UNION ALL ".join(
            f"SELECT '{side}' AS `__side`, {names} FROM delta.`{self.path(side)}` VERSION AS OF {v}"
            for side, v in ((SPARK, s), (ENGINE, e))
        )
        try:
            rows = self.spark.sql(query)
        except DeltaSparkError:
            return self.read_spark(SPARK, s), self.read_spark(ENGINE, e)
        split = {SPARK: [], ENGINE: []}
        for row in rows:
            split[row.pop("__side")].append(row)
        return sorted_rows(split[SPARK]), sorted_rows(split[ENGINE])

    def compare_rows(self, s: int, e: int, *, spark_reads: bool = True) -> None:
        spark_spark, spark_engine = self.read_spark_both(s, e) if spark_reads else (None, None)
        reads = {
            "Delta Spark reads its copy": spark_spark,
            "deltaplane reads its copy": self.read_engine(ENGINE, e),
            "Delta Spark reads deltaplane's copy": spark_engine,
            "deltaplane reads Delta Spark's copy": self.read_engine(SPARK, s),
        }
        reads = {k: v for k, v in reads.items() if v is not None}
        reference = reads.get("Delta Spark reads its copy", reads["deltaplane reads Delta Spark's copy"])
        for name, rows in reads.items():
            if rows != reference:
                self.mismatch(
                    f"rows at Spark v{s} / deltaplane v{e}: {name} differs from the reference:\n"
                    f"    reference: {_short(reference)}\n    {name}: {_short(rows)}"
                )

    def reread_all(self, *, spark_reads: bool = True) -> None:
        for s, e in self.version_pairs():
            if s >= self.oldest_readable[SPARK] and e >= self.oldest_readable[ENGINE]:
                self.compare_rows(s, e, spark_reads=spark_reads)

    def cdf_enabled(self, side: str, version: int) -> bool:
        config = DeltaTable(self.path(side), version=version).metadata.configuration
        return config.get("delta.enableChangeDataFeed", "false").lower() == "true"

    def compare_changes(self, s: list[int], e: list[int]) -> None:
        if not all(self.cdf_enabled(SPARK, v) for v in s) or not all(self.cdf_enabled(ENGINE, v) for v in e):
            return
        first = {SPARK: s[0], ENGINE: e[0]}
        last = {SPARK: s[-1], ENGINE: e[-1]}

        def spark_read(side):
            try:
                rows = self.spark.sql(
                    f"SELECT * FROM table_changes_by_path('{self.path(side)}', {first[side]}, {last[side]})"
                )
            except DeltaSparkError as error:
                return Failed(f"{error.error_class}: {error.message[:300]}")
            return _changes(rows, first[side])

        def engine_read(side):
            try:
                table = DeltaTable(self.path(side)).changes(first[side], last[side])
            except Exception as error:
                return Failed(f"{type(error).__name__}: {str(error)[:300]}")
            return _changes(arrow_rows(table), first[side])

        def spark_reads_both():  # one statement for both copies; one by one if that fails
            names = ", ".join(f"`{c.name}`" for c in self.columns)
            query = " UNION ALL ".join(
                f"SELECT '{side}' AS `__side`, {names}, `_change_type`, `_commit_version` FROM "
                f"table_changes_by_path('{self.path(side)}', {first[side]}, {last[side]})"
                for side in SIDES
            )
            try:
                rows = self.spark.sql(query)
            except DeltaSparkError:
                return spark_read(SPARK), spark_read(ENGINE)
            split = {SPARK: [], ENGINE: []}
            for row in rows:
                split[row.pop("__side")].append(row)
            return _changes(split[SPARK], first[SPARK]), _changes(split[ENGINE], first[ENGINE])

        spark_spark, spark_engine = spark_reads_both()
        reads = {
            "Delta Spark reads its copy": spark_spark,
            "deltaplane reads its copy": engine_read(ENGINE),
            "Delta Spark reads deltaplane's copy": spark_engine,
            "deltaplane reads Delta Spark's copy": engine_read(SPARK),
        }
        reference = reads["Delta Spark reads its copy"]
        for name, rows in reads.items():
            if rows != reference:
                self.mismatch(
                    f"change data feed of Spark v{s} / deltaplane v{e}: {name} differs:\n"
                    f"    reference: {_short(reference)}\n    {name}: {_short(rows)}"
                )

    def finish(self) -> None:
        """Delta Spark's DESCRIBE HISTORY of both copies (operation names by mapped version).
        (Every version was read four ways when it was made, and versions do not change.)"""
        histories = {}
        for side in SIDES:
            try:
                rows = self.spark.sql(f"DESCRIBE HISTORY delta.`{self.path(side)}`")
            except DeltaSparkError as error:
                self.findings.append(f"DESCRIBE HISTORY of the {side} copy failed: {error}")
                continue
            histories[side] = {r["version"]: r["operation"] for r in rows}
        if len(histories) == 2:
            for s, e in self.version_pairs():
                if histories[SPARK].get(s) != histories[ENGINE].get(e):
                    self.findings.append(
                        f"DESCRIBE HISTORY: Spark v{s} is {histories[SPARK].get(s)!r}, "
                        f"deltaplane v{e} is {histories[ENGINE].get(e)!r}"
                    )
        self.raise_findings()


def _changes(rows: list[dict[str, Any]], first: int) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        row = dict(row)
        row.pop("_commit_timestamp", None)
        row["_commit_version"] = row["_commit_version"] - first  # the step's n-th commit
        out.append(row)
    return sorted_rows(out)


def _short(value: Any, limit: int = 1500) -> str:
    text = value.error if isinstance(value, Failed) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."
