"""JSON laid out as Hudi's Jackson writes it (DefaultPrettyPrinter).

Commit metadata and hashing metadata are read by JSON parsers, which do not care about layout;
writing Jackson's layout keeps our files byte-comparable with the ones Hudi writes.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from table.errors import UnsupportedTypeError

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def jackson_dumps(value: Any) -> str:
    """Objects one entry per line, indented two spaces per level with `"name" : value`; arrays
    inline as `[ a, b ]`; empty `{ }` and `[ ]`; no trailing newline."""
    return _pretty(value, 0)


def _quote(text: str) -> str:
    out = []
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _pretty(value: Any, level: int) -> str:
    if isinstance(value, dict):
        if not value:
            return "{ }"
        indent = "  " * (level + 1)
        entries = [f"{indent}{_quote(str(k))} : {_pretty(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(entries) + "\n" + "  " * level + "}"
    if isinstance(value, (list, tuple)):
        return "[ " + ", ".join(_pretty(v, level) for v in value) + " ]" if value else "[ ]"
    if isinstance(value, enum.Enum):
        return _quote(str(value.value))
    if isinstance(value, str):
        return _quote(value)
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise UnsupportedTypeError(f"cannot write {type(value).__name__} as JSON")
