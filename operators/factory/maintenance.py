"""``deltaplane maintenance plan [PATH]``: what the health-driven policy would run now, for every
table of the tables file, one line per table and kind of work, with its reason. A dry run: it reads
each table's log (one full health pass) and changes nothing.

The file is chosen as ``deltaplane config validate`` chooses it (PATH, else ``$DELTAPLANE_CONFIG``,
else ``./config/tables.yaml``). A table that cannot be read is reported on its own line and does not
hide the others; the exit code is 2 when the file is invalid or a table could not be read.
"""

from __future__ import annotations

import json
import time
from typing import Any

from deltaplane.operators.factory.config import cli_report, maintenance_policy, print_errors, tables_file_verb


def plan_tables(config, *, now_ms: int | None = None) -> tuple[list, dict[str, str]]:
    """Every table's decisions, ranked across tables, and the tables that could not be read."""
    from deltaplane.engine import (
        KINDS,
        Decision,
        DeltaError,
        DeltaTable,
        TableNotFoundError,
        decide_table,
        look,
        rank,
    )

    now = int(time.time() * 1000) if now_ms is None else now_ms
    decisions, policies, failures, spent = [], {}, {}, {}
    for name, table in config.tables.items():
        policy = maintenance_policy(table, config.maintenance)
        policies[name] = policy
        try:
            # one look at the snapshot, Arrow over its files (a tracker would be seeded file by
            # file only to be read once)
            seen = look(policy, snapshot=DeltaTable(table.uri).snapshot, now_ms=now)
        except TableNotFoundError:
            decisions += [
                Decision(name, kind, False, "no table yet (its first write creates it)") for kind in KINDS
            ]
            continue
        except (DeltaError, OSError) as e:
            failures[name] = f"{type(e).__name__}: {e}"
            continue
        if seen.spending is not None:
            spent[name] = seen.spending
        decisions += decide_table(name, seen, policy)
    ranked = rank(
        decisions, policies, spent_today=spent, max_concurrent_jobs=config.maintenance.max_concurrent_jobs
    )
    return ranked, failures


def register_cli(sub) -> None:
    """``deltaplane maintenance plan [PATH]`` (entry point ``deltaplane.cli``)."""
    v = tables_file_verb(
        sub,
        "maintenance",
        "the health-driven maintenance policy",
        "plan",
        help="what maintenance each table needs now, and why (a dry run)",
        description="For every table of the tables file (PATH, else $DELTAPLANE_CONFIG, else "
        "config/tables.yaml in the current directory): one line per table and kind of work "
        "(compaction, dv_purge, clustering, checkpoint, log_cleanup, vacuum, manifest), run or skip, with "
        "the numbers and threshold "
        "it decided on; what runs is listed first, in the order it would run. Changes nothing.",
        func=_cmd_plan,
    )
    v.add_argument("--json", action="store_true", help="machine-readable output")


def _cmd_plan(args) -> int:
    report = cli_report(args.path)
    if report is None:
        return 2
    ranked, failures = plan_tables(report.config)
    if args.json:
        out: dict[str, Any] = {
            "decisions": [d.to_dict() for d in ranked],
            "unreadable": failures,
            "invalid": report.errors,
        }
        print(json.dumps(out, indent=2))
    else:
        for d in ranked:
            print(d.line())
        for name, why in failures.items():
            print(f"{name:<20} {'(all)':<11} fail cannot read the table: {why}")
    print_errors(line for lines in report.errors.values() for line in lines)
    return 2 if failures or report.errors else 0
