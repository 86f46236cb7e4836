"""One mirrored table against its source table: row counts and hash sums over primary-key
ranges, the ranges that differ bisected down to the rows, and the rows that differ re-checked
once the table has caught up, so that lag is not reported as a difference.

How lag is told apart: a round reads the source in one snapshot, at a WAL position. When rows
differ, `caught_up(position)` waits until the connector has confirmed every change before that
position (its replication slot) and the table has committed every offset Kafka then held for its
topic. A new round then reads the differing keys again on both sides. A key whose source row
changed between rounds (the workload moved on) is checked again, up to `ROUNDS` rounds; what
differs in the last round is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from streamer.verify.lake import LakeRows, wrapped
from streamer.verify.postgres import PostgresSource, Snapshot, SourceTable
from streamer.verify.ranges import Key, KeyRange

#: Ranges a range that differs is cut into; rows of a range fetched whole instead of cut again.
FAN_OUT = 16
LEAF_ROWS = 2048
#: Rounds of re-checking keys that differ (the first one included).
ROUNDS = 3
#: Keys that differ read again one by one after catching up; more are compared whole again.
RECHECKED_BY_KEY = 10_000


@dataclass
class TableVerdict:
    """What a comparison found for one table."""

    source: str  # schema.table
    lake: str  # the table's path
    rows: int = 0  # the source's, in the first round
    ranges: int = 0  # key ranges compared by digest, bisection included
    missing: list[Key] = field(default_factory=list)  # in the source, not in the lake
    extra: list[Key] = field(default_factory=list)  # in the lake, not in the source
    different: dict[Key, list[str]] = field(default_factory=dict)  # the columns that differ
    rechecked: int = 0  # keys read again after the table caught up
    note: str | None = None  # why the comparison could not be made, or what limits it
    skipped: bool = False  # a table the mirror does not take by design (no primary key): not a difference
    seconds: float = 0.0
    key_columns: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.different) and self.note is None

    @property
    def differing_rows(self) -> int:
        return len(self.missing) + len(self.extra) + len(self.different)

    def lines(self, shown: int = 10) -> list[str]:
        """The verdict, a line, then a line per differing row (the first `shown` of each kind)."""
        head = f"{self.source} -> {self.lake}:"
        if self.skipped:
            return [f"{head} skipped: {self.note}"]
        if self.note is not None and not self.differing_rows:
            return [f"{head} NOT COMPARED: {self.note}"]
        took = f"{self.rows:,} rows, {self.ranges} ranges, {self.seconds:.1f}s"
        if self.equal:
            return [f"{head} equal ({took})"]
        out = [
            f"{head} DIFFERS: {len(self.missing):,} missing, {len(self.extra):,} extra, "
            f"{len(self.different):,} different ({took}; {self.rechecked:,} re-checked after catching up)"
        ]
        for kind, keys in (("missing", self.missing), ("extra", self.extra)):
            out += [f"  {kind} {self._key(k)}" for k in sorted(keys)[:shown]]
        out += [f"  different {self._key(k)}: {', '.join(c)}" for k, c in sorted(self.different.items())[:shown]]
        if self.note is not None:
            out.append(f"  note: {self.note}")
        return out

    def _key(self, key: Key) -> str:
        return "(" + ", ".join(f"{c}={v!r}" for c, v in zip(self.key_columns, key)) + ")"


def compare_table(
    source: PostgresSource,
    table: SourceTable,
    lake_path: str,
    storage_options: Mapping[str, str] | None,
    caught_up: Callable[[int], str | None],
) -> TableVerdict:
    """Compare `table` with the lake table at `lake_path`; `caught_up(position)` waits until the
    lake holds every change before `position` and says why not when it cannot (see the module doc)."""
    started = time.monotonic()
    verdict = TableVerdict(f"{table.schema}.{table.name}", lake_path, key_columns=[k.column.name for k in table.key])
    if not table.key:
        verdict.note = "the source table has no primary key, so the mirror does not take it (see message.key.columns)"
        verdict.skipped = True
        return verdict
    with source.snapshot() as snap:
        lake = LakeRows.read(lake_path, table, storage_options)
        verdict.rows = snap.count(table)
        differing = _differing_keys(snap, table, lake, verdict)
        position = snap.position
        seen = _source_rows(snap, table, differing)
    for _ in range(ROUNDS - 1):
        if not differing:
            break
        why_not = caught_up(position)
        if why_not is not None:
            verdict.note = f"rows differ, and the table could not be confirmed caught up: {why_not}"
            break
        verdict.rechecked += len(differing)
        with source.snapshot() as snap:
            lake = LakeRows.read(lake_path, table, storage_options)
            position = snap.position
            if seen is None:  # too many to read again one by one: the whole table again
                differing = _differing_keys(snap, table, lake, verdict)
                seen = _source_rows(snap, table, differing)
                continue
            now = _source_rows(snap, table, differing)
        assert now is not None
        still = _row_differences(now, lake.rows(keys=sorted(differing)), table)
        moving = {k for k in still if now.get(k) != seen.get(k)}
        differing, seen = still, now
        if not moving:
            break
    if lake.missing_columns:
        verdict.note = f"the lake table lacks the source's column(s) {lake.missing_columns}"
    _classify(verdict, differing)
    verdict.seconds = time.monotonic() - started
    return verdict


def _source_rows(snap: Snapshot, table: SourceTable, keys: dict[Key, Difference]) -> dict[Key, list] | None:
    """The source's rows of `keys`, to read again after catching up; None when there are more
    than `RECHECKED_BY_KEY` (a table far behind: the next round compares it whole)."""
    if len(keys) > RECHECKED_BY_KEY:
        return None
    return snap.rows(table, keys=sorted(keys))


def _differing_keys(snap: Snapshot, table: SourceTable, lake: LakeRows, verdict: TableVerdict) -> dict[Key, Difference]:
    """The keys whose rows differ between the snapshot and the lake, by bisecting ranges."""
    found: dict[Key, Difference] = {}
    pending = [KeyRange()]
    while pending:
        whole = pending.pop()
        cut = whole.cut(snap.split_points(table, whole, FAN_OUT))
        digests = snap.digests(table, cut)
        verdict.ranges += len(cut)
        for r, (count, total) in zip(cut, digests):
            if (count, wrapped(total)) == lake.digest(r):
                continue
            if count <= LEAF_ROWS or len(cut) == 1:
                found.update(_row_differences(snap.rows(table, r), lake.rows(r), table))
            else:
                pending.append(r)
    return found


#: How a key differs: "missing" (in the source only), "extra" (in the lake only) or
#: "different", with the columns whose values differ.
Difference = tuple[str, list[str]]


def _row_differences(source: dict[Key, list], lake: dict[Key, list], table: SourceTable) -> dict[Key, Difference]:
    names = [r.column.name for r in table.rules]
    out: dict[Key, Difference] = {}
    for key in source.keys() | lake.keys():
        a, b = source.get(key), lake.get(key)
        if b is None:
            out[key] = ("missing", [])
        elif a is None:
            out[key] = ("extra", [])
        elif a != b:
            out[key] = ("different", [n for n, x, y in zip(names, a, b) if x != y])
    return out


def _classify(verdict: TableVerdict, differing: dict[Key, Difference]) -> None:
    for key, (kind, columns) in sorted(differing.items()):
        if kind == "missing":
            verdict.missing.append(key)
        elif kind == "extra":
            verdict.extra.append(key)
        else:
            verdict.different[key] = columns
