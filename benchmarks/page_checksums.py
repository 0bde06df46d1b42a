"""What Parquet page checksums cost: writing them and verifying them, next to delta-rs.

deltaplane writes a CRC for every Parquet page and verifies them on every read (bit rot becomes
an error instead of wrong rows). This measures the price on the bulk data of
``write_commit.py`` (about 1 GiB of poorly compressible Arrow into zstd Parquet):

1. write: the same batches through pyarrow with and without page checksums (the isolated cost),
   deltaplane's append (checksums on, as shipped) and delta-rs's ``write_deltalake``;
2. scan: the files deltaplane wrote read by pyarrow with and without verification (the isolated
   cost), a full ``to_arrow()`` by deltaplane (verifying) and ``to_pyarrow_table()`` by delta-rs
   (which does not verify) of the same table.

Best of ``--repeat`` runs, all in this process, same data, same run.

    python benchmarks/page_checksums.py [--gb 1.0] [--repeat 3]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_file import command_line  # noqa: E402 (the repository root goes on the path first)
from benchmarks.write_commit import bulk_batches  # noqa: E402


def _pyarrow_write(path: Path, batches: list[pa.RecordBatch], checksum: bool) -> int:
    """The batches into zstd Parquet files of about 128 MB, as deltaplane's writer cuts them."""
    path.mkdir(parents=True, exist_ok=True)
    schema = batches[0].schema
    written, index, pending = 0, 0, []
    writer = sink = None
    for i, batch in enumerate(batches):
        pending.append(batch)
        last = i == len(batches) - 1
        if sum(b.nbytes for b in pending) < 64 << 20 and not last:
            continue
        if writer is None:
            index += 1
            sink = pa.OSFile(str(path / f"part-{index:05d}.parquet"), "wb")
            writer = pq.ParquetWriter(sink, schema, compression="zstd", write_page_checksum=checksum)
        table = pa.Table.from_batches(pending)
        writer.write_table(table, row_group_size=table.num_rows)
        pending = []
        if sink.tell() >= 128 << 20 or last:
            writer.close()
            written += sink.tell()
            sink.close()
            writer = None
    return written


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> dict:
    parser = command_line(__doc__.splitlines()[0], "page_checksums")
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from deltalake import DeltaTable as RsTable
    from deltalake import write_deltalake

    from deltaplane.engine import DeltaTable

    batches = bulk_batches(int(args.gb * (1 << 30)))
    arrow_bytes = sum(b.nbytes for b in batches)
    work = Path(tempfile.mkdtemp(prefix="dp-bench-crc-"))
    try:

        def fresh(name: str) -> Path:
            path = work / name
            shutil.rmtree(path, ignore_errors=True)
            return path

        def reader():
            return pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches))

        write = {
            "pyarrow_no_checksum": _best(lambda: _pyarrow_write(fresh("pa0"), batches, False), args.repeat),
            "pyarrow_checksum": _best(lambda: _pyarrow_write(fresh("pa1"), batches, True), args.repeat),
            "deltaplane": _best(
                lambda: DeltaTable.create(str(fresh("dp")), batches[0].schema).append(reader()), args.repeat
            ),
            "deltalake": _best(
                lambda: write_deltalake(str(fresh("rs")), reader(), mode="append"), args.repeat
            ),
        }
        table_path = work / "dp"
        files = sorted(table_path.glob("*.parquet"))
        rows = DeltaTable(str(table_path)).to_arrow(columns=["id"]).num_rows

        def read_files(verify: bool) -> None:
            for f in files:
                pq.ParquetFile(str(f), page_checksum_verification=verify).read(use_threads=True)

        scan = {
            "pyarrow_no_verify": _best(lambda: read_files(False), args.repeat),
            "pyarrow_verify": _best(lambda: read_files(True), args.repeat),
            "deltaplane": _best(lambda: DeltaTable(str(table_path)).to_arrow(), args.repeat),
            "deltalake": _best(lambda: RsTable(str(table_path)).to_pyarrow_table(), args.repeat),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)

    result = {
        "arrow_bytes": arrow_bytes,
        "rows": rows,
        "files": len(files),
        "write_seconds": write,
        "scan_seconds": scan,
        "write_checksum_cost": write["pyarrow_checksum"] / write["pyarrow_no_checksum"],
        "scan_verify_cost": scan["pyarrow_verify"] / scan["pyarrow_no_verify"],
        "write_ratio_vs_deltalake": write["deltaplane"] / write["deltalake"],
        "scan_ratio_vs_deltalake": scan["deltaplane"] / scan["deltalake"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    gib = arrow_bytes / (1 << 30)
    print(f"{gib:.2f} GiB of Arrow, {rows:,} rows, {len(files)} files; best of {args.repeat}")
    print(f"{'':32}{'write s':>10}{'scan s':>10}")
    for label, w, s in (
        ("pyarrow, no checksums", write["pyarrow_no_checksum"], scan["pyarrow_no_verify"]),
        ("pyarrow, checksums", write["pyarrow_checksum"], scan["pyarrow_verify"]),
        ("deltaplane (checksums)", write["deltaplane"], scan["deltaplane"]),
        ("delta-rs (none)", write["deltalake"], scan["deltalake"]),
    ):
        print(f"{label:32}{w:>10.2f}{s:>10.2f}")
    print(
        f"checksum cost: write {result['write_checksum_cost']:.3f}x, "
        f"verify {result['scan_verify_cost']:.3f}x; "
        f"deltaplane vs delta-rs: write ratio {result['write_ratio_vs_deltalake']:.2f}, "
        f"scan ratio {result['scan_ratio_vs_deltalake']:.2f}"
    )
    return result


if __name__ == "__main__":
    main()
