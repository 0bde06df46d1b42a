"""What maintenance each table needs now, why, and in which order: a policy over table health.

For every table and every kind of work (compaction, deletion-vector purge, liquid clustering,
checkpoint, log cleanup, VACUUM, symlink manifests) the planner makes one ``Decision`` from the
table's ``TableHealth`` (``health.py``, or kept current by ``health_tracker.py``), the inputs
``maintenance_inputs.look`` reads beside it, and its ``MaintenancePolicy``: run or skip, with a
one-line reason that names the numbers it decided on and the threshold they crossed (or did not).
Then it ranks what should run, across all tables, by benefit over cost, and admits work in that
order while each table's daily budgets (bytes rewritten, CPU seconds) and the global cap on
concurrent jobs allow; what does not fit is skipped with that reason. A rewrite's CPU is estimated
from its bytes at the table's own rate (``health.Spending``: the CPU its recent rewrites recorded
per GiB).

The benefit and cost model is deliberately simple and stated here, because operators read it:

- **compaction**: a partition with ``min_small_files`` small files, or, once the whole table has
  that many (a full read opens them all), every partition with two or more; only the small files
  are rewritten (files already compacted past the small size are left alone). Benefit = files a
  read no longer opens, cost = the bytes rewritten; score = files saved per GiB.
- **DV purge**: benefit = rows every read decodes only to drop them, cost = the bytes of the files
  that carry deletion vectors (estimated from their share of the partition); score = hidden rows
  per MiB rewritten.
- **clustering** (liquid-clustered tables): benefit = files a filter on the clustering columns
  cannot skip (those no OPTIMIZE clustered yet), cost = their bytes; score = those files over
  ``min_unclustered_files``. A clustered table's small files are clustering's, not compaction's.
- **log cleanup**: due once the oldest commit is a day past ``delta.logRetentionDuration`` and a
  checkpoint follows it (cleanup removes a day at a time, up to a checkpoint); score = days past.
- **checkpoint**: benefit = commits each snapshot load replays, cost = about one action per live
  file written once; score = commits saved per thousand files.
- **VACUUM**: benefit = bytes of storage freed (removed files older than the retention), cost = the
  files to delete (requests); score = MiB freed per file deleted.
- **manifest** (opt-in: tables that Presto, Athena or Redshift Spectrum read through symlink
  manifests): due once ``max_manifest_commits_behind`` commits changed the file list since the
  newest manifest was written (such a reader misses new rows, and after a VACUUM fails on files that
  are gone), or when there is no manifest; score = commits behind over the threshold.

Scores of different kinds are made comparable by putting each on "work avoided per unit of work
done" and normalising to the threshold that would just trigger it (a decision exactly at its
threshold scores 1).

Heavy work is placed where it fits: below ``spark_threshold_bytes`` in-process, above it a Spark
job; the reason says which and why. The planner reads nothing but the health it is given: a dry run
is free, and the same function explains the CLI (``deltaplane maintenance plan``), the ops view and
the scheduled runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from deltaplane.engine.health import DEFAULT_SMALL_FILE_SIZE, PartitionHealth, Spending, TableHealth

if TYPE_CHECKING:
    from deltaplane.engine.commands.manifest import ManifestLag

KINDS = ("compaction", "dv_purge", "clustering", "checkpoint", "log_cleanup", "vacuum", "manifest")
DEFAULT_KINDS = KINDS[:-1]  # manifests only for the tables that ask for them
REWRITE_KINDS = ("compaction", "dv_purge", "clustering")  # the kinds that rewrite data files
MiB = 1 << 20
GiB = 1 << 30
DAY_MS = 86_400_000


@dataclass(frozen=True)
class MaintenancePolicy:
    """Thresholds, retention and budget for one table (``config/tables.yaml``: ``maintenance``,
    per table over the file's ``maintenance_defaults``)."""

    small_file_size: int = DEFAULT_SMALL_FILE_SIZE
    min_small_files: int = 50  # per partition (Delta Spark's auto-compaction minNumFiles)
    max_deleted_rows_ratio: float = 0.2  # per partition
    max_versions_since_checkpoint: int = 100
    min_unclustered_files: int = 50  # a liquid-clustered table's files not clustered yet
    min_vacuum_bytes: int = 1 * GiB  # freed storage worth a VACUUM
    retention_hours: float = 168.0
    target_file_size: int = DEFAULT_SMALL_FILE_SIZE
    max_files_below_target: int | None = None  # a full compaction once this many are (None: never)
    # size tiers (health.SIZE_TIERS): a partition's files from 2**k to 2**(k + 1) small sizes merge
    # once this many are in one tier (with its smaller files), for the tiers under half the
    # target; None: only small files are compacted
    min_tier_files: int | None = 4
    max_bytes_rewritten_per_day: int | None = None  # None: no budget
    max_cpu_seconds_per_day: float | None = None  # rewrites' CPU (recorded, or estimated); None: no budget
    max_manifest_commits_behind: int = 1
    spark_threshold_bytes: int = 8 * GiB
    enabled: tuple[str, ...] = DEFAULT_KINDS

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, *, owner: str = "policy") -> MaintenancePolicy:
        """A policy from JSON-able settings (a trigger's or an operator's ``policy``): unknown
        keys are an error that names the known ones; ``enabled`` may be a list."""
        from deltaplane.engine.errors import InvalidArgumentError

        values = dict(values or {})
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise InvalidArgumentError(f"{owner}: unknown policy key(s) {unknown}; known: {known}")
        if "enabled" in values:
            values["enabled"] = tuple(values["enabled"])
        try:
            return cls(**values)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"{owner}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    def __post_init__(self) -> None:
        unknown = [k for k in self.enabled if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown kind(s) of maintenance {unknown}; known: {', '.join(KINDS)}")
        if (
            self.min_small_files < 1
            or self.max_versions_since_checkpoint < 1
            or self.min_unclustered_files < 1
            or self.max_manifest_commits_behind < 1
        ):
            raise ValueError(
                "min_small_files, min_unclustered_files, max_versions_since_checkpoint and "
                "max_manifest_commits_behind must be at least 1"
            )
        if self.min_tier_files is not None and self.min_tier_files < 2:
            raise ValueError("min_tier_files must be at least 2 (or None: no size tiers)")
        if self.max_cpu_seconds_per_day is not None and not self.max_cpu_seconds_per_day > 0:
            raise ValueError("max_cpu_seconds_per_day must be a positive number of seconds")
        if not 0.0 <= self.max_deleted_rows_ratio <= 1.0:
            raise ValueError("max_deleted_rows_ratio must be between 0 and 1")


@dataclass(frozen=True)
class Decision:
    table: str
    kind: str
    run: bool
    reason: str  # one line, the numbers and the threshold
    score: float = 0.0  # benefit over cost, 1.0 at the threshold
    bytes_rewritten: int = 0
    partitions: tuple[dict[str, str | None], ...] = ()
    engine: str | None = None  # "local" or "spark" for rewrites
    details: dict[str, Any] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # a rewrite's expected CPU (its bytes at the table's rate)

    def line(self) -> str:
        verdict = "run " if self.run else "skip"
        return f"{self.table:<20} {self.kind:<11} {verdict} {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "kind": self.kind,
            "run": self.run,
            "reason": self.reason,
            "score": round(self.score, 3),
            "bytes_rewritten": self.bytes_rewritten,
            "partitions": [dict(p) for p in self.partitions],
            "engine": self.engine,
            "details": dict(self.details),
            "cpu_seconds": round(self.cpu_seconds, 3),
        }


def _size(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _engine(policy: MaintenancePolicy, nbytes: int) -> tuple[str, str]:
    if nbytes >= policy.spark_threshold_bytes:
        return (
            "spark",
            f"Spark job ({_size(nbytes)} >= spark_threshold {_size(policy.spark_threshold_bytes)})",
        )
    return "local", f"in-process ({_size(nbytes)} < spark_threshold {_size(policy.spark_threshold_bytes)})"


# --- one table ----------------------------------------------------------------------------------


def decide(
    name: str,
    health: TableHealth,
    policy: MaintenancePolicy,
    *,
    removed: Mapping[str, Any] | None = None,
    now_ms: int | None = None,
    manifest: ManifestLag | None = None,
    spending: Spending | None = None,
) -> list[Decision]:
    """One decision per kind of work for one table. ``removed``: the unvacuumed removed files
    (``HealthTracker.removed_files``: ``bytes`` and ``num_files`` older than the retention as
    ``expired_bytes`` / ``expired_files``), when known; ``now_ms``: the time the log's age is
    measured at (default: the version's); ``manifest``: how far the symlink manifests are behind
    (``commands.manifest.manifest_lag``), when looked at; ``spending``: the table's rewrites of
    the day, whose CPU rate estimates each rewrite's CPU seconds."""
    now = health.timestamp if now_ms is None else int(now_ms)
    rate = spending or Spending(now)
    out = []
    for kind, fn in (
        ("compaction", _compaction),
        ("dv_purge", _dv_purge),
        ("clustering", _clustering),
        ("checkpoint", _checkpoint),
        ("log_cleanup", lambda *args: _log_cleanup(*args, now=now)),
        ("vacuum", _vacuum),
        ("manifest", lambda name, health, policy, removed: _manifest(name, policy, manifest)),
    ):
        if kind not in policy.enabled:
            out.append(Decision(name, kind, False, "disabled by the table's policy"))
            continue
        d = fn(name, health, policy, removed)
        if d.bytes_rewritten:
            d = dataclasses.replace(d, cpu_seconds=rate.cpu_for(d.bytes_rewritten))
        out.append(d)
    return out


def _compaction(name, health: TableHealth, policy: MaintenancePolicy, removed) -> Decision:
    """Compact a partition once it holds ``min_small_files`` small files (Delta Spark's rule), or
    every partition with two or more once the table does (a read opens them all)."""
    small_size = policy.small_file_size
    if health.small_file_size != small_size:
        return Decision(
            name,
            "compaction",
            False,
            f"health was measured with small files under {_size(health.small_file_size)}, the policy "
            f"says {_size(small_size)}: measure again",
        )
    if health.clustered and "clustering" in policy.enabled:
        return Decision(
            name,
            "compaction",
            False,
            f"a liquid-clustered table: its {health.num_small_files} small files are rewritten by clustering "
            "(OPTIMIZE clusters new files)",
        )
    below_target = sum(
        b["num_files"] for b in health.file_size_histogram if b["min_bytes"] < policy.target_file_size
    )
    if policy.max_files_below_target is not None and below_target >= policy.max_files_below_target:
        return _full_compaction(name, health, policy, below_target)
    chosen = [p for p in health.partitions if p.num_small_files >= policy.min_small_files]
    total = health.num_small_files
    where = f"in {len(chosen)} partition(s) with >= {policy.min_small_files}"
    if not chosen and total >= policy.min_small_files:
        chosen = [p for p in health.partitions if p.num_small_files >= 2]
        where = f"in the table (>= {policy.min_small_files}), {len(chosen)} partition(s) with 2 or more"
    tiered = {p.partition: bound for p in health.partitions if (bound := _tier_bound(p, policy))}
    if not chosen and not tiered:
        worst = max((p.num_small_files for p in health.partitions), default=0)
        spread = f", at most {worst} in a partition" if len(health.partitions) > 1 else ""
        return Decision(
            name,
            "compaction",
            False,
            f"{total} small files (< {_size(small_size)}) in the table{spread}; "
            f"threshold {policy.min_small_files}",
        )
    # one size for the whole plan: the largest tier bound a partition reached, else the small size
    under = max(tiered.values(), default=small_size)
    why = f"{sum(p.num_small_files for p in chosen)} small files (< {_size(small_size)}) {where}"
    if tiered:
        named = {p.partition for p in chosen}
        chosen += [p for p in health.partitions if p.partition in tiered and p.partition not in named]
        tiers = (
            f"{len(tiered)} partition(s) with >= {policy.min_tier_files} files in a size tier: "
            f"files under {_size(under)} merge"
        )
        why = f"{why}; {tiers}" if named else tiers
    counted = [(p.num_small_files, p.small_files_bytes, *_tiers_under(p, small_size, under)) for p in chosen]
    files = sum(n + tier_n for n, _, tier_n, _ in counted)
    rewritten = sum(b + tier_b for _, b, _, tier_b in counted)
    after = sum(max(1, -(-(b + tier_b) // policy.target_file_size)) for _, b, _, tier_b in counted)
    saved = max(0, files - after)
    # files saved per GiB rewritten, against a table just at the threshold (its small files half
    # the small size on average, all becoming one); a due size tier is at its threshold at least
    per_gib = saved / max(rewritten / GiB, 1 / 1024)
    threshold = max(policy.min_small_files - 1, 1) / max(
        policy.min_small_files * small_size / 2 / GiB, 1 / 1024
    )
    score = max(per_gib / threshold, 1.0 if tiered else 0.0)
    engine, place = _engine(policy, rewritten)
    return Decision(
        name,
        "compaction",
        True,
        f"{why}; rewrites {files} files, {_size(rewritten)}, into ~{after}; {place}"
        if tiered
        else f"{why}; rewrites {_size(rewritten)} into ~{after} files; {place}",
        score=score,
        bytes_rewritten=rewritten,
        partitions=tuple(dict(p.values) for p in chosen),
        engine=engine,
        details={"files": files, "files_after": after, "min_file_size": under},
    )


def _tier_bound(p: PartitionHealth, policy: MaintenancePolicy) -> int | None:
    """The size under which a partition's files merge for its size tiers: the upper bound of its
    largest tier holding ``min_tier_files`` files, among the tiers wholly under half the target
    (any two of their files fit in one target-sized file, so a merge always makes progress);
    None when no tier is due."""
    if policy.min_tier_files is None:
        return None
    bound = None
    for k, n in enumerate(p.tier_files):
        upper = policy.small_file_size << (k + 1)
        if 2 * upper > policy.target_file_size:
            break
        if n >= policy.min_tier_files:
            bound = upper
    return bound


def _tiers_under(p: PartitionHealth, small_size: int, under: int) -> tuple[int, int]:
    """Files and bytes of ``p``'s size tiers under ``under`` (what a plan with that minimum
    file size rewrites beside the small files)."""
    kept = [k for k in range(len(p.tier_files)) if small_size << (k + 1) <= under]
    return sum(p.tier_files[k] for k in kept), sum(p.tier_bytes[k] for k in kept)


def _full_compaction(name, health: TableHealth, policy: MaintenancePolicy, below_target: int) -> Decision:
    """Every file under the target size rewritten (what OPTIMIZE does): the compacted files have
    piled up too, and a read opens each of them."""
    histogram = [b for b in health.file_size_histogram if b["min_bytes"] < policy.target_file_size]
    rewritten = sum(b["bytes"] for b in histogram)
    after = max(1, len(health.partitions), -(-rewritten // policy.target_file_size))
    saved = max(0, below_target - after)
    score = saved / max(policy.max_files_below_target - 1, 1)
    engine, place = _engine(policy, rewritten)
    return Decision(
        name,
        "compaction",
        True,
        f"{below_target} files under the target {_size(policy.target_file_size)} in the table (threshold "
        f"{policy.max_files_below_target}): a full compaction rewrites {_size(rewritten)} into ~{after} "
        f"files; {place}",
        score=score,
        bytes_rewritten=rewritten,
        engine=engine,
        details={"files": below_target, "files_after": after, "min_file_size": policy.target_file_size},
    )


def _dv_purge(name, health: TableHealth, policy: MaintenancePolicy, removed) -> Decision:
    chosen = [p for p in health.partitions if p.deleted_rows_ratio > policy.max_deleted_rows_ratio]
    worst = max((p.deleted_rows_ratio for p in health.partitions), default=0.0)
    if not chosen:
        return Decision(
            name,
            "dv_purge",
            False,
            f"deletion vectors hide at most {worst:.0%} of a partition's rows; threshold "
            f"{policy.max_deleted_rows_ratio:.0%}",
        )
    hidden = sum(p.num_deleted_rows for p in chosen)
    rewritten = sum(p.size_bytes for p in chosen)  # the files with DVs are rewritten: an upper bound
    rows = sum((p.num_rows or 0) + p.num_deleted_rows for p in chosen)
    ratio = hidden / rows if rows else 0.0
    score = ratio / max(policy.max_deleted_rows_ratio, 1e-9)
    engine, where = _engine(policy, rewritten)
    return Decision(
        name,
        "dv_purge",
        True,
        f"deletion vectors hide {hidden} rows ({ratio:.0%}) in {len(chosen)} partition(s) over "
        f"{policy.max_deleted_rows_ratio:.0%}; rewrites up to {_size(rewritten)}; {where}",
        score=score,
        bytes_rewritten=rewritten,
        partitions=tuple(dict(p.values) for p in chosen),
        engine=engine,
    )


def _clustering(name, health: TableHealth, policy: MaintenancePolicy, removed) -> Decision:
    """OPTIMIZE of a liquid-clustered table's files no OPTIMIZE clustered yet (new data): a read
    filtering on the clustering columns skips clustered files and opens every unclustered one."""
    if not health.clustered:
        return Decision(name, "clustering", False, "not a liquid-clustered table")
    files, nbytes = health.num_unclustered_files, health.unclustered_bytes
    limit = policy.min_unclustered_files
    if files < limit:
        return Decision(
            name,
            "clustering",
            False,
            f"{files} files ({_size(nbytes)}) not clustered yet; threshold {limit}",
        )
    engine, place = _engine(policy, nbytes)
    return Decision(
        name,
        "clustering",
        True,
        f"{files} files ({_size(nbytes)}) not clustered yet (threshold {limit}): OPTIMIZE clusters "
        f"them; {place}",
        score=files / limit,
        bytes_rewritten=nbytes,
        engine=engine,
        details={"files": files},
    )


def _checkpoint(name, health: TableHealth, policy: MaintenancePolicy, removed) -> Decision:
    lag = health.versions_since_checkpoint
    limit = policy.max_versions_since_checkpoint
    if lag < limit:
        return Decision(
            name, "checkpoint", False, f"{lag} commits since the last checkpoint; threshold {limit}"
        )
    return Decision(
        name,
        "checkpoint",
        True,
        f"{lag} commits since the last checkpoint (threshold {limit}): every load replays them",
        score=lag / limit,
    )


def _log_cleanup(name, health: TableHealth, policy: MaintenancePolicy, removed, *, now: int) -> Decision:
    """Expired log files (commits and checkpoints older than ``delta.logRetentionDuration``):
    every listing of the log pages through them. Cleanup removes a day at a time and only up to a
    checkpoint, so it is due once the oldest commit is a day past the retention and a checkpoint
    follows it."""
    oldest, stamp = health.oldest_log_version, health.oldest_log_timestamp
    days = health.log_retention_ms / DAY_MS
    if oldest is None or stamp is None:
        return Decision(name, "log_cleanup", False, "no commit file in the log")
    age = (now - stamp) / DAY_MS
    past = age - days
    if past < 1:
        return Decision(
            name,
            "log_cleanup",
            False,
            f"the oldest commit (v{oldest}) is {age:.1f} days old; the log keeps {days:g} days",
        )
    checkpoint = health.last_checkpoint_version
    if checkpoint is None or checkpoint <= oldest:
        return Decision(
            name,
            "log_cleanup",
            False,
            f"the oldest commit (v{oldest}) is {past:.1f} days past the {days:g}-day log retention, but no "
            "checkpoint follows it: a checkpoint comes first",
        )
    return Decision(
        name,
        "log_cleanup",
        True,
        f"the oldest commit (v{oldest}) is {past:.1f} days past the {days:g}-day log retention: cleanup "
        f"deletes the expired log files up to a checkpoint (v{checkpoint} is the newest)",
        score=past,
    )


def _vacuum(name, health: TableHealth, policy: MaintenancePolicy, removed) -> Decision:
    if removed is None:
        return Decision(name, "vacuum", False, "unvacuumed files unknown (no health tracker for this table)")
    freed = int(removed.get("expired_bytes", 0))
    files = int(removed.get("expired_files", 0))
    waiting = int(removed.get("bytes", 0))
    if freed < policy.min_vacuum_bytes:
        return Decision(
            name,
            "vacuum",
            False,
            f"{_size(freed)} removed more than {policy.retention_hours:g} h ago ({_size(waiting)} removed "
            f"in all); threshold {_size(policy.min_vacuum_bytes)}",
        )
    return Decision(
        name,
        "vacuum",
        True,
        f"frees {_size(freed)} in {files} files removed more than {policy.retention_hours:g} h ago "
        f"(threshold {_size(policy.min_vacuum_bytes)})",
        score=freed / max(policy.min_vacuum_bytes, 1),
    )


def _manifest(name, policy: MaintenancePolicy, lag: ManifestLag | None) -> Decision:
    """Symlink manifests: a reader of them sees the table as of the newest manifest."""
    if lag is None:
        return Decision(name, "manifest", False, "manifests not looked at")
    if lag.manifests == 0:
        return Decision(
            name,
            "manifest",
            True,
            f"no symlink manifest yet: a reader of the symlink table sees nothing of v{lag.version}",
            score=1.0,
        )
    limit = policy.max_manifest_commits_behind
    behind = f"{lag.commits_behind}{'+' if lag.capped else ''}"
    if lag.commits_behind < limit:
        return Decision(
            name,
            "manifest",
            False,
            f"the manifests are {behind} commit(s) behind v{lag.version}; threshold {limit}",
        )
    return Decision(
        name,
        "manifest",
        True,
        f"the manifests are {behind} commit(s) behind v{lag.version} (first v{lag.first_behind}; "
        f"threshold {limit}): a reader of them misses those changes",
        score=lag.commits_behind / limit,
        details={"commits_behind": lag.commits_behind, "first_behind": lag.first_behind},
    )


# --- writers first ----------------------------------------------------------------------------


def yield_to_writers(
    decisions: Iterable[Decision], busy: Iterable[tuple[Mapping[str, str | None], str]]
) -> list[Decision]:
    """The decisions with the partitions concurrent DML is working in left out of compaction and
    DV purge. ``busy`` pairs a partition (physical names, serialized values) with what changed it
    (``"DELETE v12, 3 min ago"``). A rewrite of a partition a DML is about to commit in would make
    one of the two plan again (the DML, past a rewrite that changed no rows: ``transaction.
    rerun_past_rearrangements``; the maintenance, on its next run) for nothing. A table without
    partitions, and a full compaction, do not yield: there is no other place to work, and the
    writer's commit still wins."""
    touched: dict[tuple, str] = {}
    for values, what in busy:
        if values:
            touched.setdefault(tuple(sorted(values.items())), what)
    out = []
    for d in decisions:
        if not (d.run and d.kind in REWRITE_KINDS and d.partitions and touched):
            out.append(d)
            continue
        keys = [tuple(sorted(p.items())) for p in d.partitions]
        keep = [p for p, k in zip(d.partitions, keys, strict=True) if k not in touched]
        left = [touched[k] for k in dict.fromkeys(keys) if k in touched]
        if len(keep) == len(d.partitions):
            out.append(d)
            continue
        why = f"{len(left)} partition(s) left to concurrent DML ({'; '.join(sorted(set(left))[:3])})"
        if not keep:
            out.append(_skip(d, f"yields to writers: {why}"))
            continue
        share = len(keep) / len(d.partitions)
        out.append(
            dataclasses.replace(
                d,
                reason=f"{d.reason}; {why}",
                bytes_rewritten=int(d.bytes_rewritten * share),
                cpu_seconds=d.cpu_seconds * share,
                partitions=tuple(keep),
            )
        )
    return out


# --- all tables ---------------------------------------------------------------------------------


def rank(
    decisions: Iterable[Decision],
    policies: Mapping[str, MaintenancePolicy],
    *,
    spent_today: Mapping[str, Spending] | None = None,
    max_concurrent_jobs: int | None = None,
    running: int = 0,
) -> list[Decision]:
    """The decisions in the order to run them (highest score first, skips last), with what a
    table's daily budgets (bytes rewritten, CPU seconds: ``spent_today`` says what each table's
    rewrites of the day used) or the global job cap leave out turned into skips that say so."""
    used = {t: (s.bytes_rewritten, s.cpu_seconds) for t, s in (spent_today or {}).items()}
    wanted = sorted((d for d in decisions if d.run), key=lambda d: (-d.score, d.table, d.kind))
    skipped = [d for d in decisions if not d.run]
    slots = None if max_concurrent_jobs is None else max(0, max_concurrent_jobs - running)
    out = []
    for d in wanted:
        policy = policies.get(d.table)
        nbytes, cpu = used.get(d.table, (0, 0.0))
        over = _over_budget(policy, d, nbytes, cpu) if policy is not None and d.bytes_rewritten else None
        if over:
            out.append(_skip(d, f"over budget: {over}"))
            continue
        if slots is not None and slots <= 0:
            out.append(_skip(d, f"waits: {max_concurrent_jobs} maintenance job(s) at once at most"))
            continue
        used[d.table] = (nbytes + d.bytes_rewritten, cpu + d.cpu_seconds)
        if slots is not None:
            slots -= 1
        out.append(d)
    return out + sorted(skipped, key=lambda d: (d.table, KINDS.index(d.kind)))


def _over_budget(policy: MaintenancePolicy, d: Decision, nbytes: int, cpu: float) -> str | None:
    """Which of the table's daily budgets ``d`` would exceed, said with the numbers."""
    limit = policy.max_bytes_rewritten_per_day
    if limit is not None and nbytes + d.bytes_rewritten > limit:
        return f"{_size(nbytes)} rewritten today + {_size(d.bytes_rewritten)} > {_size(limit)} a day"
    seconds = policy.max_cpu_seconds_per_day
    if seconds is not None and cpu + d.cpu_seconds > seconds:
        return f"{cpu:.0f} CPU-s spent today + ~{d.cpu_seconds:.0f} CPU-s > {seconds:g} CPU-s a day"
    return None


def _skip(d: Decision, why: str) -> Decision:
    return dataclasses.replace(d, run=False, reason=f"{why} (would: {d.reason})", details={})


__all__ = [
    "DEFAULT_KINDS",
    "KINDS",
    "REWRITE_KINDS",
    "Decision",
    "MaintenancePolicy",
    "decide",
    "rank",
    "yield_to_writers",
]
