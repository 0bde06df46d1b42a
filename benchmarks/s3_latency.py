"""S3 as users have it (issue 28): deltaplane against delta-rs on SeaweedFS, on loopback and with
a real object store's round trip.

SeaweedFS (``weed mini``) runs on 127.0.0.1 in a temporary directory. Every case is measured
twice: straight to SeaweedFS (``loopback``: a round trip of about 0.1 ms) and through
``deltaplane.devstack.latency_proxy`` (``rtt``: ``--rtt-ms``, 20, added to every round trip,
half each way, plus one for each new connection's handshake; this kernel has no ``netem``).
Each case times deltaplane and delta-rs alternately, round by round, and reports the median of
``--repeat`` (3) rounds after one untimed round, as ratios (deltaplane / delta-rs; below 1.00x is
faster). Through the proxy the HTTP requests and connections of each call are counted too.

* ``scan``: a full read (every column) of ``--rows`` (1M) rows x 8 columns (``dml.py``'s rows,
  ``id`` ascending) in 100 files written by 100 appends: ``DeltaTable(uri).to_arrow()``
  against delta-rs's ``QueryBuilder`` ``select *``; each opens the table inside its timing.
* ``filter``: the same table, ``id BETWEEN x AND y`` selecting 0.1% (inside one file).
* ``fig4``: the Delta paper's Figure 4 at 1,000 one-file partitions of 100 rows: open the
  table and ``sum(value)``.
* ``append``: append 100,000 rows (one file) to a fresh copy of the ``scan`` table
  (``write_table`` against ``write_deltalake``, mode append).
* ``optimize``: compact a fresh copy of a table of 100 small files (one partition-free bin)
  (``DeltaTable.optimize()`` against ``optimize.compact()``).
* ``open``: open a table of 100,000 files whose log is a checkpoint plus 10 commits (written
  synthetically, as ``snapshot_load.py`` does; no data files) and list its files.

Copies for ``append`` and ``optimize`` are made by server-side copies before each timed call.

    python benchmarks/s3_latency.py [--rtt-ms 20] [--only CASE ...] [--repeat 3] [--quick]

Prints the table; a full run (no ``--quick``, no ``--only``) writes
``benchmarks/results/s3_latency.json``. About 10 minutes on 2 cores (``--quick``: about 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks import results_file  # noqa: E402 (the repository root goes on the path first)
from deltaplane.devstack.latency_proxy import ProxyProcess  # noqa: E402

CASES = ("scan", "filter", "fig4", "append", "optimize", "open")
BUCKET = "bench"
KEY, SECRET = "bench", "bench"
_STARTED = time.perf_counter()


def progress(what: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:7.1f}s] {what}", file=sys.stderr, flush=True)


# --- the servers -----------------------------------------------------------------------------------


class Lake:
    """One endpoint of the bucket, with each engine's storage options for it."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def ours(self) -> dict[str, str]:
        return {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": KEY,
            "aws_secret_access_key": SECRET,
            "aws_region": "us-east-1",
        }

    def theirs(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "aws_conditional_put": "etag",  # SeaweedFS honours If-None-Match: safe commits
        }


def client(endpoint: str):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(max_pool_connections=32),
    )


def upload(s3, local: Path, prefix: str) -> None:
    files = [p for p in local.rglob("*") if p.is_file() and not p.name.endswith(".crc")]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: s3.upload_file(str(p), BUCKET, f"{prefix}/{p.relative_to(local)}"), files))


def copy_prefix(s3, source: str, target: str) -> None:
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{source}/")
        for o in page.get("Contents", [])
    ]
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda k: s3.copy_object(
                    Bucket=BUCKET, Key=target + k[len(source) :], CopySource={"Bucket": BUCKET, "Key": k}
                ),
                keys,
            )
        )


# --- data, written locally by deltaplane and uploaded ---------------------------------------------


def build(root: Path, rows: int) -> dict[str, Path]:
    from benchmarks import dml, read_floor, snapshot_load
    from deltaplane.engine import DeltaTable

    paths = {name: root / name for name in ("scan", "small", "fig4", "open")}
    rng = np.random.default_rng(7)
    per_file = rows // 100
    table = DeltaTable.create(str(paths["scan"]), dml.batch(0, 1, rng).schema)
    for f in range(100):
        table.append(dml.batch(f * per_file, per_file, rng), target_file_size=1 << 40)
    small = DeltaTable.create(str(paths["small"]), dml.batch(0, 1, rng).schema)
    for f in range(100):
        small.append(dml.batch(f * 2_000, 2_000, rng), target_file_size=1 << 40)
    read_floor.build_fig4(1_000, 100, 1_000)(paths["fig4"])
    snapshot_load.synthesize(paths["open"], 100_000, 1)
    import deltalake

    deltalake.DeltaTable(str(paths["open"])).create_checkpoint()
    snapshot_load.synthesize(paths["open"], 1_000, 10, first_version=1, first_file=100_000)
    return paths


# --- measurement ------------------------------------------------------------------------------------


def rounds(
    calls: dict[str, Callable[[], object]], repeat: int, proxy: ProxyProcess | None, before=None
) -> dict:
    """Each call once per round, alternating, ``1 + repeat`` rounds (the first untimed); ``before``
    (untimed) runs ahead of every call."""
    runs: dict[str, list[float]] = {name: [] for name in calls}
    requests: dict[str, list[dict]] = {name: [] for name in calls}
    values: dict[str, object] = {}
    for i in range(1 + repeat):
        for name, call in calls.items():
            if before is not None:
                before(name)
            if proxy is not None:
                proxy.counters(reset=True)
            start = time.perf_counter()
            values[name] = call()
            seconds = time.perf_counter() - start
            if i:
                runs[name].append(seconds)
                if proxy is not None:
                    requests[name].append(proxy.counters())
    out = {}
    for name in calls:
        out[name] = {"seconds": statistics.median(runs[name]), "runs": runs[name], "value": values[name]}
        if proxy is not None:
            out[name]["requests"] = requests[name][-1]
    return out


def summary(table) -> dict:
    table = pa.table(table)  # delta-rs answers with arro3 tables: through the C stream
    return {"rows": table.num_rows, "id_sum": pc.sum(table["id"]).as_py() if table.num_rows else 0}


def measure(case: str, lake: Lake, s3, proxy: ProxyProcess | None, args) -> dict:
    import deltalake
    from deltalake import QueryBuilder

    from benchmarks import dml
    from deltaplane.engine import DeltaTable, write_table

    ours, theirs = lake.ours(), lake.theirs()

    def uri(name: str) -> str:
        return f"s3://{BUCKET}/{name}"

    def query(name: str, sql: str):
        return (
            QueryBuilder()
            .register("t", deltalake.DeltaTable(uri(name), storage_options=theirs))
            .execute(sql)
            .read_all()
        )

    if case == "scan":
        calls = {
            "deltaplane": lambda: summary(DeltaTable(uri("scan"), storage_options=ours).to_arrow()),
            "delta-rs": lambda: summary(query("scan", "select * from t")),
        }
        return rounds(calls, args.repeat, proxy)
    if case == "filter":
        per_file = args.rows // 100
        low = per_file * 55 + 1_234 % per_file
        predicate = f"id BETWEEN {low} AND {low + args.rows // 1000 - 1}"
        calls = {
            "deltaplane": lambda: summary(
                DeltaTable(uri("scan"), storage_options=ours).to_arrow(filter=predicate)
            ),
            "delta-rs": lambda: summary(query("scan", f"select * from t where {predicate}")),
        }
        return {**rounds(calls, args.repeat, proxy), "predicate": predicate}
    if case == "fig4":
        calls = {
            "deltaplane": lambda: pc.sum(
                DeltaTable(uri("fig4"), storage_options=ours).to_arrow(columns=["value"])["value"]
            ).as_py(),
            "delta-rs": lambda: pa.table(query("fig4", "select sum(value) as s from t"))["s"][0].as_py(),
        }
        return rounds(calls, args.repeat, proxy)
    if case in ("append", "optimize"):
        source = "scan" if case == "append" else "small"
        targets: dict[str, str] = {}

        def fresh(name: str) -> None:
            targets[name] = f"work/{case}-{uuid.uuid4().hex[:8]}"
            copy_prefix(s3, source, targets[name])

        if case == "append":
            data = dml.batch(10_000_000, 100_000, np.random.default_rng(11))
            calls = {
                # The write alone is timed; each table's version is read after the rounds.
                "deltaplane": lambda: write_table(
                    uri(targets["deltaplane"]), data, mode="append", storage_options=ours
                ),
                "delta-rs": lambda: deltalake.write_deltalake(
                    uri(targets["delta-rs"]), data, mode="append", storage_options=theirs
                ),
            }
        else:
            calls = {
                "deltaplane": lambda: (
                    DeltaTable(uri(targets["deltaplane"]), storage_options=ours)
                    .optimize(target_file_size=1 << 30)
                    .num_files_removed
                ),
                "delta-rs": lambda: deltalake.DeltaTable(
                    uri(targets["delta-rs"]), storage_options=theirs
                ).optimize.compact(target_size=1 << 30)["numFilesRemoved"],
            }
        out = rounds(calls, args.repeat, proxy, before=fresh)
        if case == "append":  # what each last write made: the version after it
            out["deltaplane"]["value"] = int(
                DeltaTable(uri(targets["deltaplane"]), storage_options=ours).version()
            )
            out["delta-rs"]["value"] = deltalake.DeltaTable(
                uri(targets["delta-rs"]), storage_options=theirs
            ).version()
        return out
    if case == "open":
        calls = {
            "deltaplane": lambda: len(DeltaTable(uri("open"), storage_options=ours).file_uris()),
            "delta-rs": lambda: len(deltalake.DeltaTable(uri("open"), storage_options=theirs).file_uris()),
        }
        return rounds(calls, args.repeat, proxy)
    raise ValueError(case)


# --- the run -------------------------------------------------------------------------------------------


def parse(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=CASES)
    parser.add_argument("--quick", action="store_true", help="100,000 rows, one timed round")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeat = 100_000, 1
    args.out = results_file.full_run_out(args, "s3_latency")
    return args


def main(argv: list[str] | None = None) -> dict:
    from deltaplane.devstack.seaweedfs import running

    args = parse(argv)
    cases = [c for c in CASES if not args.only or c in args.only]
    results: dict = {"rtt_ms": args.rtt_ms, "rows": args.rows, "repeat": args.repeat, "cases": {}}
    with tempfile.TemporaryDirectory(prefix="dp-s3-latency-") as work:
        root = Path(work)
        progress("data")
        local = build(root / "local", args.rows)
        (root / "weed").mkdir()
        with running(root / "weed", lambda port: client(f"http://127.0.0.1:{port}").list_buckets()) as port:
            s3 = client(f"http://127.0.0.1:{port}")
            s3.create_bucket(Bucket=BUCKET)
            for name, path in local.items():
                upload(s3, path, name)
            proxy = ProxyProcess(port, args.rtt_ms)
            try:
                networks = {
                    "loopback": (Lake(f"http://127.0.0.1:{port}"), None),
                    "rtt": (Lake(f"http://127.0.0.1:{proxy.port}"), proxy),
                }
                for case in cases:
                    results["cases"][case] = {}
                    for network, (lake, counted) in networks.items():
                        progress(f"{case} ({network})")
                        results["cases"][case][network] = measure(case, lake, s3, counted, args)
            finally:
                proxy.close()
    report(results)
    if args.out:
        results_file.write_results(args.out, results)
    return results


def report(results: dict) -> None:
    rtt = f"+{results['rtt_ms']:g} ms"
    print(f"S3 (SeaweedFS), deltaplane vs delta-rs, median of {results['repeat']}; rtt: {rtt} per round trip")
    print(
        f"{'case':<10}{'network':<10}{'deltaplane':>12}{'delta-rs':>12}{'ratio':>8}"
        "  requests (ours / theirs)  same"
    )
    for case, networks in results["cases"].items():
        for network, r in networks.items():
            ours, theirs = r["deltaplane"], r["delta-rs"]
            ratio = ours["seconds"] / theirs["seconds"]
            requests = ""
            if "requests" in ours:
                requests = f"{ours['requests']['requests']:>6} / {theirs['requests']['requests']:<6}"
            same = ours["value"] == theirs["value"]
            print(
                f"{case:<10}{network:<10}{ours['seconds']:>11.3f}s{theirs['seconds']:>11.3f}s"
                f"{ratio:>7.2f}x  {requests:<24}{same}"
            )


if __name__ == "__main__":
    main()
