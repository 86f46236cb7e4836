"""The lake side of a comparison: a snapshot read of the mirrored table, its rows as text and
hashed as the source's are (`streamer.verify.values`), in key order so that any key range's
count and hash sum are a slice away.

The whole table is read once per round: its keys, hashes and column texts stay in memory while
its ranges are compared, one table at a time.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.verify.postgres import SourceTable
from streamer.verify.ranges import Key, KeyRange
from streamer.verify.values import lake_row_texts, row_hashes
from table import MorTable


class LakeRows:
    """A mirrored table's rows (`read`: as of now), as text in key order."""

    def __init__(self, rows: pa.Table, source: SourceTable, missing_columns: list[str] | None = None):
        count = rows.num_rows
        names = [r.column.name for r in source.rules]
        #: Source columns the lake table lacks: their values read as NULL, so rows with a value differ.
        self.missing_columns = (
            missing_columns if missing_columns is not None else [n for n in names if n not in rows.column_names]
        )
        columns = [rows.column(n) if n in rows.column_names else pa.nulls(count, pa.string()) for n in names]
        texts = [rule.lake(values) for rule, values in zip(source.rules, columns)]
        key_columns = [k.lake_key(columns[names.index(k.column.name)]) for k in source.key]
        indices = _sort_indices(key_columns) if key_columns else pa.array(np.arange(count))
        self.keys: list[Key] = list(zip(*(c.take(indices).to_pylist() for c in key_columns)))
        self.texts = [t.take(indices) for t in texts]
        self.hashes = row_hashes(lake_row_texts(self.texts, count))

    @classmethod
    def read(cls, path: str, source: SourceTable, storage_options: Mapping[str, str] | None = None) -> LakeRows:
        """A snapshot read of the table at `path`, of the source's columns it has."""
        table = MorTable.load(path, storage_options)
        present = set(table.schema().names)
        names = [r.column.name for r in source.rules]
        return cls(table.snapshot(columns=[n for n in names if n in present]), source)

    def digest(self, r: KeyRange) -> tuple[int, int]:
        """The range's row count and hash sum (modulo 2^64, as `wrapped`)."""
        a, b = self._slice(r)
        return b - a, int(self.hashes[a:b].sum(dtype=np.int64))

    def rows(self, r: KeyRange | None = None, keys: list[Key] | None = None) -> dict[Key, list]:
        """The rows of a range (or of `keys`), as their columns' texts by key."""
        if keys is not None:
            at = [i for i in (self._find(k) for k in keys) if i is not None]
        else:
            a, b = self._slice(r or KeyRange())
            at = list(range(a, b))
        taken = [t.take(pa.array(at, pa.int64())).to_pylist() for t in self.texts]
        return {self.keys[i]: [column[n] for column in taken] for n, i in enumerate(at)}

    def _slice(self, r: KeyRange) -> tuple[int, int]:
        a = 0 if r.low is None else bisect.bisect_left(self.keys, r.low)
        b = len(self.keys) if r.high is None else bisect.bisect_left(self.keys, r.high)
        return a, max(a, b)

    def _find(self, key: Key) -> int | None:
        i = bisect.bisect_left(self.keys, key)
        return i if i < len(self.keys) and self.keys[i] == key else None


def wrapped(total: int) -> int:
    """A sum of signed 64-bit hashes modulo 2^64, as a signed 64-bit number (numpy's sum)."""
    return (total + 2**63) % 2**64 - 2**63


def _sort_indices(key_columns: list[pa.Array]) -> pa.Array:
    table = pa.table({f"k{i}": c for i, c in enumerate(key_columns)})
    return pc.sort_indices(table, sort_keys=[(f"k{i}", "ascending") for i in range(len(key_columns))])
