"""Differential tests: Hypothesis generates sequences of table operations (create with features,
appends, overwrites, replaceWhere, DELETE / UPDATE / MERGE with and without deletion vectors,
OPTIMIZE and Z-order, VACUUM, checkpoints, RESTORE, schema evolution, ALTER: add, rename and
drop columns, widen a type, properties); Delta Spark applies
each sequence to one copy and deltaplane to another, and after every step the two must agree:
outcome, commits and their operation names, rows at every version (each copy read by both
implementations) and the change data feed (operations.py has the runner).

The generated test is derandomized (the same sequences on every run) and small, because Delta
Spark takes about a second per statement; ``DELTAPLANE_DIFF_EXAMPLES=40`` explores more locally.
Each mismatch found became a deterministic regression test below.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.deltaspark.operations import (
    ASSIGNMENTS,
    MERGE_KINDS,
    PREDICATES,
    PROPERTIES,
    AddColumn,
    Append,
    Checkpoint,
    Create,
    Delete,
    Differential,
    DropColumn,
    DropFeature,
    EvolveAppend,
    Merge,
    Optimize,
    Overwrite,
    RenameColumn,
    ReplaceWhere,
    Restore,
    RowSpec,
    SetProperty,
    Update,
    Vacuum,
    WidenColumn,
)

EXAMPLES = int(os.environ.get("DELTAPLANE_DIFF_EXAMPLES", "5"))
RANDOM = os.environ.get("DELTAPLANE_DIFF_RANDOM") == "1"  # new sequences each run (exploring)
SHRINK = os.environ.get("DELTAPLANE_DIFF_SHRINK") == "1"  # shrinking reruns Spark a lot: opt in

row_specs = st.builds(
    RowSpec,
    part=st.integers(0, 2),
    v=st.none() | st.integers(-3, 10),
    cents=st.none() | st.integers(-99_999, 99_999),
    ts=st.integers(0, 4),
)
some_rows = st.lists(row_specs, min_size=1, max_size=5).map(tuple)
maybe_rows = st.lists(row_specs, min_size=0, max_size=4).map(tuple)

creates = st.builds(Create, st.booleans(), st.booleans(), st.booleans(), st.booleans())
operations = st.one_of(  # the first is what Hypothesis's simplest example repeats
    st.builds(
        Merge, st.sampled_from(MERGE_KINDS), st.integers(1, 3), st.integers(0, 2), st.booleans(), maybe_rows
    ),
    st.builds(Append, some_rows),
    st.builds(Overwrite, maybe_rows),
    st.builds(ReplaceWhere, st.booleans(), st.booleans(), st.integers(0, 5), maybe_rows),
    st.builds(Delete, st.integers(0, len(PREDICATES) - 1), st.integers(0, 6)),
    st.builds(
        Update, st.integers(0, len(ASSIGNMENTS) - 1), st.integers(0, len(PREDICATES) - 1), st.integers(0, 6)
    ),
    st.builds(Optimize, st.booleans()),
    st.just(Vacuum()),
    st.just(Checkpoint()),
    st.builds(Restore, st.integers(0, 4)),
    st.builds(EvolveAppend, st.booleans(), some_rows),
    st.builds(AddColumn, st.booleans()),
    st.builds(SetProperty, st.integers(0, len(PROPERTIES) - 1)),
    st.builds(RenameColumn, st.integers(0, 3)),
    st.builds(DropColumn, st.integers(0, 3)),
    st.builds(WidenColumn, st.integers(0, 3)),
    st.builds(DropFeature, st.integers(0, 4)),
)
sequences = st.tuples(creates, some_rows, st.lists(operations, min_size=4, max_size=9))


def run_sequence(delta_spark, create, first_rows, ops) -> Differential:
    with tempfile.TemporaryDirectory(prefix="differential-") as root:
        run = Differential(delta_spark, Path(root))
        run.apply(create)
        run.apply(Append(first_rows))
        for op in ops:
            run.apply(op)
        run.finish()
        return run


@settings(
    max_examples=EXAMPLES,
    derandomize=not RANDOM,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate, *((Phase.shrink,) if SHRINK else ())),
    suppress_health_check=[
        HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large
    ],
)
@given(sequence=sequences)
def test_generated_sequences_agree(delta_spark, sequence):
    create, first_rows, ops = sequence
    run_sequence(delta_spark, create, first_rows, ops)


# --- regressions: each mismatch the generated sequences found, as a fixed sequence ---------------

PLAIN = Create(deletion_vectors=False, change_data_feed=False, partitioned=False, name_mapping=False)
EVERYTHING = Create(deletion_vectors=True, change_data_feed=True, partitioned=True, name_mapping=True)
TWO_ROWS = (RowSpec(part=0, v=1, cents=150, ts=1), RowSpec(part=1, v=None, cents=None, ts=0))


def assert_agree(delta_spark, create, first_rows, ops) -> None:
    """Run a fixed sequence; every difference is a finding."""
    run_sequence(delta_spark, create, first_rows, ops)


# deltaplane used to commit an empty DELETE/UPDATE/MERGE (only commitInfo) when nothing matched;
# Delta Spark commits nothing (OptimisticTransaction.commitIfNeeded: no actions, no commit).
@pytest.mark.parametrize(
    "op",
    [
        Delete(predicate=0, k=100),  # v > 100: no row
        Update(assignments=0, predicate=0, k=100),
        Merge("matched_delete", mod=3, rem=2, conditional=False, rows=()),  # an empty source
    ],
    ids=["delete", "update", "merge"],
)
def test_dml_matching_nothing_commits_nothing(delta_spark, op):
    assert_agree(delta_spark, PLAIN, TWO_ROWS, [op])


THREE_ROWS = (*TWO_ROWS, RowSpec(part=0, v=3, cents=-5, ts=2))


@pytest.mark.parametrize("sql", [False, True], ids=["dataframe-option", "insert-replace-where"])
def test_replace_where_on_a_data_column_feeds_only_replaced_rows(delta_spark, sql):
    cdf = Create(deletion_vectors=False, change_data_feed=True, partitioned=False, name_mapping=False)
    # one file holding ids 1-3; `id >= 2` replaces two of them
    assert_agree(delta_spark, cdf, THREE_ROWS, [ReplaceWhere(on_part=False, sql=sql, k=1, rows=TWO_ROWS)])


def test_renamed_dropped_and_widened_columns_agree(delta_spark):
    """A fixed sequence through the ALTERs a long-lived table needs (the generated ones may not
    reach all of them): columns added, widened, renamed and dropped between writes, a DELETE and
    a RESTORE across them, with deletion vectors, the change feed, partitions and column mapping;
    then type widening, deletion vectors and column mapping dropped (DROP FEATURE) and written on."""
    widening = PROPERTIES.index(("delta.enableTypeWidening", "true"))
    run = run_sequence(
        delta_spark,
        EVERYTHING,
        TWO_ROWS,
        [
            AddColumn(integer=True),  # x1 INT
            EvolveAppend(integer=False, rows=THREE_ROWS),  # x2 STRING
            WidenColumn(0),  # refused by both: type widening is off
            SetProperty(widening),
            WidenColumn(0),  # x1 -> BIGINT
            RenameColumn(1),  # x2 -> x2r
            Append(THREE_ROWS),
            Delete(predicate=0, k=2),
            DropColumn(0),  # x1
            Restore(back=3),
            Append(TWO_ROWS),
            DropFeature(1),  # typeWidening: x1's older files rewritten
            DropFeature(0),  # deletionVectors: purged, then checkpoint protection
            Delete(predicate=0, k=2),  # copy-on-write now
            DropFeature(2),  # columnMapping: every file rewritten under its names
            Append(TWO_ROWS),
        ],
    )
    drops = [step for step in run.steps if isinstance(step.op, DropFeature)]
    assert len(drops) == 3 and all(not any(step.errors.values()) for step in drops), drops
