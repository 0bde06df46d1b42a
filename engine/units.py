"""Byte sizes written by people: ``134217728``, ``128m``, ``128MB``, ``128 MiB``, ``1.5g``.

One parser for every place a size is typed (the CLI, ``config/tables.yaml``, Spark options and
job arguments). Units are binary, as Delta Spark's and Spark's byte strings are: ``k``, ``kb``
and ``kib`` all mean 1024 bytes.
"""

from __future__ import annotations

import re
from typing import Any

from deltaplane.engine.errors import InvalidArgumentError

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_EXAMPLES = "bytes, or a number with a unit: 512k, 128MB, 128MiB, 1g"


def parse_size(value: Any, what: str = "size") -> int:
    """``value`` as a positive number of bytes; ``InvalidArgumentError`` (a ``ValueError``)
    naming ``what`` when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidArgumentError(f"{what} must be a size ({_EXAMPLES}), got {value!r}")
    if isinstance(value, int | float):
        number = value
    else:
        match = _SIZE.match(value)
        if match is None:
            raise InvalidArgumentError(f"{what} must be a size ({_EXAMPLES}), got {value!r}")
        number = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if number != number or number < 1:  # NaN, zero, negative, below one byte
        raise InvalidArgumentError(f"{what} must be a positive size ({_EXAMPLES}), got {value!r}")
    return int(number)
