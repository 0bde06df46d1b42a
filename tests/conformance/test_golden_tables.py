"""The Delta Spark golden-table corpus: our reader must agree with Spark on every table.

One test per table of ``../shared/conformance/golden/MANIFEST.tsv``:
``compare`` tables read equal to Spark's own read (``expected/``) as a multiset,
``must-fail`` tables are refused with a typed ``DeltaError``, ``no-expected`` tables load or are
refused with a typed error (never an untyped crash). The expected rows were produced by Spark,
not by this engine.
"""

from __future__ import annotations

import csv
import datetime as dt

import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import DeltaError
from tests.conftest import CONFORMANCE, conformance_golden
from tests.helpers import assert_same_rows

GOLDEN = CONFORMANCE / "golden"
MANIFEST = GOLDEN / "MANIFEST.tsv"

pytestmark = pytest.mark.conformance


def _entries() -> list:
    if not MANIFEST.exists():
        return [pytest.param(None, id="absent")]  # fails: conformance_golden() says where it looked
    with open(MANIFEST) as f:
        return [pytest.param(row, id=row["name"]) for row in csv.DictReader(f, delimiter="\t")]


def _root(name: str) -> str:
    path = GOLDEN / name / "delta"
    return str(path if path.is_dir() else GOLDEN / name)


# Known, documented defect of the corpus (see conformance/README.md): Spark wrote this expected
# column with a time-zone shift. It is checked separately against the true value below.
KNOWN_DIFFERENCES = {"data-reader-partition-values": ("as_timestamp",)}


@pytest.mark.parametrize("entry", _entries())
def test_golden_table(entry):
    conformance_golden()
    name, kind = entry["name"], entry["kind"]
    root = _root(name)
    if kind == "must-fail":
        with pytest.raises(DeltaError):
            DeltaTable(root).to_arrow()
        return
    if kind == "no-expected":
        try:
            table = DeltaTable(root)
        except DeltaError:
            return  # a typed refusal is acceptable for deliberately incomplete logs
        assert table.version == int(entry["latest_version"])
        if entry["expected_rows"].isdigit():
            assert table.to_arrow().num_rows == int(entry["expected_rows"])
        return
    table = DeltaTable(root)
    assert table.version == int(entry["latest_version"])
    actual = table.to_arrow()
    expected = pq.read_table(GOLDEN / name / "expected")
    ignore = KNOWN_DIFFERENCES.get(name, ())
    assert_same_rows(
        actual,
        expected.cast(actual.schema) if _castable(expected, actual) else expected,
        ignore_columns=ignore,
    )
    if name == "data-reader-partition-values":
        stamps = {v for v in actual.column("as_timestamp").to_pylist() if v is not None}
        assert stamps == {dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=dt.UTC)}


def _castable(expected, actual) -> bool:
    try:
        expected.cast(actual.schema)
        return True
    except Exception:
        return False


def test_canonicalized_paths_cancel():
    """Add and remove spelled differently (file:, file:///, %20) must cancel out."""
    conformance_golden()
    for name in (
        "canonicalized-paths-normal-a",
        "canonicalized-paths-normal-b",
        "canonicalized-paths-special-a",
        "canonicalized-paths-special-b",
    ):
        table = DeltaTable(_root(name))
        assert table.version == 1
        assert table.snapshot.num_files == 0, name
        assert table.snapshot.tombstones.num_rows == 1, name


def test_comparison_detects_a_changed_row():
    """The comparison above must be able to fail: one altered value is caught."""
    import pyarrow as pa

    from tests.helpers import assert_same_rows

    a = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]})
    b = pa.table({"id": [3, 2, 1], "v": ["c", "b", "x"]})
    assert_same_rows(a, pa.table({"id": [3, 1, 2], "v": ["c", "a", "b"]}))
    with pytest.raises(AssertionError):
        assert_same_rows(a, b)
