"""Which records delete keys, as a config says, found without Spark: the value's delete field,
tombstones (`decode.tombstones`, or the Debezium envelope's default) and Debezium's change events;
and what a delete needs that the config does not give (each a `ConfigProblem`).

A delete needs every record key and partition field: a change event's `before` may lack them, and
a tombstone has nothing but its Kafka key, so the key must give them. A tombstone carries no
ordering value either: its delete has 0, which orders it by commit, and only an integer ordering
field can take that.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from streamer.config.choices import Envelope, TombstonePolicy
from streamer.config.model import JobConfig
from streamer.decode.columns import DELETE
from streamer.decode.debezium import COLUMN_TYPES, EnvelopeColumns
from streamer.decode.formats import FormatSpec
from streamer.decode.record_decoder import Deletes
from streamer.preflight.problem import ConfigProblem


@dataclass(frozen=True)
class DeletesFound:
    """The config's `Deletes`, the record key and partition fields the Kafka key lacks, and the
    problems of its settings."""

    deletes: Deletes
    key_lacks: list[str]
    problems: list[ConfigProblem]


def row_columns(config: JobConfig, value: FormatSpec) -> pa.Schema:
    """The value's fields, and the envelope's fields kept as columns: what a decoded row holds."""
    kept = EnvelopeColumns(tuple(config.decode.envelope_columns.items())).fields
    return pa.schema([*value.fields(), *kept])


def deletes(config: JobConfig, value: FormatSpec, key: FormatSpec) -> DeletesFound:
    """Which records delete keys, by the value's delete field, the tombstone policy (the
    envelope's default: `delete` when the key gives every record key and partition field, else
    `skip`) and Debezium's change events."""
    d, t = config.decode, config.table
    debezium = d.value.envelope == Envelope.DEBEZIUM
    envelope = EnvelopeColumns(tuple(d.envelope_columns.items())) if debezium else None
    needed = (*t.record_key, *(f for f in t.partition_by if f not in t.record_key))
    lacking = _key_lacks(key, needed)
    problems: list[ConfigProblem] = []

    def problem(where: str, text: str, fix: str) -> None:
        problems.append(ConfigProblem(config.config_path, where, text, fix))

    tombstones = d.tombstones
    if tombstones is None:
        tombstones = (
            TombstonePolicy.BAD if not debezium else (TombstonePolicy.SKIP if lacking else TombstonePolicy.DELETE)
        )
    if tombstones == TombstonePolicy.DELETE:
        if lacking:
            problem(
                "decode.tombstones",
                f"delete needs a key that gives every record key and partition field; the "
                f"key ({d.key.format}) lacks {lacking}",
                "decode a key that has them (decode.key), or set decode.tombstones: skip",
            )
        columns = {f.name: f.type for f in value.fields()}
        columns.update({name: COLUMN_TYPES[field] for field, name in d.envelope_columns.items()})
        ordering = columns.get(t.ordering_field)
        if ordering is not None and not pa.types.is_integer(ordering):
            problem(
                "decode.tombstones",
                f"delete needs an integer table.ordering_field ('{t.ordering_field}' is "
                f"{ordering}): a tombstone carries no ordering value, so its delete has 0, which orders it by "
                "commit, as Hudi's deletes without one",
                "order by an integer column (with the Debezium "
                "envelope, the log position: decode.envelope_columns), or set decode.tombstones: skip",
            )
    if config.transform and not debezium and tombstones != TombstonePolicy.DELETE:
        # the writer reads the delete field, if any, of the transform's rows
        return DeletesFound(Deletes(tombstones), lacking, problems)
    if config.transform and t.delete_field is not None and t.delete_field not in value.fields().names:
        problem(
            "decode.tombstones",
            f"delete marks deletes in table.delete_field '{t.delete_field}', which the "
            "value does not have (the transform makes it)",
            "declare the field in the value, or leave "
            "table.delete_field out and keep the column '_delete' of source in the transform",
        )
    return DeletesFound(
        Deletes(tombstones, envelope, needed, t.ordering_field, t.delete_field or DELETE), lacking, problems
    )


def _key_lacks(key: FormatSpec, needed: tuple[str, ...]) -> list[str]:
    """The fields of `needed` a decoded Kafka key does not give: a structured key gives its fields,
    a string key the record key when it is one field."""
    key_type = key.decoded_type()
    if key_type is not None and pa.types.is_struct(key_type):
        return [f for f in needed if key_type.get_field_index(f) < 0]
    if key_type is not None and pa.types.is_string(key_type) and len(needed) == 1:
        return []
    return list(needed)
