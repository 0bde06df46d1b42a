"""Row-level changes: deltaplane with deletion vectors vs deltaplane copy-on-write vs delta-rs.

Data: ``--rows`` (10M) rows x 8 columns (int ids, string user ids, timestamps, doubles, ints, a
low-cardinality string, a 30-character string, a boolean) in 10 files, each engine writing its own
table with ten appends. Each operation runs on a fresh copy of that table:

* delete 0.01% of rows spread over all files (``id % 10000 = 7``),
* update 0.1% (``amount = amount + 1 WHERE id % 1000 = 7``),
* merge 1% upserts (half the source ids exist, half are new).

Also: the physical floor of a delete (pyarrow reading just the predicate column of every file),
and a full scan of the DV table before and after its delete.

    python benchmarks/dml.py [--rows 10000000]

Prints a table and writes ``benchmarks/results/dml.json``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_file import command_line, write_results  # noqa: E402 (the repository root goes on the path first)

FILES = 10
DELETE = "id % 10000 = 7"
UPDATE_WHERE = "id % 1000 = 7"


def note_column(n: int, rng: np.random.Generator) -> pa.Array:
    """Random 30-character strings: 'n' and 29 random digits, built as one byte buffer."""
    chars = rng.integers(ord("0"), ord("9") + 1, (n, 30), dtype=np.uint8)
    chars[:, 0] = ord("n")
    fixed = pa.array(chars.reshape(-1).view("S30"), pa.binary(30))
    return fixed.cast(pa.binary()).cast(pa.string())


def batch(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    categories = np.array(
        ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    )
    return pa.table(
        {
            "id": ids,
            "user_id": pa.array(np.char.add("user", (ids % 1_000_003).astype(str))),
            "ts": pa.array(1_700_000_000_000_000 + ids * 1000, pa.timestamp("us", tz="UTC")),
            "amount": rng.normal(100, 25, n),
            "qty": rng.integers(0, 1000, n, dtype=np.int32),
            "category": pa.array(categories[ids % 10]),
            "note": note_column(n, rng),
            "flag": ids % 3 == 0,
        }
    )


def build(path: Path, engine: str, rows: int, properties: dict | None = None) -> None:
    rng = np.random.default_rng(11)
    per_file = rows // FILES
    if engine == "deltalake":
        from deltalake import write_deltalake

        for f in range(FILES):
            write_deltalake(str(path), batch(f * per_file, per_file, rng), mode="append")
        return
    from deltaplane.engine import DeltaTable

    first = batch(0, per_file, rng)
    table = DeltaTable.create(str(path), first.schema, properties=properties or {})
    table.append(first, target_file_size=1 << 40)
    for f in range(1, FILES):
        table.append(batch(f * per_file, per_file, rng), target_file_size=1 << 40)


def source_rows(rows: int) -> pa.Table:
    """1% of the table: half existing ids (updated), half new ids (inserted)."""
    n = rows // 100
    existing = np.arange(0, rows, rows // (n // 2), dtype=np.int64)[: n // 2]
    new = np.arange(rows, rows + n // 2, dtype=np.int64)
    ids = np.concatenate([existing, new])
    table = batch(0, len(ids), np.random.default_rng(5))
    return table.set_column(0, "id", pa.array(ids))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_ours(path: Path, op: str, strategy: str, source: pa.Table) -> float:
    from deltaplane.engine import DeltaTable

    table = DeltaTable(str(path))
    if op == "delete":
        return timed(lambda: table.delete(DELETE, strategy=strategy))
    if op == "update":
        return timed(lambda: table.update({"amount": "amount + 1"}, UPDATE_WHERE, strategy=strategy))
    return timed(
        lambda: (
            table.merge(source, "t.id = s.id", source_alias="s", target_alias="t", strategy=strategy)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
    )


def run_delta_rs(path: Path, op: str, source: pa.Table) -> float:
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    if op == "delete":
        return timed(lambda: table.delete(DELETE))
    if op == "update":
        return timed(lambda: table.update(updates={"amount": "amount + 1"}, predicate=UPDATE_WHERE))
    return timed(
        lambda: (
            table.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
    )


def row_count(path: Path, engine: str) -> int:
    """Rows in the table after the operation (each engine reading its own table)."""
    if engine == "deltalake":
        from deltalake import DeltaTable

        return DeltaTable(str(path)).to_pyarrow_table(columns=["id"]).num_rows
    from deltaplane.engine import DeltaTable

    return DeltaTable(str(path)).to_arrow(columns=["id"]).num_rows


def predicate_floor(path: Path) -> float:
    files = sorted(path.glob("*.parquet"))
    return timed(lambda: [pq.read_table(f, columns=["id"]) for f in files])


def full_scan(path: Path) -> float:
    from deltaplane.engine import DeltaTable

    table = DeltaTable(str(path))
    best = min(timed(lambda: table.to_arrow()) for _ in range(2))
    return best


def main(argv: list[str] | None = None) -> None:
    parser = command_line(__doc__, "dml")
    parser.add_argument("--rows", type=int, default=10_000_000)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="deltaplane-dml-bench-"))
    results: dict = {"rows": args.rows}
    try:
        bases = {
            "deltaplane_dv": (work / "base-dv", "deltaplane", {"delta.enableDeletionVectors": "true"}),
            "deltaplane_cow": (work / "base-cow", "deltaplane", {}),
            "deltalake": (work / "base-rs", "deltalake", None),
        }
        for path, engine, props in bases.values():
            build(path, engine, args.rows, props)
        parquet_mb = sum(f.stat().st_size for f in (work / "base-dv").glob("*.parquet")) / 2**20
        results["parquet_mb"] = parquet_mb
        print(f"built 3 tables of {args.rows:,} rows ({parquet_mb:.0f} MiB of Parquet each)", file=sys.stderr)
        source = source_rows(args.rows)
        results["delete_floor_s"] = min(predicate_floor(work / "base-dv") for _ in range(2))
        for op in ("delete", "update", "merge"):
            results[op] = {}
            for name, (base, engine, _) in bases.items():
                copy = work / f"{op}-{name}"
                shutil.copytree(base, copy)
                if engine == "deltalake":
                    seconds = run_delta_rs(copy, op, source)
                else:
                    strategy = "deletion_vectors" if name.endswith("_dv") else "copy_on_write"
                    seconds = run_ours(copy, op, strategy, source)
                results[op][name] = seconds
                results[op].setdefault("rows_after", {})[name] = row_count(copy, engine)
                if op == "delete" and name == "deltaplane_dv":
                    results["scan_before_s"] = full_scan(base)
                    results["scan_after_dv_delete_s"] = full_scan(copy)
                shutil.rmtree(copy)
            results[op]["dv_speedup_vs_deltalake"] = results[op]["deltalake"] / results[op]["deltaplane_dv"]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.rows:,} rows x 8 columns in {FILES} files ({results['parquet_mb']:.0f} MiB)")
    print(f"{'operation':<10}{'deltaplane DV':>15}{'deltaplane CoW':>16}{'delta-rs':>10}{'DV speed-up':>13}")
    for op in ("delete", "update", "merge"):
        r = results[op]
        print(
            f"{op:<10}{r['deltaplane_dv']:>14.2f}s{r['deltaplane_cow']:>15.2f}s{r['deltalake']:>9.2f}s"
            f"{r['dv_speedup_vs_deltalake']:>12.1f}x"
        )
    print(f"delete floor (pyarrow reads the id column of every file): {results['delete_floor_s']:.2f}s")
    ratio = results["scan_after_dv_delete_s"] / results["scan_before_s"]
    print(
        f"full scan: {results['scan_before_s']:.2f}s before, "
        f"{results['scan_after_dv_delete_s']:.2f}s after the DV delete ({ratio:.2f}x)"
    )
    results["scan_ratio"] = ratio
    write_results(args.out, results)


if __name__ == "__main__":
    main()
