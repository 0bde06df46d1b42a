"""``DeltaAlterOperator``: one ALTER TABLE (``DeltaTable.alter``), retry-safe and rerun-safe."""

from __future__ import annotations

import inspect
from typing import Any

from deltaplane.operators.operators.base import DeltaTableOperator
from deltaplane.operators.utils.arguments import Arguments, templated

# The engine's ALTERs an Airflow task may run (``DeltaTable.alter``'s methods).
ACTIONS = (
    "add_columns",
    "rename_column",
    "drop_columns",
    "change_column",
    "change_column_type",
    "drop_not_null",
    "set_column_comment",
    "move_column",
    "set_table_properties",
    "unset_table_properties",
    "add_constraint",
    "drop_constraint",
    "set_column_default",
    "drop_column_default",
    "cluster_by",
    "set_table_description",
    "add_feature",
    "drop_feature",
)


class DeltaAlterOperator(DeltaTableOperator):
    """One ALTER of a table, as ``DeltaTable.alter.<action>(**arguments)`` runs it (one commit,
    Delta Spark's operation name): ``action`` is one of ``ACTIONS`` (``rename_column``,
    ``drop_columns``, ``change_column_type``, ``set_table_properties``, ...), ``arguments`` its
    keyword arguments (templated; checked against the action's signature when the DAG is parsed).

    Safe to run again: a retry finds its own commit (the run's txn), and a rerun (a cleared task,
    a new DAG run) whose change the table already has commits nothing (``reason`` says so): a
    rename whose old column is gone and new one is there, a drop of columns already gone, an
    added column already there with that type, a constraint already there with that expression,
    properties already set, a change that leaves the schema as it is, features already added, a
    feature no longer in the protocol (a drop that finished). An ALTER the table refuses
    (no column mapping for a rename, a narrowing type change, ...) fails without retries.

    XCom: the common keys (``version``, ``operation``), ``action``, ``reason`` when nothing was
    committed."""

    template_fields = ("table_uri", "arguments")
    template_fields_renderers = {"arguments": "json"}
    operation_name = "ALTER"

    def __init__(
        self, *, table_uri: str, action: str, arguments: dict[str, Any] | None = None, **kwargs: Any
    ):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        action = check.choice("action", action, ACTIONS)
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict) and not templated(arguments):
            raise check.type_error("arguments", "a dict of the action's keyword arguments", arguments)
        if isinstance(arguments, dict):
            _check_signature(check, action, arguments)
        super().__init__(table_uri=table_uri, **kwargs)
        self.action = action
        self.arguments = arguments

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        if not isinstance(self.arguments, dict):
            raise TypeError(
                f"{self.task_id}: arguments rendered to {type(self.arguments).__name__}, not a dict"
            )
        if table is None:
            raise ValueError(f"{self.task_id}: no Delta table at {self.table_uri} to alter")
        done = already_done(table, self.action, self.arguments)
        if done is not None:
            self.log.info("%s: %s; nothing to do", self.table_uri, done)
            return {"version": None, "action": self.action, "reason": done}
        result = getattr(table.alter, self.action)(**self.arguments)
        out: dict[str, Any] = {"version": None if result.skipped else result.version, "action": self.action}
        if result.skipped:
            out["reason"] = "the table already is as this ALTER would make it"
        self.log.info("%s: %s -> version %s", self.table_uri, self.action, out["version"])
        return out


def _check_signature(check: Arguments, action: str, arguments: dict[str, Any]) -> None:
    from deltaplane.engine import TableAlterer

    signature = inspect.signature(getattr(TableAlterer, action))
    try:
        signature.bind(None, **arguments)
    except TypeError as e:
        raise check.value_error("arguments", f"do not fit alter.{action}{signature}: {e}") from None


def already_done(table, action: str, arguments: dict[str, Any]) -> str | None:
    """Why the table already has what this ALTER would make (a rerun of a task that committed
    before), or None."""
    schema = table.snapshot.schema
    config = table.metadata.configuration
    if action == "rename_column":
        old, new = arguments.get("column"), arguments.get("new_name")
        parts = str(old).split(".")
        if _find(schema, parts) is None and _find(schema, [*parts[:-1], str(new)]) is not None:
            return f"column {old!r} is already renamed to {new!r}"
    elif action == "drop_columns":
        columns = arguments.get("columns")
        columns = [columns] if isinstance(columns, str) else list(columns or [])
        if columns and all(_find(schema, str(c).split(".")) is None for c in columns):
            return f"column(s) {', '.join(map(repr, columns))} already dropped"
    elif action == "add_columns":
        import pyarrow as pa

        from deltaplane.engine import from_arrow_schema

        fields = arguments.get("fields")
        if isinstance(fields, pa.Field):
            fields = [fields]
        if isinstance(fields, (list, pa.Schema)) and fields:
            wanted = from_arrow_schema(pa.schema(list(fields))).fields
            if all((f := schema.find(w.name)) is not None and f.type == w.type for w in wanted):
                return f"column(s) {', '.join(w.name for w in wanted)} already there"
    elif action == "add_constraint":
        constraints = arguments.get("constraints") or {}
        if constraints and all(
            config.get(f"delta.constraints.{k.lower()}") == v for k, v in constraints.items()
        ):
            return f"constraint(s) {', '.join(constraints)} already there"
    elif action == "set_table_properties":
        properties = arguments.get("properties") or {}
        if properties and all(config.get(k) == str(v) for k, v in properties.items()):
            return "the properties already have these values"
    elif action == "drop_feature":
        feature = arguments.get("feature")
        if isinstance(feature, str) and feature.strip() and _has_feature(table, feature.strip()) is False:
            return f"feature {feature!r} is not in the table's protocol (already dropped)"
    elif action == "add_feature":
        from deltaplane.engine import InvalidArgumentError, feature_names

        try:
            names = feature_names(arguments.get("feature"))
        except InvalidArgumentError:
            return None  # the ALTER itself says what is wrong
        if all(_has_feature(table, n) for n in names):
            return f"feature(s) {', '.join(names)} already in the table's protocol"
    elif action == "unset_table_properties":
        keys = arguments.get("keys")
        keys = [keys] if isinstance(keys, str) else list(keys or [])
        if keys and all(k not in config for k in keys):
            return "the properties are already unset"
    return None


def _has_feature(table, name: str) -> bool | None:
    """Whether the table's protocol has the feature (None for a name no feature has: the ALTER
    reports that)."""
    from deltaplane.engine import FEATURES, reader_features, writer_features

    if name not in FEATURES:
        return None
    protocol = table.protocol()
    return name in reader_features(protocol) | writer_features(protocol)


def _find(schema, parts: list[str]):
    t: Any = schema
    found = None
    for part in parts:
        find = getattr(t, "find", None)
        found = find(part) if find is not None else None
        if found is None:
            return None
        t = found.type
    return found
