"""JSON laid out as Hudi's Jackson writes it (DefaultPrettyPrinter).

Commit metadata and hashing metadata are read by JSON parsers, which do not care about layout;
writing Jackson's layout keeps our files byte-comparable with the ones Hudi writes.
"""

from __future__ import annotations

import enum
import json
import re
from functools import lru_cache
from typing import Any

from table.errors import UnsupportedTypeError

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def jackson_dumps(value: Any) -> str:
    """Objects one entry per line, indented two spaces per level with `"name" : value`; arrays
    inline as `[ a, b ]`; empty `{ }` and `[ ]`; no trailing newline."""
    return _pretty(value, 0)


#: Characters Jackson escapes differently from `json.dumps` (as \\uXXXX in upper case).
_CONTROL = re.compile(r"[\x00-\x1f]")


@lru_cache(maxsize=1024)
def _quote_key(key: str) -> str:
    """Object keys repeat in every entry of a list (the write stats): quoted once."""
    return _quote(key)


def _quote(text: str) -> str:
    if _CONTROL.search(text) is None:  # the common case: the C encoder, which agrees with Jackson here
        return json.dumps(text, ensure_ascii=False)
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
    kind = type(value)
    if kind is dict:
        if not value:
            return "{ }"
        indent = "  " * (level + 1)
        entries = [f"{indent}{_quote_key(str(k))} : {_scalar(v) if type(v) in _SCALARS else _pretty(v, level + 1)}"
                   for k, v in value.items()]
        return "{\n" + ",\n".join(entries) + "\n" + "  " * level + "}"
    if kind is list or kind is tuple:
        return "[ " + ", ".join(_pretty(v, level) for v in value) + " ]" if value else "[ ]"
    if kind in _SCALARS:
        return _scalar(value)
    if isinstance(value, enum.Enum):
        return _quote(str(value.value))
    if isinstance(value, dict):
        return _pretty(dict(value), level)
    if isinstance(value, (str, bool, int, float)):
        return _scalar(value)
    raise UnsupportedTypeError(f"cannot write {type(value).__name__} as JSON")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _quote(value)
    if value is None or isinstance(value, (bool, float)):
        return json.dumps(value)
    return str(int(value))


_SCALARS = frozenset({str, int, float, bool, type(None)})
