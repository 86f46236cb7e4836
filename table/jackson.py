"""JSON laid out as Hudi's Jackson writes it (DefaultPrettyPrinter).

Commit metadata and hashing metadata are read by JSON parsers, which do not care about layout;
writing Jackson's layout keeps our files byte-comparable with the ones Hudi writes.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from json.encoder import encode_basestring
from typing import Any

from table.errors import UnsupportedTypeError

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def jackson_dumps(value: Any) -> str:
    """Objects one entry per line, indented two spaces per level with `"name" : value`; arrays
    inline as `[ a, b ]`; empty `{ }` and `[ ]`; no trailing newline."""
    return _pretty(value, 0)


class Laid(str):
    """A value already laid out by `jackson_object` at its level: written as it is."""


def jackson_object(keys: tuple[str, ...], values: Sequence[Any], level: int) -> Laid:
    """An object of these keys and values, laid out as `jackson_dumps` lays it out at `level`:
    what a writer of thousands of like objects (a commit's write stats) renders without building
    a dict of each. Objects of the same keys share one skeleton, filled with their values."""
    return laid_object(keys, jackson_values(values, level), level)


def jackson_values(values: Sequence[Any], level: int) -> list[str]:
    """Each value laid out as `jackson_dumps` lays out a member of an object at `level`."""
    laid = []
    for value in values:
        scalar = _SCALARS.get(type(value))
        laid.append(scalar(value) if scalar else _pretty(value, level + 1))
    return laid


def laid_object(keys: tuple[str, ...], laid: Sequence[str], level: int) -> Laid:
    """An object of these keys and their values laid out already (`jackson_values`)."""
    if not keys:
        return Laid("{ }")
    return Laid(_skeleton(keys, level) % tuple(laid))


@lru_cache(maxsize=64)
def _skeleton(keys: tuple[str, ...], level: int) -> str:
    """An object of `keys` at `level` with a `%s` where each value goes."""
    indent = "  " * (level + 1)
    lines = [f"{indent}{_quote(key).replace('%', '%%')} : %s" for key in keys]
    return "{\n" + ",\n".join(lines) + "\n" + "  " * level + "}"


@lru_cache(maxsize=1024)
def _quote_key(key: str) -> str:
    """Object keys repeat in every entry of a list (the write stats): quoted once."""
    return _quote(key)


def _quote(text: str) -> str:
    quoted = encode_basestring(text)
    if "\\u00" not in quoted:  # the common case: no control character, where Jackson agrees with the C encoder
        return quoted
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
        entries = []
        for k, v in value.items():
            scalar = _SCALARS.get(type(v))
            entries.append(f"{indent}{_quote_key(str(k))} : {scalar(v) if scalar else _pretty(v, level + 1)}")
        return "{\n" + ",\n".join(entries) + "\n" + "  " * level + "}"
    if kind is list or kind is tuple:
        return "[ " + ", ".join(_pretty(v, level) for v in value) + " ]" if value else "[ ]"
    if kind is Laid:
        return value
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        return scalar(value)
    if isinstance(value, enum.Enum):
        return _quote(str(value.value))
    if isinstance(value, dict):
        return _pretty(dict(value), level)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise UnsupportedTypeError(f"cannot write {type(value).__name__} as JSON")


#: How each plain value is written, by its exact type.
_SCALARS: dict[type, Callable[[Any], str]] = {
    str: _quote,
    int: int.__repr__,
    bool: lambda b: "true" if b else "false",
    float: json.dumps,
    type(None): lambda _: "null",
}
