"""A table's schema evolving with the writer schemas of a `confluent-avro` stream, or with the
rows of Debezium's change events (their Avro through the registry, or Kafka Connect's JSON schemas).

The sink decodes each batch with the current reader schema. Records whose writer schema adds
fields or widens types come out of the decoder undecoded (`streamer.decode.columns.EVOLVING` holds
their schema id), and the batch's tally names those ids. The sink then abandons the batch's commit,
`SchemaEvolution.evolve` evolves the reader schema with those writer schemas
(`streamer.decode.value_schema`), and the batch is decoded and written again with it: the rows written
before the change read the new columns as null, and wider types. The commit's metadata carries
the evolved table schema (Hudi's `schema`) and the reader schema (`VALUE_SCHEMA_KEY`), from
which the next start continues. A crash in between replays the batch and evolves the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from streamer.decode.columns import ADDED_COLUMNS
from streamer.decode.record_decoder import RecordDecoder
from streamer.decode.registry import SchemaRegistryClient
from streamer.decode.value_schema import compare, evolve_json
from streamer.errors import SchemaEvolutionError
from table import CommitMetadata, MorTable

log = logging.getLogger(__name__)

#: extraMetadata key of the value's Avro reader schema the commit's records were decoded with.
VALUE_SCHEMA_KEY = "mor.streamer.value_schema"


class SchemaEvolution:
    """One table's value reader schema, from the one its job started with (`decoder`'s) to the
    latest evolved one; `decoder_for` makes the decoder of a reader schema."""

    def __init__(
        self,
        table_name: str,
        reader_schema: str,
        decoder: RecordDecoder,
        decoder_for: Callable[[str], RecordDecoder],
        registry: SchemaRegistryClient | None,
        strict: bool = False,
    ):
        self.table_name = table_name
        self.reader_schema = reader_schema
        self.decoder = decoder
        self._decoder_for = decoder_for
        self._registry = registry
        self._strict = strict
        self._compared: set[int] = set()  # schema ids that fit, or were refused, stay so as it grows

    @property
    def value_columns(self) -> tuple[str, ...]:
        return self.decoder.value_columns

    def evolve(
        self,
        schema_ids: set[int],
        writer_schemas: dict[int, str] | None = None,
        first_records: dict[int, tuple[str, int, int]] | None = None,
    ) -> bool:
        """Evolve the reader schema with the writer schemas of these ids (given, or else fetched
        from the registry); whether it changed. `first_records` say where each id was met."""
        before = self.reader_schema
        for schema_id in sorted(schema_ids):
            if schema_id not in self._compared:
                text = (writer_schemas or {}).get(schema_id)
                if text is None and self._registry is not None:
                    text = self._registry.schema_by_id(schema_id)
                self._evolve(schema_id, text, (first_records or {}).get(schema_id))
                self._compared.add(schema_id)
        return self.reader_schema != before

    def _evolve(self, schema_id: int, text: str | None, first: tuple[str, int, int] | None) -> None:
        """The reader schema evolved by a writer schema, if that evolves it. One that does not
        fit it any more (two writer schemas adding a field with different types) leaves it be:
        the decoder then refuses its records, saying why; under `strict`, the table stops."""
        if text is None:
            return
        change = compare(
            json.loads(self.reader_schema), json.loads(text), ADDED_COLUMNS, additions_nullable=self._strict
        )
        if change.problem is not None and self._strict:
            where = f" at {first[0]}[{first[1]}]@{first[2]}" if first else ""
            raise SchemaEvolutionError(
                f"{self.table_name}: the change{where} has a row that {change.problem}; the table "
                "stops here, having written nothing of this batch"
            )
        if not change.evolves:
            return
        self.reader_schema = evolve_json(self.reader_schema, change)
        self.decoder = self._decoder_for(self.reader_schema)
        added = [f["name"] for f in change.added]
        widened = [name for name, _ in change.widened]
        log.info(
            "%s: writer schema id %d evolves the table's schema: new column(s) %s, widened %s",
            self.table_name,
            schema_id,
            added,
            widened,
        )


def stored_value_schema(table: MorTable) -> str | None:
    """The value reader schema of the table's latest write that records one."""
    timeline = table.timeline()
    for instant in reversed(timeline.completed_writes()):
        metadata = CommitMetadata.from_json(timeline.read_content(instant))
        if VALUE_SCHEMA_KEY in metadata.extra_metadata:
            return metadata.extra_metadata[VALUE_SCHEMA_KEY]
    return None
