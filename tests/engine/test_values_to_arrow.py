"""Python values to Arrow without pandas: the JSON route gives exactly what ``pa.array`` gives, or
refuses (and then ``pa.array`` itself converts). The expected side is pyarrow's own conversion."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaplane.engine.values_to_arrow import (
    array_from_values,
    columns_via_json,
    empty_table,
    from_numpy,
    scalar,
    table_from_columns,
    to_numpy,
)

_ZONES = st.builds(
    dt.timezone, st.timedeltas(min_value=dt.timedelta(hours=-23), max_value=dt.timedelta(hours=23))
)
_LEAVES = {
    "bool": (pa.bool_(), st.booleans()),
    "int8": (pa.int8(), st.integers(-200, 200)),
    "int32": (pa.int32(), st.integers(-(2**31) - 5, 2**31 + 5)),
    "int64": (pa.int64(), st.integers(-(2**63) - 5, 2**63 + 5)),
    "uint16": (pa.uint16(), st.integers(-5, 2**16 + 5)),
    "float64": (pa.float64(), st.floats() | st.integers(-(2**60), 2**60)),
    "string": (pa.string(), st.text() | st.text(st.characters(codec=None, categories=["Cs", "Lo", "Cc"]))),
    "large_string": (pa.large_string(), st.text(max_size=5)),
    "decimal": (
        pa.decimal128(7, 2),
        st.decimals(allow_nan=True, allow_infinity=True) | st.integers(-(10**6), 10**6),
    ),
    "date": (pa.date32(), st.dates() | st.datetimes()),
    "timestamp": (pa.timestamp("us"), st.datetimes(timezones=st.none() | _ZONES)),
    "timestamp_utc": (pa.timestamp("us", tz="UTC"), st.datetimes(timezones=st.none() | _ZONES)),
    "null": (pa.null(), st.none()),
}
_WRONG = st.booleans() | st.integers() | st.floats() | st.text(max_size=3) | st.binary(max_size=3)
_NAMES = st.text(min_size=1, max_size=4)


def _leaf():
    return st.sampled_from(sorted(_LEAVES)).map(lambda name: _LEAVES[name])


def _extend(children):
    def as_list(child):
        typ, values = child
        return pa.list_(typ), st.none() | st.lists(values, max_size=3)

    def as_map(child):
        typ, values = child
        return pa.map_(pa.string(), typ), st.none() | st.dictionaries(st.text(max_size=3), values, max_size=3)

    def as_struct(named):
        fields = [pa.field(name, typ) for name, (typ, _) in named.items()]
        row = st.fixed_dictionaries({}, optional={name: values for name, (_, values) in named.items()})
        extra = st.dictionaries(st.text(max_size=3), st.integers(), max_size=1)
        return pa.struct(fields), st.none() | st.builds(lambda a, b: {**b, **a}, row, extra)

    return (
        children.map(as_list)
        | children.map(as_map)
        | st.dictionaries(_NAMES, children, min_size=1, max_size=3).map(as_struct)
    )


_TYPED = st.recursive(_leaf(), _extend, max_leaves=6)


@st.composite
def _column(draw):
    typ, values = draw(_TYPED)
    return typ, draw(st.lists(st.none() | values | _WRONG.filter(lambda _: draw(st.booleans())), max_size=8))


def _same(a: pa.Array, b: pa.Array) -> bool:
    if a.type != b.type:
        return False
    return a.equals(b) or repr(a.to_pylist()) == repr(b.to_pylist())  # NaNs compare unequal


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_column())
def test_the_json_route_gives_what_pa_array_gives_or_refuses(column):
    typ, values = column
    try:
        ours = columns_via_json({"v": values}, pa.schema([("v", typ)])).column(0).combine_chunks()
    except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return  # refused: the callers convert with pa.array
    theirs = pa.array(values, type=typ)  # must not raise where the JSON route accepted
    assert _same(ours, theirs), (typ, values, ours, theirs)


@pytest.mark.parametrize(
    ("values", "typ"),
    [
        ([float("nan"), float("inf"), -0.0, 5e-324, 1.7976931348623157e308], pa.float64()),
        (["\x00", "é", "\U0001f600", '"\\'], pa.string()),
        ([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)], pa.timestamp("us")),
        (
            [dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=5)))],
            pa.timestamp("us", tz="UTC"),
        ),
        ([dt.date(1, 1, 1), dt.date(9999, 12, 31)], pa.date32()),
        (
            [decimal.Decimal("-99999.99"), decimal.Decimal("1E+2"), decimal.Decimal("0.5")],
            pa.decimal128(7, 2),
        ),
        ([{"a": "1"}, None, {}, [("b", None)]], pa.map_(pa.string(), pa.string())),
        (
            [{"x": [{"k": {"m": 1}}], "y": None}, None],
            pa.struct(
                [("x", pa.list_(pa.map_(pa.string(), pa.map_(pa.string(), pa.int64())))), ("y", pa.date32())]
            ),
        ),
    ],
)
def test_edge_values_come_back_exactly(values, typ):
    ours = columns_via_json({"v": values}, pa.schema([("v", typ)])).column(0).combine_chunks()
    assert _same(ours, pa.array(values, type=typ))


@pytest.mark.parametrize(
    ("values", "typ"),
    [
        ([1.0], pa.int64()),  # pa.array decides what a float means in an integer column
        ([True], pa.int64()),
        (["5"], pa.int64()),
        ([5], pa.string()),
        ([2**63], pa.int64()),
        (["\ud800"], pa.string()),  # a lone surrogate: JSON cannot encode it
        ([b"x"], pa.binary()),
        ([1.5], pa.float32()),
        ([decimal.Decimal("1.234")], pa.decimal128(5, 2)),
        ([decimal.Decimal("NaN")], pa.decimal128(5, 2)),
        ([dt.datetime(2024, 1, 1)], pa.date32()),
        ([dt.date(2024, 1, 1)], pa.timestamp("us")),
        ([dt.datetime(2024, 1, 1)], pa.timestamp("ms")),
        ([{"a": 1}], pa.list_(pa.int64())),
        ([2**53 + 1], pa.float64()),  # the reader would round it; pa.array refuses
        ([{"k": {"0": 9007199254740993}}], pa.map_(pa.string(), pa.struct([("0", pa.float64())]))),
        ([True], pa.float64()),
    ],
)
def test_what_json_cannot_say_exactly_is_refused(values, typ):
    with pytest.raises((TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError)):
        columns_via_json({"v": values}, pa.schema([("v", typ)]))


def test_the_public_conversions_match_pyarrow_on_both_routes():
    typ = pa.struct([("a", pa.int64()), ("t", pa.map_(pa.string(), pa.string()))])
    values = [{"a": 1, "t": {"k": "v"}}, None]
    assert _same(array_from_values(values, typ), pa.array(values, type=typ))
    assert array_from_values((v for v in [1, 2]), pa.int64()).to_pylist() == [1, 2]
    assert array_from_values([], pa.string()).equals(pa.array([], pa.string()))
    assert array_from_values([b"\xff"], pa.binary()).to_pylist() == [b"\xff"]  # pa.array's route
    assert scalar(None, pa.string()) == pa.scalar(None, pa.string())
    assert scalar({"a": 2}, typ) == pa.scalar({"a": 2}, typ)
    schema = pa.schema([("a", pa.int64()), ("m", pa.map_(pa.string(), pa.int64()))])
    table = table_from_columns({"a": [1, None], "m": [None, {"x": 1}]}, schema)
    assert table.equals(pa.table({"a": [1, None], "m": pa.array([None, {"x": 1}], schema.field("m").type)}))
    assert empty_table(schema).equals(schema.empty_table())
    with pytest.raises(pa.ArrowInvalid):  # pa.array's own error, after the JSON route refused
        table_from_columns({"a": ["x"], "m": [None]}, schema)


def test_a_nan_float_is_not_a_refusal():
    (value,) = columns_via_json({"v": [math.nan]}, pa.schema([("v", pa.float64())])).column(0).to_pylist()
    assert math.isnan(value)


_NUMERIC = st.sampled_from(
    ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float32", "float64", "bool"]
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    _NUMERIC,
    st.lists(st.integers(0, 255), max_size=40),
    st.integers(0, 9),
    st.integers(0, 40),
    st.integers(1, 3),
)
def test_numpy_views_and_wraps_match_pyarrow(name, raw, start, length, chunks):
    values = np.array(raw, dtype=np.uint8).astype(name)
    array = pa.array(values).slice(start, length)  # offsets into the buffer, odd for booleans
    assert to_numpy(array).tolist() == array.to_numpy(zero_copy_only=False).tolist()
    chunked = pa.chunked_array([array] * chunks, type=array.type)
    assert to_numpy(chunked).tolist() == chunked.to_numpy().tolist()
    sliced = values[start : start + length]
    assert from_numpy(sliced).equals(pa.array(sliced))
    assert from_numpy(values[::2]).equals(pa.array(values[::2]))  # not contiguous: copied


def test_nulls_and_other_types_take_pyarrows_own_conversion():
    with_null = pa.array([1, None, 3], pa.int64())
    assert np.isnan(to_numpy(with_null)[1])
    assert to_numpy(pa.array(["a", "b"])).tolist() == ["a", "b"]
    assert from_numpy(np.array([1, 2], np.int64), pa.int32()).equals(pa.array([1, 2], pa.int32()))
    assert from_numpy(np.array([], np.int64)).equals(pa.array([], pa.int64()))
    assert to_numpy(pa.chunked_array([], pa.int64())).tolist() == []
