"""What the Airflow tasks add to a landing batch's life (``deltaplane.engine.quarantine`` owns the
batch itself: its name, its move to ``_processed``, its quarantine and rejection record): a task
that rejects a batch fails without retries (``reject``), a clear or rerun of it fails again with
the recorded reason (``raise_if_rejected``), and a run with nothing landed skips its downstream
tasks (``skip_downstream``).
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from deltaplane.engine import (
    QUARANTINE_DIR,
    REJECTION,
    batch_name,
    move_files,
    move_to_quarantine,
    processed_path,
    quarantine_location,
    read_object,
)
from deltaplane.engine import read_rejection as recorded_rejection
from deltaplane.operators.exceptions import BatchRejected


def raise_if_rejected(
    destination: str, options, log, error: type[AirflowFailException] = BatchRejected
) -> None:
    """A clear or rerun of a task whose batch was rejected: it stays rejected, with the reason
    recorded in the quarantine."""
    earlier = recorded_rejection(destination, options)
    if earlier is not None:
        log.error("%s", earlier.get("message"))
        raise error(f"{earlier.get('message')} (rejected earlier; recorded in {destination})")


def reject(
    operator, context, report: dict[str, Any], destination: str, options, *, recorded=None, **moved
) -> BatchRejected:
    """Quarantine a batch a stage refused and say why: the task log, the XCom (``report``) and
    ``rejection.json`` (``report``, ``recorded`` and when); ``moved`` is what
    ``move_to_quarantine`` moves. The exception to fail with."""
    record = {**report, "rejected_at": int(time.time() * 1000), **(recorded or {})}
    move_to_quarantine(destination, options, record, **moved)
    context["ti"].xcom_push(key="return_value", value=operator.shape(report))  # the one XCom shape
    operator.log.error("%s", report["message"])
    return BatchRejected(report["message"])


def skip_downstream(operator, context, out: dict[str, Any], why: str) -> dict[str, Any]:
    """Nothing landed: the operator's XCom is ``out`` and its direct downstream tasks skip."""
    operator.log.info("%s; skipping %s", why, sorted(operator.downstream_task_ids))
    context["ti"].xcom_push(key="return_value", value=operator.shape(out))
    operator.skip(context["ti"], operator.get_direct_relatives(upstream=False))
    return out


__all__ = [
    "QUARANTINE_DIR",
    "REJECTION",
    "batch_name",
    "move_files",
    "move_to_quarantine",
    "processed_path",
    "quarantine_location",
    "raise_if_rejected",
    "read_object",
    "recorded_rejection",
    "reject",
    "skip_downstream",
]
