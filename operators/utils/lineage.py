"""OpenLineage for every deltaplane operator, built in one place.

Airflow's OpenLineage provider calls ``get_openlineage_facets_on_start/complete/failure`` on an
operator (``DeltaTableOperator`` defines them); each asks the operator which datasets it reads
and writes (``lineage_datasets``: ``Ref`` values, URIs and what the task knows about them) and
turns them into an ``OperatorLineage`` here:

* **names** follow OpenLineage's naming conventions (``openlineage.client.naming``): a local path
  is namespace ``file`` and its absolute path, ``s3://bucket/key`` is namespace ``s3://bucket``
  and name ``key``; any other ``scheme://authority/path`` is ``scheme://authority`` and ``path``.
  Nothing else of a location is used, so no storage option can reach an event;
* **facets** of a Delta table: ``schema`` (the table's columns, nested ones included, Delta type
  names), ``version`` (the table version the task committed, or the one it read), on outputs
  ``outputStatistics`` (rows, files and bytes the commit added), on inputs ``inputStatistics``,
  and ``deltaplane`` (``DeltaCommitDatasetFacet``: operation, rows added and deleted, files
  added and removed, whether the task committed or found its work already applied);
* the quality gate's expectations become ``dataQualityAssertions`` on the batch it read.

Lineage never fails a task: every error is logged and the task's events carry no datasets.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import attr
from openlineage.client.generated.base import DatasetFacet

log = logging.getLogger(__name__)

FACET_SCHEMA = "urn:deltaplane:openlineage:DeltaCommitDatasetFacet:1"


@attr.define
class DeltaCommitDatasetFacet(DatasetFacet):
    """What a deltaplane task did to a Delta table (custom facet ``deltaplane``)."""

    operation: str | None = attr.field(default=None)
    committed: bool = attr.field(default=False)
    alreadyApplied: bool = attr.field(default=False)
    readVersion: int | None = attr.field(default=None)
    kind: str | None = attr.field(default=None)
    rowsAdded: int | None = attr.field(default=None)
    rowsDeleted: int | None = attr.field(default=None)
    filesAdded: int | None = attr.field(default=None)
    filesRemoved: int | None = attr.field(default=None)
    _additional_skip_redact = [
        "operation",
        "committed",
        "alreadyApplied",
        "readVersion",
        "kind",
        "rowsAdded",
        "rowsDeleted",
        "filesAdded",
        "filesRemoved",
    ]

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA


@dataclass
class Ref:
    """A dataset a task reads or writes: its location and what the task knows of it.

    ``table``: a Delta table (gets ``schema``, ``version`` and the commit's facets when known);
    otherwise files or a folder of them (landing files, a staging area, a MERGE source)."""

    uri: str
    table: bool = True
    schema: str | None = None  # the Delta schema string
    version: int | str | None = None  # a table version, or a staged batch's name
    rows: int | None = None
    files: int | None = None
    bytes: int | None = None
    commit: dict[str, Any] | None = None  # DeltaCommitDatasetFacet's fields
    assertions: list[dict[str, Any]] | None = None  # [{"assertion", "success", "column"}]
    extra: dict[str, Any] = field(default_factory=dict)


def dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage ``(namespace, name)`` of a location (local path or ``scheme://...``)."""
    from openlineage.client.naming.dataset import S3, LocalFileSystem

    text = str(uri)
    if text.startswith("file:"):
        text = "/" + text[len("file:") :].lstrip("/")
    if "://" not in text:
        path = os.path.abspath(text)
        path = path.rstrip("/") or "/"
        naming = LocalFileSystem(path=path)
        return naming.get_namespace(), naming.get_name()
    parts = urlsplit(text)
    scheme = "s3" if parts.scheme in ("s3", "s3a", "s3n") else parts.scheme
    host = parts.hostname or ""  # never the user info: credentials do not belong in a name
    if parts.port:
        host = f"{host}:{parts.port}"
    key = parts.path.strip("/") or "/"
    if scheme == "s3" and host:
        naming = S3(bucket_name=host, object_key=key)
        return naming.get_namespace(), naming.get_name()
    return f"{scheme}://{host}", "/" + key.lstrip("/")


def schema_facet(schema_string: str):
    """``SchemaDatasetFacet`` of a Delta schema string (nested fields included)."""
    from openlineage.client.facet_v2 import schema_dataset

    from deltaplane.engine import ArrayType, MapType, StructType, parse_schema

    def type_name(t) -> str:
        if isinstance(t, StructType):
            return "struct"
        if isinstance(t, ArrayType):
            return "array"
        if isinstance(t, MapType):
            return "map"
        return str(t.to_json())

    def children(t) -> list:
        if isinstance(t, StructType):
            return [column(f.name, f.type, f.metadata, i) for i, f in enumerate(t.fields, 1)]
        if isinstance(t, ArrayType):
            return [column("_element", t.element_type, {}, None)]
        if isinstance(t, MapType):
            return [column("key", t.key_type, {}, None), column("value", t.value_type, {}, None)]
        return []

    def column(name: str, t, metadata: dict, position: int | None):
        comment = metadata.get("comment") if isinstance(metadata, dict) else None
        return schema_dataset.SchemaDatasetFacetFields(
            name=name,
            type=type_name(t),
            description=str(comment) if comment is not None else None,
            ordinal_position=position,
            fields=children(t),
        )

    return schema_dataset.SchemaDatasetFacet(fields=children(parse_schema(schema_string)))


def _facets(ref: Ref) -> dict[str, Any]:
    from openlineage.client.facet_v2 import dataset_version_dataset

    facets: dict[str, Any] = {}
    if ref.schema:
        facets["schema"] = schema_facet(ref.schema)
    if ref.version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=str(ref.version)
        )
    if ref.commit is not None:
        facets["deltaplane"] = DeltaCommitDatasetFacet(**ref.commit)
    return facets


def _counts(ref: Ref) -> dict[str, int]:
    return {
        k: int(v)
        for k, v in (("rowCount", ref.rows), ("fileCount", ref.files), ("size", ref.bytes))
        if v is not None
    }


def input_dataset(ref: Ref):
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq
    from openlineage.client.facet_v2 import input_statistics_input_dataset as stats

    namespace, name = dataset_name(ref.uri)
    counts = _counts(ref)
    input_facets: dict[str, Any] = {}
    if counts:
        input_facets["inputStatistics"] = stats.InputStatisticsInputDatasetFacet(**counts)
    if ref.assertions:
        input_facets["dataQualityAssertions"] = dq.DataQualityAssertionsDatasetFacet(
            assertions=[
                dq.Assertion(
                    assertion=str(a["assertion"]), success=bool(a["success"]), column=a.get("column")
                )
                for a in ref.assertions
            ]
        )
    return InputDataset(namespace=namespace, name=name, facets=_facets(ref), inputFacets=input_facets)


def output_dataset(ref: Ref):
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import output_statistics_output_dataset

    namespace, name = dataset_name(ref.uri)
    counts = _counts(ref)
    output_facets = (
        {"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(**counts)}
        if counts
        else {}
    )
    return OutputDataset(namespace=namespace, name=name, facets=_facets(ref), outputFacets=output_facets)


def operator_lineage(operator, result: dict[str, Any] | None, facts: dict[str, Any] | None):
    """The ``OperatorLineage`` of ``operator`` (``result``: its XCom, ``None`` before it ran or
    when it failed; ``facts``: what its run learnt of the table, see ``table_facts``). Never
    raises: an error is logged and gives an empty lineage."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    try:
        inputs, outputs = operator.lineage_datasets(result, facts or {})
        return OperatorLineage(
            inputs=[input_dataset(r) for r in inputs], outputs=[output_dataset(r) for r in outputs]
        )
    except Exception:
        log.warning(
            "%s: no OpenLineage datasets for task %s (the task itself is not affected)",
            type(operator).__name__,
            getattr(operator, "task_id", "?"),
            exc_info=True,
        )
        return OperatorLineage()


def table_facts(commit, snapshot_metadata) -> dict[str, Any]:
    """What lineage needs of a table, from the commit a task made or found (``CommitChanges``)
    or else the metadata it read: the schema string, and the commit's counts."""
    facts: dict[str, Any] = {}
    metadata = commit.table_metadata if commit is not None else snapshot_metadata
    if metadata is not None:
        facts["schema"] = metadata.schema_string
    if commit is not None:
        added_bytes = None
        if commit.added is not None and commit.added.num_rows == commit.files_added:
            import pyarrow.compute as pc

            added_bytes = int(pc.sum(commit.added.column("size")).as_py() or 0) if commit.files_added else 0
        facts.update(
            kind=commit.kind,
            rows_added=commit.rows_added,
            rows_deleted=commit.rows_deleted,
            files_added=commit.files_added,
            files_removed=commit.files_removed,
            bytes_added=added_bytes,
        )
    return facts


def table_ref(uri: str, result: dict[str, Any] | None, facts: dict[str, Any], *, output: bool) -> Ref:
    """The task's Delta table as a ``Ref``: schema, the version committed (or read), and for an
    output the commit's counts."""
    ref = Ref(uri=uri, table=True, schema=facts.get("schema"))
    if result is None:
        return ref
    version = result.get("version")
    ref.version = version if version is not None else result.get("read_version")
    if output:
        ref.commit = {
            "operation": result.get("operation"),
            "committed": bool(result.get("committed")),
            "alreadyApplied": bool(result.get("already_applied")),
            "readVersion": result.get("read_version"),
            "kind": facts.get("kind"),
            "rowsAdded": facts.get("rows_added"),
            "rowsDeleted": facts.get("rows_deleted"),
            "filesAdded": facts.get("files_added"),
            "filesRemoved": facts.get("files_removed"),
        }
        if result.get("committed"):
            ref.rows = facts.get("rows_added")
            ref.files = facts.get("files_added")
            ref.bytes = facts.get("bytes_added")
    return ref


def location_of(path: str) -> str:
    """The folder a staged manifest (or any file) is in: the dataset of a staging area."""
    text = str(path).rstrip("/")
    return text.rsplit("/", 1)[0] if "/" in text else "."


__all__ = [
    "DeltaCommitDatasetFacet",
    "Ref",
    "dataset_name",
    "input_dataset",
    "location_of",
    "operator_lineage",
    "output_dataset",
    "schema_facet",
    "table_facts",
    "table_ref",
]
