"""Debezium's change events to table rows, a whole Arrow batch at a time.

A change event is an envelope around the row: `before`, `after`, `op`, `source` (where the change
came from, with its position in the database's log) and `ts_ms`. The value decoders read the
envelope into the Arrow type `envelope_type` (JSON with or without Kafka Connect's schemas, Avro
through the registry; JSON reads most events into the narrower `common_envelope_type` and only
the others whole). JSON with the native decoder reads a batch in one pass into
`in_place_envelope_type` instead, `before` into `after`'s columns, when all its events are
changes of rows. `ChangeEvents.unpack` turns a batch of envelopes into the table's rows:

- `c` (create), `r` (a read by the initial snapshot) and `u` (update) upsert `after`;
- `d` deletes the row's key, taken from `before` (the record decoder fills what `before` lacks
  from the Kafka key);
- `t` (truncate) and `m` (a logical decoding message) write nothing: they are skipped, counted
  and logged, for a lake table mirrors a database row by row and a truncate names no rows;
- messages that are not changes of a row, Debezium's heartbeats, schema changes and transaction
  boundaries, are skipped the same way; anything else is a bad record that says why.

Changes of one key are ordered by the database's log position (`position`): PostgreSQL's LSN;
MySQL's binlog file number and position as one number, `file * 10**12 + pos`, so that
`mysql-bin.000003` at 154 is 3000000000154; for other connectors the source's `ts_ms`, the
time of the change in the database, which is the best they give in one comparable number.
"""

from __future__ import annotations

from dataclasses import dataclass

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamer.config.choices import EnvelopeField
from streamer.decode.native_json import TARGET_READ, alias

UPSERT_OPS = ("c", "r", "u")
DELETE_OP = "d"
TOMBSTONE = "tombstone"
TRUNCATE = "truncate"
MESSAGE = "message"
HEARTBEAT = "heartbeat"
SCHEMA_CHANGE = "schema_change"
TRANSACTION = "transaction"
#: Ops that write nothing, by the kind of record they are counted as.
SKIPPED_OPS = {"t": TRUNCATE, "m": MESSAGE}
#: Every kind of record that writes nothing: what the tally counts and the docs explain.
SKIP_KINDS = (TOMBSTONE, TRUNCATE, MESSAGE, HEARTBEAT, SCHEMA_CHANGE, TRANSACTION)

#: The connectors (`source.connector`) whose log position has fields of its own.
POSTGRESQL, MYSQL = "postgresql", "mysql"
#: Connectors whose positions are a binlog file and offset: MySQL's, and MariaDB's own.
BINLOG_CONNECTORS = (MYSQL, "mariadb")
#: MySQL's binlog position as one number: the file's number times this, plus the position in it.
BINLOG_FILE_FACTOR = 10**12
_BINLOG_NUMBER = r"\.(?P<number>\d+)$"

SOURCE_TYPE = pa.struct(
    [
        ("connector", pa.string()),
        ("lsn", pa.int64()),  # PostgreSQL
        ("file", pa.string()),  # MySQL
        ("pos", pa.int64()),
        ("ts_ms", pa.int64()),
    ]
)
#: Arrow types of the envelope fields that can become columns.
COLUMN_TYPES = {
    EnvelopeField.POSITION: pa.int64(),
    EnvelopeField.OP: pa.string(),
    EnvelopeField.SOURCE_TS_MS: pa.int64(),
    EnvelopeField.TS_MS: pa.int64(),
}


def envelope_type(row: pa.StructType) -> pa.StructType:
    """What a value decoder reads a change event into. `ddl` (schema changes) and `status`
    (transaction boundaries) tell messages that are not row changes apart."""
    return pa.struct(
        [
            ("before", row),
            ("after", row),
            ("source", SOURCE_TYPE),
            ("op", pa.string()),
            ("ts_ms", pa.int64()),
            ("ddl", pa.string()),
            ("status", pa.string()),
        ]
    )


def common_envelope_type(row: pa.StructType, columns: EnvelopeColumns) -> pa.StructType:
    """What most change events need read of their envelope: a change of a row (`after`, `op`)
    from PostgreSQL (its LSN) and the envelope fields kept as columns. A parser of text reads
    fewer fields faster; the events that need more are read again whole (`needs_whole`)."""
    kept = {field for field, _ in columns.columns}
    source = []
    if EnvelopeField.POSITION in kept:
        source += [SOURCE_TYPE.field("connector"), SOURCE_TYPE.field("lsn")]
    if EnvelopeField.SOURCE_TS_MS in kept:
        source.append(SOURCE_TYPE.field("ts_ms"))
    fields = [pa.field("after", row), pa.field("op", pa.string())]
    if source:
        fields.append(pa.field("source", pa.struct(source)))
    if EnvelopeField.TS_MS in kept:
        fields.append(pa.field("ts_ms", pa.int64()))
    return pa.struct(fields)


def needs_whole(common: pa.StructArray) -> np.ndarray:
    """Which events read into `common_envelope_type` need their whole envelope: deletes (their
    `before`), messages without an op (`ddl` and `status` tell what they are) and changes from
    another connector than PostgreSQL (their position is elsewhere in `source`)."""
    needed = pc.fill_null(pc.equal(pc.struct_field(common, "op"), DELETE_OP), True)
    source = common.type.get_field_index("source")
    if source >= 0 and common.type.field(source).type.get_field_index("connector") >= 0:
        connector = pc.struct_field(pc.struct_field(common, "source"), "connector")
        needed = pc.or_(needed, pc.fill_null(pc.not_equal(connector, POSTGRESQL), False))
    return np.asarray(pc.and_(common.is_valid(), needed), dtype=bool)


def in_place_envelope_type(row: pa.StructType, columns: EnvelopeColumns) -> pa.StructType:
    """What the native decoder reads a change event into in one pass: the row in `after`'s
    columns, `before`'s where `after` is null (a delete), with `before` the bits of which of the
    two were there (`native_json.alias`); `source` whole when the log position is kept (every
    connector's), and the envelope fields kept as columns."""
    kept = {field for field, _ in columns.columns}
    source = list(SOURCE_TYPE) if EnvelopeField.POSITION in kept else []
    if EnvelopeField.SOURCE_TS_MS in kept and not source:
        source = [SOURCE_TYPE.field("ts_ms")]
    fields = [alias("before", "after"), pa.field("after", row), pa.field("op", pa.string())]
    if source:
        fields.append(pa.field("source", pa.struct(source)))
    if EnvelopeField.TS_MS in kept:
        fields.append(pa.field("ts_ms", pa.int64()))
    return pa.struct(fields)


def in_place_needs_whole(events: pa.StructArray) -> np.ndarray:
    """Which events read into `in_place_envelope_type` need their whole envelope: messages that
    are not a change of a row, and deletes with an `after`, whose `before` it took the place of."""
    op = pc.struct_field(events, "op")
    change = _flag(pc.is_in(op, pa.array((*UPSERT_OPS, DELETE_OP))))
    delete_with_after = _flag(pc.equal(op, DELETE_OP)) & (_read(events) & TARGET_READ != 0)
    return np.asarray(events.is_valid(), dtype=bool) & (~change | delete_with_after)


@dataclass(frozen=True)
class EnvelopeColumns:
    """The envelope fields kept as table columns: (field, column name) pairs."""

    columns: tuple[tuple[EnvelopeField, str], ...] = ()

    @property
    def fields(self) -> list[pa.Field]:
        return [pa.field(name, COLUMN_TYPES[field]) for field, name in self.columns]


@dataclass
class Unpacked:
    """A batch of change events as rows: the row fields then the envelope columns, which rows
    delete their key, which write nothing (`skipped`: the kind) and which are bad (`errors`)."""

    fields: list[pa.Array]
    delete: np.ndarray
    skipped: pa.Array
    errors: dict[int, str]


class ChangeEvents:
    """Unpacks decoded envelopes (`envelope_type(row)`) into rows of `row` plus `columns`."""

    def __init__(self, row: pa.StructType, columns: EnvelopeColumns):
        self.row = row
        self.columns = columns

    @property
    def output_fields(self) -> list[pa.Field]:
        return [*(f.with_nullable(True) for f in self.row), *self.columns.fields]

    def unpack(self, envelopes: pa.StructArray) -> Unpacked:
        """Null envelopes (tombstones, bad records) unpack to null rows that are neither deletes
        nor skipped: the record decoder decides about them."""
        if envelopes.type.field("before").type == pa.int8():  # read in place: changes of rows only
            return self._unpack_in_place(envelopes)
        op = pc.struct_field(envelopes, "op")
        present = np.asarray(envelopes.is_valid())
        upsert = _flag(pc.is_in(op, pa.array(UPSERT_OPS))) & present
        delete = _flag(pc.equal(op, DELETE_OP)) & present
        skipped = self._skipped(envelopes, present)
        errors = self._errors(envelopes, op, present, upsert, delete, skipped)
        after = pc.struct_field(envelopes, "after")
        if delete.any():
            before, takes_before = pc.struct_field(envelopes, "before"), pa.array(delete)
            fields = [
                pc.if_else(takes_before, pc.struct_field(before, i), pc.struct_field(after, i))
                for i in range(self.row.num_fields)
            ]
        else:
            fields = [pc.struct_field(after, i) for i in range(self.row.num_fields)]
        fields += [self._column(field, envelopes) for field, _ in self.columns.columns]
        return Unpacked(fields, delete, skipped, errors)

    def _unpack_in_place(self, events: pa.StructArray) -> Unpacked:
        """Events of `in_place_envelope_type`, each a change of a row (`in_place_needs_whole`):
        the row is in `after`'s columns, a delete's `before` too."""
        op = pc.struct_field(events, "op")
        present = np.asarray(events.is_valid(), dtype=bool)
        upsert = _flag(pc.is_in(op, pa.array(UPSERT_OPS))) & present
        delete = _flag(pc.equal(op, DELETE_OP)) & present
        no_after = upsert & (_read(events) & TARGET_READ == 0)
        errors = {row: _no_after(op, row) for row in np.flatnonzero(no_after).tolist()}
        after = pc.struct_field(events, "after")
        fields = [pc.struct_field(after, i) for i in range(self.row.num_fields)]
        fields += [self._column(field, events) for field, _ in self.columns.columns]
        return Unpacked(fields, delete, pa.nulls(len(events), pa.string()), errors)

    def _skipped(self, envelopes: pa.StructArray, present: np.ndarray) -> pa.Array:
        op = pc.struct_field(envelopes, "op")
        if _flag(pc.is_in(op, pa.array((*UPSERT_OPS, DELETE_OP)))).all():
            return pa.nulls(len(envelopes), pa.string())  # changes of rows only, as most batches are
        kinds = pc.if_else(pc.is_null(op), _non_change_kind(envelopes), _skip_kind_of_op(op))
        return pc.if_else(pa.array(present), kinds, pa.scalar(None, pa.string()))

    def _errors(
        self,
        envelopes: pa.StructArray,
        op: pa.Array,
        present: np.ndarray,
        upsert: np.ndarray,
        delete: np.ndarray,
        skipped: pa.Array,
    ) -> dict[int, str]:
        known = upsert | delete | _flag(skipped.is_valid())
        no_after = upsert & ~_flag(pc.struct_field(envelopes, "after").is_valid())
        errors = {}
        for row in np.flatnonzero(present & ~known).tolist():
            name = op[row].as_py()
            errors[row] = (
                "not a Debezium change event: it has no op"
                if name is None
                else f"unknown Debezium op {name!r} (expected c, r, u, d, t or m)"
            )
        for row in np.flatnonzero(no_after).tolist():
            errors[row] = _no_after(op, row)
        return errors

    def _column(self, field: EnvelopeField, envelopes: pa.StructArray) -> pa.Array:
        if field == EnvelopeField.POSITION:
            return log_position(pc.struct_field(envelopes, "source"))
        if field == EnvelopeField.OP:
            return pc.struct_field(envelopes, "op")
        if field == EnvelopeField.SOURCE_TS_MS:
            return pc.struct_field(pc.struct_field(envelopes, "source"), "ts_ms")
        return pc.struct_field(envelopes, "ts_ms")


def log_position(source: pa.StructArray) -> pa.Array:
    """Each change's position in its database's log, comparable among the changes of one
    connector (see the module's docstring); null where the source does not give it."""
    connector = pc.struct_field(source, "connector")
    is_pg = pc.fill_null(pc.equal(connector, POSTGRESQL), False)
    lsn = pc.struct_field(source, "lsn")
    if pc.all(pc.or_(is_pg, pc.is_null(connector))).as_py():  # PostgreSQL's (and tombstones, without source)
        return lsn
    number = pc.struct_field(pc.extract_regex(pc.struct_field(source, "file"), _BINLOG_NUMBER), 0)
    binlog = pc.add(
        pc.multiply(pc.cast(number, pa.int64(), safe=False), BINLOG_FILE_FACTOR), pc.struct_field(source, "pos")
    )
    is_mysql = pc.fill_null(pc.is_in(connector, pa.array(BINLOG_CONNECTORS)), False)
    return pc.if_else(is_pg, lsn, pc.if_else(is_mysql, binlog, pc.struct_field(source, "ts_ms")))


def _skip_kind_of_op(op: pa.Array) -> pa.Array:
    kind = pa.scalar(None, pa.string())
    for name, skip in SKIPPED_OPS.items():
        kind = pc.if_else(pc.fill_null(pc.equal(op, name), False), skip, kind)
    return kind


def _non_change_kind(envelopes: pa.StructArray) -> pa.Array:
    """What a message without an op is: a schema change (it has `ddl`), a transaction boundary
    (`status`), a heartbeat (only `ts_ms`), or null: not a Debezium message."""
    no_row = pc.and_(pc.is_null(pc.struct_field(envelopes, "before")), pc.is_null(pc.struct_field(envelopes, "after")))
    no_source = pc.is_null(pc.struct_field(envelopes, "source"))
    heartbeat = pc.and_(pc.and_(no_row, no_source), pc.is_valid(pc.struct_field(envelopes, "ts_ms")))
    kind = pc.if_else(heartbeat, HEARTBEAT, pa.scalar(None, pa.string()))
    kind = pc.if_else(pc.is_valid(pc.struct_field(envelopes, "status")), TRANSACTION, kind)
    return pc.if_else(pc.is_valid(pc.struct_field(envelopes, "ddl")), SCHEMA_CHANGE, kind)


def _no_after(op: pa.Array, row: int) -> str:
    return f"Debezium op {op[row].as_py()!r} without an `after` row"


def _read(events: pa.StructArray) -> np.ndarray:
    """The bits of which of `before` and `after` each event read in place had."""
    return np.asarray(pc.fill_null(pc.struct_field(events, "before"), 0), dtype=np.int8)


def _flag(mask: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(mask, False), dtype=bool)


def envelope_row(envelope: dict) -> dict | None:
    """The row's record of an Avro change event schema (the record branch of `after`, with the
    named types it uses defined inline); None for a schema that is not a change event's."""
    expanded = fastavro.schema.expand_schema(envelope)
    if not isinstance(expanded, dict) or expanded.get("type") != "record":
        return None
    for field in expanded.get("fields", ()):
        if field["name"] == "after":
            branches = field["type"] if isinstance(field["type"], list) else [field["type"]]
            return next((b for b in branches if isinstance(b, dict) and b.get("type") == "record"), None)
    return None
