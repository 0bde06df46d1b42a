"""Fixed maintenance schedules against the health-driven policy, on the same simulated day.

Ten tables with the shapes teams run (three streaming tables committing every 5 simulated
minutes, two partitioned daily-batch tables, two tables with frequent deletion-vector deletes and
updates, a liquid-clustered table, two quiet tables) live through one simulated day, compressed:
the workload is a deterministic list of events in simulated time, replayed as fast as the machine
goes. Each policy has its own copy of the tables, and the copies live through the day side by
side, minute by minute. Every simulated hour, at a minute drawn at random (the same for both
policies), a query suite runs on every table (a full count and a selective filter): its latency
is measured on both copies in turn (each query's fastest of three rounds, the copies taking turns
within a round, so that the machine's drift over the day weighs on both alike) and the files it
opens after pruning are counted (the deterministic part of its cost). The policies:

- **fixed**: OPTIMIZE of every table every hour, VACUUM of every table at the end of the day (what
  a cron string per table gives today); checkpoints on the default interval;
- **health**: every 30 simulated minutes each table's ``HealthTracker`` advances over the new
  commits and the planner (``deltaplane.engine.maintenance_plan``) decides; what it ranks runs
  (compaction or DV purge of the chosen partitions, a checkpoint, a VACUUM). Its compactions
  rewrite the small files, and merge a size tier once it holds ``--min-tier-files`` files.

Reported for each: query latency p50/p95 over the day, maintenance CPU-seconds (process time of the
maintenance calls and, for the health policy, its tracking and planning), bytes rewritten, peak
small-file count, files the queries open, storage held by data files the table no longer
references (on disk, not yet vacuumed: peak and average of the hourly samples), and user writes
that failed (must be 0). VACUUM runs with a zero retention in both (the
day is compressed: a real retention would never expire), so the storage comparison is of *when*
each policy vacuums.

    python benchmarks/maintenance_policy.py [--hours 24] [--scale 1]

Writes ``benchmarks/results/maintenance_policy.json`` (and with ``--plot PNG`` the hourly small files
and query latency of both, as in docs/operating.md: ``docs/images/maintenance_policy.png``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_file import command_line  # noqa: E402 (the repository root goes on the path first)
from deltaplane.engine import DeltaTable  # noqa: E402
from deltaplane.engine.commands.optimize import execute_optimize, plan_optimize  # noqa: E402
from deltaplane.engine.health import table_health  # noqa: E402
from deltaplane.engine.health_tracker import HealthTracker  # noqa: E402
from deltaplane.engine.maintenance_plan import MaintenancePolicy, decide, rank  # noqa: E402
from deltaplane.engine.snapshot import load_snapshot  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("v", pa.float64()), ("k", pa.int32())])
BASE_SMALL = 128 << 10  # the simulation's small file and target size, scaled down as its data is
BASE_TARGET = 1 << 20  # (Delta Spark's are 128 MB and 1 GB: the same ratio)
MINUTES = 60
# How often the health policy looks (the health trigger's poll interval); ``configure`` sets this run's.
BASE_POLL_MINUTES = POLL_MINUTES = 30

# name: (kind, properties, partitioned, clustered)
TABLES = {
    "stream_a": ("stream", {}, False, False),
    "stream_b": ("stream", {}, False, False),
    "stream_c": ("stream", {}, False, False),
    "batch_a": ("batch", {}, True, False),
    "batch_b": ("batch", {}, True, False),
    "dml_a": ("dml", {"delta.enableDeletionVectors": "true"}, False, False),
    "dml_b": ("dml", {"delta.enableDeletionVectors": "true"}, False, False),
    "clustered": ("clustered", {}, False, True),
    "quiet_a": ("quiet", {}, False, False),
    "quiet_b": ("quiet", {}, False, False),
}

BASE_POLICY = MaintenancePolicy(
    small_file_size=BASE_SMALL,
    min_small_files=8,  # a streaming table's: compacted hourly, as the schedule does
    min_unclustered_files=8,  # the liquid table's new files, as the others' small files
    max_files_below_target=24,
    min_tier_files=2,
    max_deleted_rows_ratio=0.1,
    max_versions_since_checkpoint=50,
    min_vacuum_bytes=6 << 20,
    retention_hours=0,
    target_file_size=BASE_TARGET,
)
HEALTH_POLICY = BASE_POLICY  # this run's (``configure``)


def rows(start: int, n: int, day: str, rng: np.random.Generator) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {"id": ids, "day": [day] * n, "v": rng.normal(0, 1, n), "k": rng.integers(0, 100, n, dtype=np.int32)},
        schema=SCHEMA,
    )


def workload(hours: int, scale: int) -> list[tuple[int, str, str, int]]:
    """(minute, table, action, n) in simulated time order; deterministic."""
    events = []
    for name, (kind, _, _, _) in TABLES.items():
        if kind == "stream":
            events += [(m, name, "append", 200 * scale) for m in range(0, hours * MINUTES, 5)]
        elif kind == "batch":
            events += [(h * MINUTES + 1, name, "batch", 5000 * scale) for h in range(0, hours, 6)]
        elif kind == "dml":
            events += [(h * MINUTES + 2, name, "append", 2000 * scale) for h in range(hours)]
            events += [(m + 7, name, "delete", 0) for m in range(0, hours * MINUTES, 30)]
            events += [(m + 17, name, "update", 0) for m in range(0, hours * MINUTES, 60)]
        elif kind == "clustered":
            events += [(h * MINUTES + 3, name, "append", 1000 * scale) for h in range(hours)]
        elif kind == "quiet":
            events += [(4, name, "append", 3000 * scale)]
    return sorted(events)


@dataclass
class Run:
    policy: str
    latencies: list[float] = field(default_factory=list)
    by_table: dict[str, list[float]] = field(default_factory=dict)
    maintenance_cpu: float = 0.0
    tracking_cpu: float = 0.0  # of which: keeping health current and planning (health policy)
    bytes_rewritten: int = 0
    small_files: list[int] = field(default_factory=list)
    unvacuumed: list[int] = field(default_factory=list)
    failed_writes: int = 0
    maintenance_runs: dict[str, int] = field(default_factory=dict)
    cpu_by_kind: dict[str, float] = field(default_factory=dict)  # maintenance CPU by kind of work
    cpu_by_table: dict[str, float] = field(default_factory=dict)  # and by table (tracking apart)
    hourly: list[dict] = field(default_factory=list)
    files_read: list[int] = field(default_factory=list)  # per table and hour: files its queries opened

    def count(self, kind: str, table: str, cpu: float) -> None:
        """One maintenance run of ``kind`` on ``table`` that committed, and its CPU."""
        self.maintenance_runs[kind] = self.maintenance_runs.get(kind, 0) + 1
        self.spent(kind, table, cpu)

    def spent(self, kind: str, table: str, cpu: float) -> None:
        self.cpu_by_kind[kind] = self.cpu_by_kind.get(kind, 0.0) + cpu
        self.cpu_by_table[table] = self.cpu_by_table.get(table, 0.0) + cpu

    def summary(self) -> dict:
        lat = sorted(self.latencies)
        return {
            "policy": self.policy,
            "query_p50_ms": round(1000 * statistics.median(lat), 2),
            "query_p95_ms": round(1000 * lat[int(0.95 * (len(lat) - 1))], 2),
            "files_read_mean": round(statistics.mean(self.files_read), 2),
            "files_read_p95": sorted(self.files_read)[int(0.95 * (len(self.files_read) - 1))],
            "maintenance_cpu_s": round(self.maintenance_cpu, 2),
            "tracking_cpu_s": round(self.tracking_cpu, 2),
            "bytes_rewritten": self.bytes_rewritten,
            "peak_small_files": max(self.small_files),
            "peak_unvacuumed_bytes": max(self.unvacuumed),
            "mean_unvacuumed_bytes": int(statistics.mean(self.unvacuumed)),
            "failed_user_writes": self.failed_writes,
            "maintenance_runs": dict(sorted(self.maintenance_runs.items())),
            "maintenance_cpu_s_by_kind": {k: round(v, 2) for k, v in sorted(self.cpu_by_kind.items())},
            "maintenance_cpu_s_by_table": {k: round(v, 2) for k, v in self.cpu_by_table.items()},
            "query_p95_ms_by_table": {
                name: round(1000 * sorted(v)[int(0.95 * (len(v) - 1))], 2)
                for name, v in self.by_table.items()
            },
        }


def create_tables(root: Path) -> None:
    for name, (_, props, partitioned, clustered) in TABLES.items():
        DeltaTable.create(
            str(root / name),
            SCHEMA,
            partition_by=["day"] if partitioned else None,
            cluster_by=["k"] if clustered else None,
            configuration=dict(props),
        )


def user_write(table: DeltaTable, action: str, n: int, minute: int, next_id: dict, rng) -> None:
    name = Path(table.uri).name
    day = f"2026-11-{1 + minute // (6 * MINUTES):02d}"
    if action in ("append", "batch"):
        start = next_id.get(name, 0)
        data = rows(start, n, day, rng)
        if action == "batch":  # a batch lands as several files
            for part in range(4):
                table.append(data.slice(part * n // 4, n // 4))
        else:
            table.append(data)
        next_id[name] = start + n
    elif action == "delete":
        table.delete(f"k = {int(rng.integers(0, 100))}")
    elif action == "update":
        table.update({"v": "v + 1"}, predicate=f"k = {int(rng.integers(0, 100))}")


QUERY_REPEATS = 3  # each query's latency is the fastest of this many runs: the machine's noise out
POLICIES = ("fixed", "health")


def files_read(table: DeltaTable) -> int:
    """Files the query suite opens (after partition and statistics pruning): the deterministic
    part of its cost, beside the measured latency."""
    fresh = DeltaTable(table.uri)
    return sum(len(fresh.scan(filter=predicate).file_uris()) for predicate in (None, "k = 42"))


def query_suite(tables: list[DeltaTable]) -> list[list[float]]:
    """The query suite on the same table under each policy, timed side by side: each query runs
    ``QUERY_REPEATS`` rounds, every round on each policy's copy in turn (the first of a round
    alternating), and each copy keeps its fastest. Timed apart (one policy's whole day, then the
    other's) the comparison took the machine's drift between the two days with it; side by side
    both see the same moment. One list per table, each query's latency."""
    out: list[list[float]] = [[] for _ in tables]
    for predicate in (None, "k = 42"):
        took: list[list[float]] = [[] for _ in tables]
        for round_ in range(QUERY_REPEATS):
            order = range(len(tables)) if round_ % 2 == 0 else reversed(range(len(tables)))
            for i in order:
                started = time.perf_counter()
                DeltaTable(tables[i].uri).count(filter=predicate)
                took[i].append(time.perf_counter() - started)
        for i, times in enumerate(took):
            out[i].append(min(times))
    return out


def optimize(
    table: DeltaTable, run: Run, partitions=None, purge=False, min_file_size=None, kind: str | None = None
) -> None:
    """One OPTIMIZE; its CPU is counted under ``kind`` (else compaction or purge), or under
    "nothing to do" when the plan was empty."""
    started = time.process_time()
    snapshot = table._latest_for_write()
    plan = plan_optimize(
        snapshot,
        target_file_size=HEALTH_POLICY.target_file_size,
        partitions=partitions,
        purge=purge,
        min_file_size=min_file_size,
    )
    metrics = execute_optimize(table._store, plan)
    cpu, name = time.process_time() - started, Path(table.uri).name
    if metrics.commit is not None:
        run.bytes_rewritten += int(metrics.commit.operation_metrics.get("numAddedBytes", 0))
        run.count(kind or ("purge" if purge else "compaction"), name, cpu)
    else:
        run.spent("nothing to do", name, cpu)


def unreferenced_bytes(table_root: Path, snapshot) -> int:
    """Bytes of the data files on disk that the table no longer references: the storage a VACUUM
    would free (the log's tombstones outlive the files VACUUM deleted, so they cannot say)."""
    live = {p.split("/")[-1] for p in snapshot.files.column("path").to_pylist()}
    total = 0
    for path in table_root.rglob("*.parquet"):
        if "_delta_log" not in path.parts and path.name not in live:
            total += path.stat().st_size
    return total


def sample(root: Path, run: Run, hour: int) -> None:
    small = unvacuumed = 0
    for name in TABLES:
        snapshot = load_snapshot(DeltaTable(str(root / name))._store)
        small += table_health(
            snapshot, small_file_size=HEALTH_POLICY.small_file_size, include_history=False
        ).num_small_files
        unvacuumed += unreferenced_bytes(root / name, snapshot)
    run.small_files.append(small)
    run.unvacuumed.append(unvacuumed)
    run.hourly.append({"hour": hour, "small_files": small, "unvacuumed_bytes": unvacuumed})


class Replay:
    """One policy's copy of the tables living through the day, a simulated minute at a time (the
    user's writes due then, and the policy's maintenance); the same writes, drawn from the same
    seed, in every copy."""

    def __init__(self, root: Path, policy: str, hours: int, scale: int):
        self.root, self.policy, self.hours = root, policy, hours
        self.run = Run(policy)
        self.rng = np.random.default_rng(7)
        self.tables = {name: DeltaTable(str(root / name)) for name in TABLES}
        self.trackers: dict[str, HealthTracker] = {}
        self.vacuumed_before: dict[str, int] = {}
        self.next_id: dict[str, int] = {}
        self.events = workload(hours, scale)
        self.i = 0
        if policy == "health":
            started = time.process_time()
            for name, t in self.tables.items():
                self.trackers[name] = HealthTracker.from_snapshot(
                    t.snapshot, small_file_size=HEALTH_POLICY.small_file_size
                )
            self.run.maintenance_cpu += time.process_time() - started

    def minute(self, minute: int) -> None:
        run, tables, events = self.run, self.tables, self.events
        while self.i < len(events) and events[self.i][0] == minute:
            _, name, action, n = events[self.i]
            try:
                user_write(tables[name], action, n, minute, self.next_id, self.rng)
            except Exception:  # a user's write that maintenance broke: counted, never hidden
                run.failed_writes += 1
            self.i += 1
        if self.policy == "fixed" and minute % MINUTES == 59:
            started = time.process_time()
            for t in tables.values():
                optimize(t, run)
            run.maintenance_cpu += time.process_time() - started
        if self.policy == "fixed" and minute == self.hours * MINUTES - 1:
            started = time.process_time()
            for name, t in tables.items():
                vacuum(t, name, run)
            run.maintenance_cpu += time.process_time() - started
        if self.policy == "health" and minute % POLL_MINUTES == POLL_MINUTES - 1:
            started = time.process_time()
            health_step(tables, self.trackers, run, self.vacuumed_before)
            run.maintenance_cpu += time.process_time() - started


def replay(roots: dict[str, Path], hours: int, scale: int) -> dict[str, Run]:
    """Every policy's day in lockstep: minute by minute each copy takes its writes and
    maintenance, and every simulated hour, at a minute drawn at random (not tied to any
    policy's schedule), the query suite runs on each table of every copy side by side."""
    replays = [Replay(root, policy, hours, scale) for policy, root in roots.items()]
    query_minute = np.random.default_rng(11).integers(0, MINUTES, hours + 1)
    for minute in range(hours * MINUTES + 1):
        for r in replays:
            r.minute(minute)
        if minute % MINUTES == query_minute[minute // MINUTES]:
            hour_latencies: list[list[float]] = [[] for _ in replays]
            for name in TABLES:
                took = query_suite([r.tables[name] for r in replays])
                for r, mine, hour in zip(replays, took, hour_latencies, strict=True):
                    r.run.files_read.append(files_read(r.tables[name]))
                    r.run.latencies += mine
                    hour += mine
                    r.run.by_table.setdefault(name, []).extend(mine)
            for r, hour in zip(replays, hour_latencies, strict=True):
                sample(r.root, r.run, minute // MINUTES)
                r.run.hourly[-1]["query_mean_ms"] = round(1000 * statistics.mean(hour), 2)
    return {r.policy: r.run for r in replays}


def health_step(tables, trackers, run: Run, vacuumed_before) -> None:
    started = time.process_time()
    decisions, policies = [], {}
    for name, t in tables.items():
        tracker = trackers[name]
        tracker.advance(t._store)
        policies[name] = HEALTH_POLICY
        removed = tracker.removed_files(now_ms=int(time.time() * 1000) + 1, retention_ms=0)
        decisions += decide(name, tracker.health(), HEALTH_POLICY, removed=removed)
    ranked = rank(decisions, policies)
    run.tracking_cpu += time.process_time() - started
    for d in ranked:
        if not d.run:
            continue
        t = tables[d.table]
        if d.kind in ("compaction", "dv_purge", "clustering"):
            small = d.details.get("min_file_size") if d.kind == "compaction" else None
            optimize(
                t,
                run,
                partitions=list(d.partitions) or None,
                purge=d.kind == "dv_purge",
                min_file_size=small,
                kind=d.kind,
            )
        elif d.kind == "checkpoint":
            started = time.process_time()
            t.checkpoint()
            run.count("checkpoint", d.table, time.process_time() - started)
        elif d.kind == "vacuum":
            vacuum(t, d.table, run)


def vacuum(table: DeltaTable, name: str, run: Run) -> None:
    started = time.process_time()
    table.vacuum(retention_hours=0, dry_run=False, enforce_retention=False)
    run.count("vacuum", name, time.process_time() - started)


def plot(results: dict, path: str) -> None:
    """Small files (all tables) and mean query latency, hour by hour, for both policies (needs
    ``matplotlib==3.11.2``, installed by hand: the plot is not a dependency of the project)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (files, latency) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for policy, style in (("fixed", "-o"), ("health", "-s")):
        hourly = results[policy]["hourly"]
        hours = [h["hour"] for h in hourly]
        files.plot(hours, [h["small_files"] for h in hourly], style, label=policy, markersize=3)
        latency.plot(hours, [h["query_mean_ms"] for h in hourly], style, label=policy, markersize=3)
    files.set_ylabel("small files, all tables")
    latency.set_ylabel("mean query latency (ms)")
    latency.set_xlabel("simulated hour")
    files.set_title("Fixed schedules (hourly OPTIMIZE, daily VACUUM) vs the health-driven planner")
    files.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def configure(
    poll_minutes: int,
    min_small_files: int,
    max_files_below_target: int,
    min_vacuum_bytes: int | None = None,
    size_scale: int = 1,
    min_tier_files: int | None = BASE_POLICY.min_tier_files,
) -> None:
    """The health policy's knobs; ``size_scale`` multiplies every size (the small-file size, the
    target, the VACUUM threshold) for runs whose data is scaled by the same factor (``--scale``):
    the same day in bigger files, where a compaction's cost is its bytes more than its fixed part."""
    global POLL_MINUTES, HEALTH_POLICY
    POLL_MINUTES = poll_minutes
    vacuum_bytes = BASE_POLICY.min_vacuum_bytes if min_vacuum_bytes is None else min_vacuum_bytes
    HEALTH_POLICY = dataclasses.replace(
        BASE_POLICY,
        small_file_size=BASE_SMALL * size_scale,  # from the base: reruns do not compound
        target_file_size=BASE_TARGET * size_scale,
        min_small_files=min_small_files,
        min_unclustered_files=min_small_files,
        max_files_below_target=max_files_below_target,
        min_tier_files=min_tier_files,
        min_vacuum_bytes=vacuum_bytes * size_scale,
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line(__doc__.splitlines()[0], "maintenance_policy")
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--poll-minutes", type=int, default=BASE_POLL_MINUTES)
    parser.add_argument("--min-small-files", type=int, default=BASE_POLICY.min_small_files)
    parser.add_argument("--max-files-below-target", type=int, default=BASE_POLICY.max_files_below_target)
    parser.add_argument(
        "--min-tier-files",
        type=int,
        default=BASE_POLICY.min_tier_files,
        help="merge a size tier's files once this many (0: small files only)",
    )
    parser.add_argument(
        "--min-vacuum-bytes", type=int, default=BASE_POLICY.min_vacuum_bytes, help="before --size-scale"
    )
    parser.add_argument(
        "--size-scale",
        type=int,
        default=1,
        help="multiply the file sizes (small, target, VACUUM threshold) too: with --scale N, the same "
        "day in N times bigger files",
    )
    parser.add_argument(
        "--plot", help="also draw small files and query latency over the day (PNG; needs matplotlib)"
    )
    args = parser.parse_args(argv)
    configure(
        args.poll_minutes,
        args.min_small_files,
        args.max_files_below_target,
        args.min_vacuum_bytes,
        args.size_scale,
        args.min_tier_files or None,
    )
    with tempfile.TemporaryDirectory(prefix="maintenance-policy-") as tmp:
        base = Path(tmp) / "base"
        create_tables(base)
        roots = {}
        for policy in POLICIES:
            roots[policy] = Path(tmp) / policy
            shutil.copytree(base, roots[policy])
        started = time.perf_counter()
        runs = replay(roots, args.hours, args.scale)
        wall = round(time.perf_counter() - started, 1)
        results = {policy: {**run.summary(), "hourly": run.hourly} for policy, run in runs.items()}
    fixed, health = results["fixed"], results["health"]
    ratios = {
        "query_p95": round(health["query_p95_ms"] / fixed["query_p95_ms"], 3),
        "maintenance_cpu": round(health["maintenance_cpu_s"] / max(fixed["maintenance_cpu_s"], 1e-9), 3),
        "bytes_rewritten": round(health["bytes_rewritten"] / max(fixed["bytes_rewritten"], 1), 3),
        "files_read_mean": round(health["files_read_mean"] / max(fixed["files_read_mean"], 1e-9), 3),
    }
    out = {
        "policy": {
            "poll_minutes": POLL_MINUTES,
            **{k: v for k, v in dataclasses.asdict(HEALTH_POLICY).items() if k != "enabled"},
        },
        "hours": args.hours,
        "scale": args.scale,
        "size_scale": args.size_scale,
        "tables": len(TABLES),
        "wall_s": wall,  # both policies' day, replayed side by side
        "results": results,
        "health_over_fixed": ratios,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    nested = ("policy", "hourly", "maintenance_runs", "query_p95_ms_by_table")
    keys = [k for k in fixed if k not in nested and not k.startswith("maintenance_cpu_s_by")]
    print(f"{'':24}{'fixed':>16}{'health':>16}")
    for k in keys:
        print(f"{k:<24}{fixed[k]!s:>16}{health[k]!s:>16}")
    print(f"{'maintenance runs':<24} fixed {fixed['maintenance_runs']}  health {health['maintenance_runs']}")
    by_kind = "maintenance_cpu_s_by_kind"
    print(f"{'CPU by kind':<24} fixed {fixed[by_kind]}  health {health[by_kind]}")
    for name in TABLES:
        f, h = fixed["query_p95_ms_by_table"][name], health["query_p95_ms_by_table"][name]
        print(f"  p95 {name:<20}{f:>16}{h:>16}")
    for name in TABLES:
        f, h = (r["maintenance_cpu_s_by_table"].get(name, 0) for r in (fixed, health))
        print(f"  CPU {name:<20}{f:>16}{h:>16}")
    print("health / fixed:", ratios)
    if args.plot:
        plot(results, args.plot)
    return 0 if fixed["failed_user_writes"] == health["failed_user_writes"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
