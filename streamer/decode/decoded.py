"""What the decoder of every format returns, and how it finds the bad records among its input.

A format's decoder has `decode(raw: pa.BinaryArray) -> Decoded`: one decoded record per row of
`raw`, null where the input is null or bad, and the reasons of the bad ones by row. A record is bad
when its bytes do not read (`UndecodableRecordError`) or when what they read to does not convert to the Arrow
type; the reason names the innermost field at fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from streamer.errors import StreamerError

_PREVIEW_CHARS = 60


class UndecodableRecordError(StreamerError, ValueError):
    """This record cannot be decoded; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


Decoded = tuple[pa.Array, dict[int, str]]
"""A column of decoded records (null where the input is null or bad) and the reasons by row."""


def scatter(values: pa.Array, rows: np.ndarray, length: int) -> pa.Array:
    """`values[k]` at row `rows[k]`, null in the other rows of a column of `length`; `values`
    itself when they are every row in order, as when a whole batch decodes."""
    if len(rows) == length == len(values) and (length == 0 or (rows[0] == 0 and (np.diff(rows) == 1).all())):
        return values
    index = np.full(length, -1, dtype=np.int64)
    index[rows] = np.arange(len(rows))
    return values.take(pa.array(index, mask=index < 0))


def gather(parts: list[tuple[np.ndarray, pa.Array]], length: int) -> pa.Array:
    """The parts' values (rows, values) at their rows, in one column of `length`; a single part
    is not copied first."""
    rows, values = parts[0]
    if len(parts) > 1:
        rows = np.concatenate([rows for rows, _ in parts])
        values = pa.concat_arrays([values for _, values in parts])
    return scatter(values, rows, length)


def decode_each(raw: pa.Array, read: Callable[[bytes], Any], arrow_type: pa.DataType) -> Decoded:
    """Reads each non-null record to a Python value with `read`, then converts them all to Arrow
    at once; one by one only when that fails, to find the records at fault."""
    values = raw.to_pylist()
    errors: dict[int, str] = {}
    for row, data in enumerate(values):
        if data is not None:
            try:
                values[row] = read(data)
            except UndecodableRecordError as bad:
                values[row] = None
                errors[row] = bad.reason
    try:
        return pa.array(values, arrow_type), errors
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        for row, value in enumerate(values):
            problem = _conversion_problem(value, arrow_type, _converts_from_python)
            if problem is not None:
                values[row] = None
                errors[row] = problem
        return pa.array(values, arrow_type), errors


def _conversion_problem(
    value: Any, arrow_type: pa.DataType, converts: Callable[[Any, pa.DataType], bool], path: str = ""
) -> str | None:
    """Why `value` does not convert to `arrow_type`; None when it converts."""
    if value is None or converts(value, arrow_type):
        return None
    return why_not(value, arrow_type, converts, path)


def why_not(value: Any, arrow_type: pa.DataType, converts: Callable[[Any, pa.DataType], bool], path: str = "") -> str:
    """Why `value`, which does not convert to `arrow_type`, does not: naming the innermost field
    at fault."""
    if pa.types.is_struct(arrow_type) and isinstance(value, dict):
        for field in arrow_type:
            field_path = f"{path}.{field.name}" if path else field.name
            child = value.get(field.name)
            if child is None and not field.nullable:
                return not_null_reason(field_path)
            problem = _conversion_problem(child, field.type, converts, field_path)
            if problem is not None:
                return problem
    where = f"field {path!r}: " if path else ""
    return f"{where}expected {arrow_type}, got {preview(value)}"


def _converts_from_python(value: Any, arrow_type: pa.DataType) -> bool:
    try:
        pa.array([value], arrow_type)
        return True
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return False


def preview(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "..."


def decode_utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UndecodableRecordError(f"not valid UTF-8: {e.reason} at byte {e.start}") from None


def not_null_reason(path: str) -> str:
    return f"field {path!r} is missing or null but declared NOT NULL"
