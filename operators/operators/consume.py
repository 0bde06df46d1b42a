"""``DeltaConsumeOperator``: feed a downstream table from a source table's new commits, exactly
once (the engine's ``deltaplane.engine.consume.consume_appends``)."""

from __future__ import annotations

from typing import Any

from deltaplane.operators.operators.base import DeltaTableOperator

ON_CHANGE = ("fail", "skip", "changes")  # deltaplane.engine.consume.ON_CHANGE (checked without the engine)


class DeltaConsumeOperator(DeltaTableOperator):
    """Append the rows of ``source_uri``'s new commits to this table (``table_uri``), exactly
    once: the last source version consumed is recorded in the target's own log as
    ``txn(appId="consume:<source>", version)``, so the watermark commits atomically with the
    rows it covers (a rerun, retry or duplicate trigger event finds it and reads on from there).

    What a source commit did to rows decides (``deltaplane.engine.tail``'s kinds): an ``append``
    gives its new rows (never the rows of files a deletion-vector DELETE re-added); OPTIMIZE and
    other commits that change no rows give nothing; a ``delete``, ``update`` or ``restore`` (a
    RESTORE's rows came back: they were copied when first added) follows ``on_change``:
    ``"fail"`` (default: the task fails naming the version), ``"skip"`` (ignore it), or
    ``"changes"`` (the source's change data feed rows for that commit; needs
    ``delta.enableChangeDataFeed`` on the source). Rows get ``_source_version``, and with
    ``"changes"`` also ``_change_type`` (``insert`` for appends). ``max_versions`` bounds the
    source commits one run reads (the next run reads on). The XCom is the operators' one shape
    (``version``: the target commit; ``already_applied``: a concurrent or earlier try holds this
    range) plus ``source_versions`` (read and written), ``skipped_versions``, ``watermark`` (the
    last source version consumed) and ``rows``. OpenLineage: the source table (at
    ``watermark``) in, the target out."""

    template_fields = ("table_uri", "source_uri")
    creates_table = True
    operation_name = "CONSUME"  # the XCom's operation when nothing was committed

    def __init__(
        self,
        *,
        table_uri: str,
        source_uri: str,
        on_change: str = "fail",
        skip_change_commits: bool | None = None,
        max_versions: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        if skip_change_commits is not None:  # the earlier spelling of on_change="skip"
            if not isinstance(skip_change_commits, bool):
                raise TypeError(f"{self.task_id}: skip_change_commits must be True or False")
            on_change = "skip" if skip_change_commits else on_change
        if not isinstance(on_change, str) or on_change.lower() not in ON_CHANGE:
            raise ValueError(
                f"{self.task_id}: on_change must be one of {', '.join(ON_CHANGE)}, got {on_change!r}"
            )
        if max_versions is not None and (
            isinstance(max_versions, bool) or not isinstance(max_versions, int) or max_versions < 1
        ):
            raise ValueError(f"{self.task_id}: max_versions must be a positive int, got {max_versions!r}")
        self.source_uri = source_uri
        self.on_change = on_change.lower()
        self.max_versions = max_versions

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from deltaplane.engine import consume_appends

        result = consume_appends(
            self.source_uri,
            self.table_uri,
            on_change=self.on_change,
            storage_options=hook.settings.storage_options,
            max_versions=self.max_versions,
        )
        if result.version is not None or result.skipped:
            self.log.info(
                "%s: %d rows from %s versions %s -> version %s",
                self.table_uri,
                result.rows,
                self.source_uri,
                result.source_versions,
                result.version,
            )
        else:
            self.log.info(
                "%s: nothing to consume from %s (%s)", self.table_uri, self.source_uri, result.reason
            )
        out = result.to_dict()
        out["already_applied"] = out.pop("skipped")
        return out

    def lineage_datasets(self, result, facts):
        from deltaplane.operators.utils.lineage import Ref, table_ref

        source = Ref(self.source_uri, table=True)
        if result is not None:
            source.version = result.get("watermark")
            source.rows = result.get("rows")
        return [source], [table_ref(self.table_uri, result, facts, output=True)]
