"""Operator arguments checked when the DAG file is parsed.

``Arguments`` checks one operator's arguments in its ``__init__``: a wrong type is a
``TypeError``, a wrong value a ``ValueError``, each naming the operator, the task id and the
argument (Airflow shows them as the DAG file's import error). Templated values (``templated``)
are left for the operator to check after rendering.
"""

from __future__ import annotations

import os
from typing import Any


def templated(value: Any) -> bool:
    """A value Airflow fills in at run time: a Jinja string, or an ``XComArg``."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    from airflow.sdk import XComArg

    return isinstance(value, XComArg)


def location(value: Any) -> Any:
    """A location argument (a table URI, a folder, a manifest, source files) as Airflow renders
    and serializes it: an ``os.PathLike`` (a ``pathlib.Path``) becomes its string, in a list too;
    anything else (a string, a template, an ``XComArg``) is left as it is."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list | tuple):
        return [location(v) for v in value]
    return value


class LocationArguments:
    """Operators whose location arguments may be given as ``pathlib.Path``: Airflow's
    ``BaseOperator`` passes every attribute it sets through ``_convert_<name>``, so these are
    strings from construction on (templated fields must be strings to render)."""

    _convert_table_uri = staticmethod(location)
    _convert_source_uri = staticmethod(location)
    _convert_landing = staticmethod(location)
    _convert_staging = staticmethod(location)
    _convert_quarantine_uri = staticmethod(location)
    _convert_staged_manifest = staticmethod(location)
    _convert_source = staticmethod(location)


class Arguments:
    """Checks one operator's arguments in its ``__init__`` (before ``BaseOperator.__init__``, so
    a refused task never joins the DAG); every error names the operator, the task and the
    argument: ``DeltaCompactionOperator(task_id='compact'): zorder_by must be ...``."""

    def __init__(self, operator: type, kwargs: dict[str, Any]):
        self.where = f"{operator.__name__}(task_id={kwargs.get('task_id')!r})"

    def type_error(self, name: str, wanted: str, value: Any) -> TypeError:
        return TypeError(f"{self.where}: {name} must be {wanted}, got {value!r} ({type(value).__name__})")

    def value_error(self, name: str, why: str) -> ValueError:
        return ValueError(f"{self.where}: {name} {why}")

    def boolean(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.type_error(name, "True or False", value)
        return value

    def integer(self, name: str, value: Any, *, minimum: int, optional: bool = False, unit: str = "") -> Any:
        """An int (never a bool or a float) of at least ``minimum``; with ``unit="bytes"`` also a
        size string (``"128MiB"``, ``"1g"``: ``deltaplane.engine.units``, the CLI's and the
        configuration's parser)."""
        if value is None and optional:
            return None
        if unit == "bytes" and isinstance(value, str):
            from deltaplane.engine import parse_size

            try:
                value = parse_size(value, name)
            except ValueError as e:
                raise self.value_error(name, str(e).removeprefix(f"{name} ")) from None
        if isinstance(value, bool) or not isinstance(value, int):
            hint = " (bytes, or a size such as '128MiB')" if unit == "bytes" else ""
            raise self.type_error(name, f"an int{'' if not optional else ' or None'}{hint}", value)
        if value < minimum:
            raise self.value_error(name, f"must be at least {minimum}, got {value}")
        return value

    def number(
        self,
        name: str,
        value: Any,
        *,
        minimum: float,
        maximum: float | None = None,
        above: bool = False,
        optional: bool = False,
    ) -> Any:
        """An int or float in range (``above``: strictly greater than ``minimum``)."""
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.type_error(name, "a number" + (" or None" if optional else ""), value)
        if (value <= minimum if above else value < minimum) or (maximum is not None and value > maximum):
            low = f"greater than {minimum}" if above else f"at least {minimum}"
            high = f" and at most {maximum}" if maximum is not None else ""
            raise self.value_error(name, f"must be {low}{high}, got {value}")
        return value

    def spark_routing(self, threshold_bytes: Any, timeout: Any) -> tuple[Any, Any]:
        """``spark_threshold_bytes`` (a size: above it the work is a Spark job) and
        ``spark_timeout`` (seconds, above 0) of an operator that runs in-process or on Spark."""
        return (
            self.integer("spark_threshold_bytes", threshold_bytes, minimum=0, unit="bytes"),
            self.number("spark_timeout", timeout, minimum=0, above=True),
        )

    def text(self, name: str, value: Any, *, optional: bool = False, template: bool = False) -> Any:
        """A non-empty string (``template``: or an ``XComArg``, resolved at run time)."""
        if value is None and optional:
            return None
        if template and templated(value):
            return value
        if not isinstance(value, str):
            raise self.type_error(name, "a string" + (" or None" if optional else ""), value)
        if not value.strip():
            raise self.value_error(name, "must not be empty")
        return value

    def choice(self, name: str, value: Any, choices: tuple[str | None, ...]) -> Any:
        """One of ``choices``, case-insensitively (``None`` when it is one); returned lower-cased."""
        if value is None and None in choices:
            return None
        allowed = ", ".join(repr(c) for c in choices)
        if not isinstance(value, str):
            raise self.type_error(name, f"one of {allowed}", value)
        normalized = value.strip().lower()
        if normalized not in choices:
            raise self.value_error(name, f"must be one of {allowed} (any case), got {value!r}")
        return normalized

    def columns(self, name: str, value: Any) -> list[str]:
        """Column names: a list (or tuple) of strings, or one string holding one name or several
        separated by commas (``"user_id"``, ``"a, b"``); never a string split into letters."""
        if value is None:
            return []
        if isinstance(value, str):
            names = [part.strip() for part in value.split(",")]
        elif isinstance(value, list | tuple):
            bad = [v for v in value if not isinstance(v, str)]
            if bad:
                raise self.type_error(name, "column names (strings)", bad[0])
            names = [v.strip() for v in value]
        else:
            raise self.type_error(name, "a column name, a comma-separated string or a list of names", value)
        if any(not n for n in names):
            raise self.value_error(name, f"has an empty column name: {value!r}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise self.value_error(name, f"lists {', '.join(twice)} more than once: {value!r}")
        return names

    def table_uri(self, value: Any) -> str:
        value = location(value)
        if not isinstance(value, str):
            raise self.type_error("table_uri", "a string or os.PathLike (a path or URI)", value)
        if not value.strip():
            raise self.value_error("table_uri", "must not be empty")
        return value

    def common(self, kwargs: dict[str, Any]) -> None:
        """The base class's own arguments, when given."""
        if kwargs.get("deltaplane_conn_id") is not None:
            self.text("deltaplane_conn_id", kwargs["deltaplane_conn_id"])
        for name in ("idempotent", "emit_asset"):
            if name in kwargs:
                self.boolean(name, kwargs[name])
