"""Quality validation of a staged batch with Great Expectations (GX Core, an ephemeral context:
no GX project on disk), whatever runs it: the provider's quality gate, a Spark job, a script.

``validate_staged`` reads a staged write's rows as readers would see them and validates them
against expectations given as ``[{"expectation": "expect_column_values_to_not_be_null",
"kwargs": {"column": "id"}}, ...]`` (snake_case or GX class names). A batch of up to
``max_rows`` rows and ``max_bytes`` staged bytes is validated whole, in one pandas DataFrame; a
larger one ``chunk_rows`` rows at a time (only the columns the expectations name), the
row-level expectations' results (``ROW_LEVEL_EXPECTATIONS``) added up: unexpected counts, percent,
``mostly``, examples with their row numbers in the batch. Expectations that need a whole
column at once are refused for such a batch, with a message saying so. ``summarize`` and
``describe_failure`` turn GX's result into the summary a log line, an XCom and
``rejection.json`` carry.

Great Expectations is an optional extra (``deltaplane[quality]``): it is imported on first use
(``import_great_expectations``), never when this module loads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

QUALITY_MAX_ROWS = 1_000_000

QUALITY_MAX_BYTES = 256 << 20

QUALITY_CHUNK_ROWS = 500_000

# Expectations whose verdict on a row depends on that row alone: validated chunk by chunk and
# added up. Anything else (uniqueness, ordering, aggregates, row counts, types, custom
# expectations) needs the whole batch at once.
ROW_LEVEL_EXPECTATIONS = frozenset(
    {
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_null",
        "expect_column_values_to_be_between",
        "expect_column_values_to_be_in_set",
        "expect_column_values_to_not_be_in_set",
        "expect_column_values_to_match_regex",
        "expect_column_values_to_not_match_regex",
        "expect_column_values_to_match_regex_list",
        "expect_column_values_to_not_match_regex_list",
        "expect_column_values_to_match_like_pattern",
        "expect_column_values_to_not_match_like_pattern",
        "expect_column_values_to_match_like_pattern_list",
        "expect_column_values_to_not_match_like_pattern_list",
        "expect_column_values_to_match_strftime_format",
        "expect_column_values_to_be_dateutil_parseable",
        "expect_column_values_to_be_json_parseable",
        "expect_column_values_to_match_json_schema",
        "expect_column_value_lengths_to_be_between",
        "expect_column_value_lengths_to_equal",
        "expect_column_pair_values_to_be_equal",
        "expect_column_pair_values_a_to_be_greater_than_b",
        "expect_column_pair_values_to_be_in_set",
        "expect_multicolumn_sum_to_equal",
        "expect_select_column_values_to_be_unique_within_record",
    }
)

_EXAMPLES = 20  # examples (and their row numbers) kept per expectation, as GX's partial lists


def import_great_expectations():
    """``great_expectations``, imported safely in any host process.

    GX imports PySpark's Connect helpers when PySpark is installed, and those call
    ``sys.exit(0)`` if the main module has neither ``__spec__`` nor ``__file__`` (they take it
    for a doctest run). Embedded interpreters (pytest-xdist workers, some executors) look like
    that; the task would then "succeed" with exit code 0 without validating anything. So the
    main module is given a placeholder file name for the duration of the import."""
    import sys

    if "great_expectations" in sys.modules:
        return sys.modules["great_expectations"]
    main = sys.modules.get("__main__")
    patched = main is not None and getattr(main, "__spec__", None) is None and not hasattr(main, "__file__")
    if patched:
        main.__file__ = "<deltaplane>"
    try:
        import great_expectations
    finally:
        if patched:
            del main.__file__
    return great_expectations


def snake_name(name: str) -> str:
    """``ExpectColumnValuesToBeUnique`` -> ``expect_column_values_to_be_unique``."""
    if not name[:1].isupper():
        return name
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def expectation_class(name: str):
    gx = import_great_expectations()

    camel = name if name[:1].isupper() else "".join(part.capitalize() for part in name.split("_"))
    cls = getattr(gx.expectations, camel, None)
    if cls is None:
        raise ValueError(f"unknown expectation {name!r} (Great Expectations has no {camel})")
    return cls


def _suite(expectations: list[dict], name: str):
    gx = import_great_expectations()
    suite = gx.ExpectationSuite(name=f"{name}_suite")
    for spec in expectations:
        if not isinstance(spec, dict) or "expectation" not in spec:
            raise ValueError(f"an expectation is {{'expectation': name, 'kwargs': {{...}}}}, got {spec!r}")
        suite.add_expectation(expectation_class(spec["expectation"])(**(spec.get("kwargs") or {})))
    return suite


def _batch_definition(name: str):
    """A pandas batch definition in a fresh ephemeral context, progress bars off (a chunked
    validation would print one per chunk into the task log)."""
    gx = import_great_expectations()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_pandas(name=f"deltaplane_{name}")
    return source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe("whole")


def validate_rows(frame, expectations: list[dict], name: str = "batch") -> dict[str, Any]:
    """Validate a pandas DataFrame whole; a JSON-able summary and the full GX result."""
    definition = _batch_definition(name)  # the context first: GX builds suites inside one
    suite = _suite(expectations, name)
    result = definition.get_batch(batch_parameters={"dataframe": frame}).validate(suite)
    full = result.to_json_dict()
    full.setdefault("meta", {})["deltaplane"] = {"mode": "whole", "chunks": 1, "rows": len(frame)}
    return {"summary": summarize(full, len(frame), chunks=1), "result": full}


def summarize(full: dict, rows: int, *, chunks: int) -> dict[str, Any]:
    """The gate's summary of a GX result: every expectation's counts, and the failed ones with
    examples and the row numbers (in the batch) of those examples."""
    results, failed = [], []
    for r in full.get("results", []):
        config = r.get("expectation_config", {})
        details = r.get("result", {}) or {}
        entry = {
            "expectation": config.get("type"),
            "kwargs": {k: v for k, v in (config.get("kwargs") or {}).items() if k != "batch_id"},
            "success": bool(r.get("success")),
            "element_count": details.get("element_count"),
            "unexpected_count": details.get("unexpected_count"),
            "unexpected_percent": details.get("unexpected_percent"),
        }
        if "observed_value" in details:
            entry["observed_value"] = details["observed_value"]
        results.append(entry)
        if entry["success"]:
            continue
        failure = {
            key: entry[key] for key in ("expectation", "kwargs", "unexpected_count", "unexpected_percent")
        }
        failure["examples"] = (details.get("partial_unexpected_list") or [])[:5]
        failure["rows"] = (details.get("partial_unexpected_index_list") or [])[:5]
        if "observed_value" in entry:
            failure["observed_value"] = entry["observed_value"]
        exception = (r.get("exception_info") or {}).get("exception_message")
        if exception:
            failure["error"] = exception
        failed.append(failure)
    return {
        "success": bool(full.get("success")),
        "rows": rows,
        "evaluated": len(results),
        "chunks": chunks,
        "failed": failed,
        "results": results,
    }


def validate_staged(
    staged,
    expectations: list[dict],
    *,
    max_batch_rows: int = QUALITY_MAX_ROWS,
    max_batch_bytes: int = QUALITY_MAX_BYTES,
    chunk_rows: int = QUALITY_CHUNK_ROWS,
    name: str = "batch",
) -> dict[str, Any]:
    """Validate a ``StagedWrite``: whole when it is within the limits, else chunk by chunk (or
    refused, for expectations that need whole columns). ``{"summary": ..., "result": ...}``."""
    rows, size = staged.num_rows, staged.num_bytes
    if rows <= max_batch_rows and size <= max_batch_bytes:
        return validate_rows(staged.read().to_pandas(), expectations, name=name)
    whole = [
        e for e in expectations if snake_name(str(e.get("expectation", ""))) not in ROW_LEVEL_EXPECTATIONS
    ]
    if whole:
        names = sorted({snake_name(str(e.get("expectation"))) for e in whole})
        reason = (
            f"{', '.join(names)} {'needs' if len(names) == 1 else 'need'} the whole column at once, and "
            f"this batch ({rows} rows, {size} staged bytes) is above what the gate loads whole "
            f"(max_batch_rows={max_batch_rows}, max_batch_bytes={max_batch_bytes}); raise those limits "
            "if the workers have the memory, land smaller batches, or use row-level expectations only"
        )
        summary = {
            "success": False,
            "rows": rows,
            "evaluated": 0,
            "chunks": 0,
            "failed": [],
            "results": [],
            "refused": names,
            "reason": reason,
        }
        return {"summary": summary, "result": {"success": False, "refused": names, "reason": reason}}
    return _validate_chunks(
        _staged_batches(staged, _columns(expectations)), expectations, chunk_rows, name, rows
    )


def _staged_batches(staged, columns: list[str] | None):
    """The staged rows, only ``columns`` of them when the expectations name their columns."""
    known = [c for c in columns or [] if staged.spec.schema.find(c) is not None]
    return staged.to_batches(known if columns is not None and known else None)


def _columns(expectations: list[dict]) -> list[str] | None:
    """The columns the expectations read (``None``: cannot tell, all of them)."""
    names: list[str] = []
    for spec in expectations:
        kwargs = spec.get("kwargs") or {}
        found = [kwargs[k] for k in ("column", "column_A", "column_B") if k in kwargs]
        found += list(kwargs.get("column_list") or [])
        if not found or "row_condition" in kwargs:
            return None
        names += [n for n in found if n not in names]
    return names


def _chunks(reader, chunk_rows: int) -> Iterator:
    """The reader's rows as tables of exactly ``chunk_rows`` rows (the last one shorter)."""
    import pyarrow as pa

    pending: list = []
    count = 0
    for batch in reader:
        if not batch.num_rows:
            continue
        pending.append(batch)
        count += batch.num_rows
        while count >= chunk_rows:
            table = pa.Table.from_batches(pending, reader.schema)
            yield table.slice(0, chunk_rows)
            rest = table.slice(chunk_rows)
            pending, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(pending, reader.schema)


def _validate_chunks(reader, expectations: list[dict], chunk_rows: int, name: str, rows: int) -> dict:
    """Validate ``chunk_rows`` rows at a time and add up the row-level results as GX would have
    computed them on the whole batch: counts summed, percent of the non-missing values,
    ``mostly`` applied to the totals, examples with their row numbers in the batch."""
    definition = _batch_definition(name)
    suite = _suite(expectations, name)
    totals = [
        {
            "element_count": 0,
            "missing_count": 0,
            "unexpected_count": 0,
            "partial_unexpected_list": [],
            "partial_unexpected_index_list": [],
        }
        for _ in expectations
    ]
    configs: list[dict] = [{} for _ in expectations]
    errors: list[dict | None] = [None for _ in expectations]
    offset = chunks = 0
    for table in _chunks(reader, chunk_rows):
        frame = table.to_pandas()
        result = definition.get_batch(batch_parameters={"dataframe": frame}).validate(suite).to_json_dict()
        for i, r in enumerate(result.get("results", [])):
            configs[i] = r.get("expectation_config", {})
            info = r.get("exception_info") or {}
            if info.get("raised_exception") and errors[i] is None:
                errors[i] = info
            details = r.get("result", {}) or {}
            total = totals[i]
            for key in ("element_count", "missing_count", "unexpected_count"):
                total[key] += int(details.get(key) or 0)
            room = _EXAMPLES - len(total["partial_unexpected_list"])
            if room > 0:
                total["partial_unexpected_list"] += (details.get("partial_unexpected_list") or [])[:room]
                total["partial_unexpected_index_list"] += [
                    offset + int(k) for k in (details.get("partial_unexpected_index_list") or [])[:room]
                ]
        offset += table.num_rows
        chunks += 1
    results = []
    for spec, config, total, error in zip(expectations, configs, totals, errors, strict=True):
        considered = total["element_count"] - total["missing_count"]
        unexpected = total["unexpected_count"]
        mostly = float((spec.get("kwargs") or {}).get("mostly", 1.0))
        success = error is None and (considered == 0 or (considered - unexpected) / considered >= mostly)
        details = {
            **total,
            "unexpected_percent": 100.0 * unexpected / considered if considered else None,
            "unexpected_percent_total": (
                100.0 * unexpected / total["element_count"] if total["element_count"] else None
            ),
        }
        entry = {"expectation_config": config, "success": success, "result": details}
        if error is not None:
            entry["exception_info"] = error
        results.append(entry)
    passed = sum(1 for r in results if r["success"])
    full = {
        "success": passed == len(results),
        "results": results,
        "statistics": {
            "evaluated_expectations": len(results),
            "successful_expectations": passed,
            "unsuccessful_expectations": len(results) - passed,
            "success_percent": 100.0 * passed / len(results) if results else None,
        },
        "meta": {
            "deltaplane": {"mode": "chunked", "chunks": chunks, "chunk_rows": chunk_rows, "rows": offset}
        },
    }
    return {"summary": summarize(full, offset or rows, chunks=chunks), "result": full}


def describe_failure(failure: dict) -> str:
    kwargs = failure.get("kwargs") or {}
    column = (
        kwargs.get("column")
        or ", ".join(str(kwargs[k]) for k in ("column_A", "column_B") if k in kwargs)
        or ", ".join(map(str, kwargs.get("column_list") or []))
    )
    text = f"{failure['expectation']}({column})"
    if failure.get("error"):
        return f"{text}: {failure['error']}"
    if failure.get("unexpected_count") is not None:
        percent = failure.get("unexpected_percent")
        text += f": {failure['unexpected_count']} unexpected"
        if percent is not None:
            text += f" ({percent:.3g}%)"
        if failure.get("examples"):
            rows = ", ".join(map(str, failure.get("rows", [])[:3]))
            text += f", e.g. {failure['examples'][:3]}"
            if rows:
                text += f" (rows {rows} of the staged batch)"
    elif "observed_value" in failure:
        text += f": observed {failure['observed_value']!r}"
    return text
